"""The history API while real replicas plan and run tenants' schedules.

Two ``runscheduler`` replicas run per-second schedules of two tenants (and one
without a tenant); meanwhile a customer of one tenant pages through its runs
over HTTP, small pages, while runs keep being created and finished. Every page
holds only that tenant's runs, no run appears twice, every run of that tenant
that existed before the first page is reached, and the other tenant's runs
answer 404 by id.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import Client

from django_pgsched.models import JobRun, Schedule

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(120)]
URL = "/scheduler/runs/"


def test_a_tenant_pages_through_its_runs_while_replicas_add_them(replicas, settings: Any):
    settings.PGSCHED = {"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}
    for name, tenant in (("acme-tick", "acme"), ("globex-tick", "globex"), ("ops-tick", "")):
        Schedule.objects.create(name=name, job="tests.noop", cron="* * * * * *", tenant=tenant)
    a, b = replicas("h1"), replicas("h2")
    a.wait_for_log("running loops")
    b.wait_for_log("running loops")
    deadline = time.monotonic() + 30
    while JobRun.objects.filter(tenant="acme", status="succeeded").count() < 4:
        assert time.monotonic() < deadline, a.log()
        time.sleep(0.2)
    existing = set(JobRun.objects.filter(tenant="acme").values_list("pk", flat=True))
    client = Client()
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        response = client.get(URL, params, headers={"X-Tenant": "acme"})
        assert response.status_code == 200, response.content
        body = response.json()
        assert {r["tenant"] for r in body["results"]} <= {"acme"}
        seen += [r["id"] for r in body["results"]]
        pages += 1
        cursor = body["next"]
        if cursor is None:
            break
        time.sleep(0.3)  # the replicas keep planning and finishing runs meanwhile
    total = JobRun.objects.filter(tenant="acme").count()
    assert pages >= 3 and total > len(existing), (pages, total, len(existing))
    assert len(seen) == len(set(seen)), seen  # nothing twice
    assert existing <= set(seen), existing - set(seen)  # nothing that existed skipped
    for other in JobRun.objects.exclude(tenant="acme").values_list("pk", flat=True)[:20]:
        response = client.get(f"{URL}{other}/", headers={"X-Tenant": "acme"})
        assert response.status_code == 404
    assert a.stop() == 0 and b.stop() == 0
