"""Tenants as data: schedules carry one, their runs copy it, one-off runs take it from enqueue."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from django_pgsched import api, enqueue
from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule
from django_pgsched.ops.sync import sync_schedules
from tests.conftest import at

T = at("2026-03-01 12:00:00")


def test_a_planned_run_copies_its_schedules_tenant(make_schedule):
    acme = make_schedule(cron="* * * * * *", next_fire_at=T, tenant="acme")
    nobody = make_schedule(cron="* * * * * *", next_fire_at=T)
    Planner().run_once(now=T)
    assert set(JobRun.objects.filter(schedule=acme).values_list("tenant", flat=True)) == {"acme"}
    assert set(JobRun.objects.filter(schedule=nobody).values_list("tenant", flat=True)) == {""}


def test_enqueue_run_now_and_retry_carry_the_tenant(make_schedule):
    run = enqueue("tests.noop", tenant="acme")
    assert JobRun.objects.get(pk=run.pk).tenant == "acme"
    assert enqueue("tests.noop").tenant == ""
    s = make_schedule(tenant="globex")
    assert api.run_schedule_now(s).tenant == "globex"
    JobRun.objects.filter(pk=run.pk).update(status="failed", finished_at=T)
    run.refresh_from_db()
    retried, created = api.retry_run(run)
    assert created and retried.tenant == "acme"


@pytest.mark.parametrize(
    ("tenant", "text"),
    [(7, "expected a string"), ("x" * 201, "at most 200"), ("a\nb", "control characters")],
)
def test_bad_tenants_are_rejected_naming_the_field(db, tenant, text):
    with pytest.raises(ValidationError) as info:
        enqueue("tests.noop", tenant=tenant)
    assert "tenant" in info.value.message_dict and text in str(info.value)
    if isinstance(tenant, str):  # full_clean() turns 7 into "7" first, as for any CharField
        with pytest.raises(ValidationError) as info:
            Schedule(name="x", job="tests.noop", cron="* * * * *", tenant=tenant).full_clean()
        assert "tenant" in info.value.message_dict and text in str(info.value)


def test_the_database_refuses_control_characters_in_a_tenant(make_schedule):
    s = make_schedule()
    with pytest.raises(IntegrityError, match="pgsched_schedule_tenant_text"), transaction.atomic():
        Schedule.objects.filter(pk=s.pk).update(tenant="a\tb")
    run = enqueue("tests.noop")
    with pytest.raises(IntegrityError, match="pgsched_run_tenant_text"), transaction.atomic():
        JobRun.objects.filter(pk=run.pk).update(tenant="a\x07")


def test_declared_schedules_may_set_a_tenant(db):
    sync_schedules({"a": {"job": "tests.noop", "cron": "0 * * * * *", "tenant": "acme"}})
    assert Schedule.objects.get(name="a").tenant == "acme"
    again = sync_schedules({"a": {"job": "tests.noop", "cron": "0 * * * * *", "tenant": "acme"}})
    assert again.unchanged == ["a"]
    moved = sync_schedules({"a": {"job": "tests.noop", "cron": "0 * * * * *", "tenant": "globex"}})
    assert moved.updated == ["a"] and Schedule.objects.get(name="a").tenant == "globex"
    with pytest.raises(ValidationError, match="tenant"):
        sync_schedules({"b": {"job": "tests.noop", "cron": "* * * * *", "tenant": 5}})


def test_the_admin_filters_runs_and_schedules_by_tenant(admin_client, make_schedule):
    make_schedule(tenant="acme", name="acme-report")
    make_schedule(tenant="globex", name="globex-report")
    a = enqueue("tests.noop", tenant="acme")
    g = enqueue("tests.noop", tenant="globex")
    page = admin_client.get("/admin/pgsched/jobrun/?tenant=acme").content.decode()
    assert f">{a.pk}</a>" in page and f">{g.pk}</a>" not in page
    page = admin_client.get("/admin/pgsched/schedule/?tenant=globex").content.decode()
    assert "globex-report" in page and "acme-report" not in page
    detail = admin_client.get(f"/admin/pgsched/jobrun/{a.pk}/change/").content.decode()
    assert "acme" in detail


def test_the_admin_lists_show_a_tenant_column_while_tenants_are_in_use(admin_client, make_schedule):
    make_schedule(name="plain")
    enqueue("tests.noop")
    for url in ("/admin/pgsched/jobrun/", "/admin/pgsched/schedule/"):
        assert "column-tenant" not in admin_client.get(url).content.decode()
    # a one-off run's tenant, reached by the filter, shows it too
    enqueue("tests.noop", tenant="solo")
    page = admin_client.get("/admin/pgsched/jobrun/?tenant=solo").content.decode()
    assert "column-tenant" in page and ">solo<" in page
    make_schedule(name="acme-report", tenant="acme")
    for url in ("/admin/pgsched/jobrun/", "/admin/pgsched/schedule/"):
        assert "column-tenant" in admin_client.get(url).content.decode()


def test_schedule_names_are_unique_within_a_tenant(make_schedule):
    make_schedule(name="report", tenant="acme")
    make_schedule(name="report", tenant="globex")
    make_schedule(name="report")
    with pytest.raises(ValidationError, match="this tenant has this name"):
        make_schedule(name="report", tenant="acme")
    # the database refuses it for any writer, not only full_clean()
    with pytest.raises(IntegrityError, match="pgsched_schedule_tenant_name"), transaction.atomic():
        Schedule.objects.create(name="report", job="tests.noop", cron="* * * * *", tenant="acme")
    assert Schedule.objects.filter(name="report").count() == 3
    paused = api.pause("report", reason="quiet", tenant="globex")
    assert paused.tenant == "globex"
    assert Schedule.objects.get(name="report", tenant="acme").status == "active"
    assert Schedule.objects.get(name="report", tenant="").status == "active"


def test_declarations_are_found_by_their_tenant(db):
    Schedule.objects.create(name="a", job="tests.noop", cron="5 * * * *", tenant="globex")
    made = sync_schedules({"a": {"job": "tests.noop", "cron": "0 * * * * *", "tenant": "acme"}})
    assert made.created == ["a"] and made.deleted == []
    # globex's own schedule of that name is neither changed nor pruned
    assert Schedule.objects.get(name="a", tenant="globex").cron == "5 * * * *"
    assert Schedule.objects.get(name="a", tenant="acme").cron == "0 * * * * *"
    assert sync_schedules({}).deleted == ["a"]
    assert list(Schedule.objects.values_list("tenant", flat=True)) == ["globex"]


def test_backfill_and_run_now_name_the_tenant(make_schedule):
    from django.core.management import call_command

    from django_pgsched import backfill

    make_schedule(name="nightly", cron="0 0 * * *", tenant="acme", next_fire_at=T)
    make_schedule(name="nightly", cron="0 0 * * *", tenant="globex", next_fire_at=T)
    with pytest.raises(ValidationError, match="no schedule named 'nightly'"):
        backfill("nightly", at("2026-02-01 00:00:00"), at("2026-02-03 00:00:00"))
    assert (
        backfill("nightly", at("2026-02-01 00:00:00"), at("2026-02-03 00:00:00"), tenant="globex")
        == 2
    )
    assert set(JobRun.objects.values_list("tenant", flat=True)) == {"globex"}
    call_command("pgsched_run", schedule="nightly", tenant="acme")
    assert JobRun.objects.filter(tenant="acme").count() == 1
