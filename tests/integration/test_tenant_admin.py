"""The admin's tenants page: quotas, pause, and what each tenant uses now."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pgsched import enqueue
from django_pgsched.models import JobRun, Tenant, db_now


def _running(tenant: str, *, expires_in: float) -> None:
    run = enqueue("tests.noop", tenant=tenant)
    JobRun.objects.filter(pk=run.pk).update(
        status="running",
        attempts=1,
        started_at=db_now(),
        claimed_by="00000000-0000-0000-0000-000000000001",
        claim_expires_at=db_now() + timedelta(seconds=expires_in),
    )


def test_the_list_shows_each_tenants_quotas_and_usage(admin_client, make_schedule):
    Tenant.objects.create(key="acme", max_schedules=5, max_running=3, weight=2)
    Tenant.objects.create(key="globex", paused=True, pause_reason="unpaid invoice")
    make_schedule(name="a1", tenant="acme")
    make_schedule(name="a2", tenant="acme")
    _running("acme", expires_in=60)
    _running("acme", expires_in=-60)  # a lease that expired: no longer counted
    page = admin_client.get(reverse("admin:pgsched_tenant_changelist"))
    assert page.status_code == 200
    rows = {t.key: t for t in page.context["cl"].result_list}
    assert rows["acme"].schedules_now == 2 and rows["acme"].running_now == 1
    assert rows["globex"].schedules_now == 0 and rows["globex"].running_now == 0
    html = page.content.decode()
    assert "unpaid invoice" in html and "paused" in html


def test_the_list_costs_the_same_queries_for_many_tenants(admin_client):
    Tenant.objects.create(key="t0")
    url = reverse("admin:pgsched_tenant_changelist")
    admin_client.get(url)  # the session, the content types
    with CaptureQueriesContext(connection) as few:
        admin_client.get(url)
    Tenant.objects.bulk_create(Tenant(key=f"t{i}") for i in range(1, 40))
    with CaptureQueriesContext(connection) as many:
        admin_client.get(url)
    assert len(many) == len(few), [q["sql"][:120] for q in many]


def test_an_operator_pauses_a_tenant_with_a_reason(admin_client):
    tenant = Tenant.objects.create(key="acme")
    url = reverse("admin:pgsched_tenant_change", args=[tenant.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert 'name="key"' not in page.content.decode()  # the key is fixed once recorded
    posted = admin_client.post(
        url,
        {"paused": "on", "pause_reason": "quarter close", "weight": "1", "allowed_jobs": "null"},
    )
    assert posted.status_code == 302, posted.content.decode()[-2000:]
    tenant.refresh_from_db()
    assert tenant.paused and tenant.pause_reason == "quarter close"
