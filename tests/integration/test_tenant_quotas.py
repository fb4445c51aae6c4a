"""Tenants' quotas and pause, enforced on every path (names: design/contract.md).

A quota breach is a ValidationError naming the quota and the values; max_schedules holds
under twenty concurrent creators (the tenant's advisory lock); a record's quotas hold for
raw SQL too (trigger pgsched_schedule_tenant_quota).
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.test import override_settings

import django_pgsched
from django_pgsched import enqueue, tenants
from django_pgsched.engine.executor import Executor
from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule, SkippedRange, Tenant, db_now
from tests.conftest import at


def _create(name: str, tenant: str, **fields: Any) -> Schedule:
    fields.setdefault("job", "tests.noop")
    fields.setdefault("cron", "0 * * * *")
    s = Schedule(name=name, tenant=tenant, **fields)
    s.full_clean()
    s.save()
    return s


def _race(tenant: str, creators: int = 20) -> tuple[int, list[str]]:
    """``creators`` threads, each on its own connection, create one schedule at once."""
    start = threading.Barrier(creators)
    errors: list[str] = []

    def create(i: int) -> None:
        try:
            start.wait(10)
            Schedule(name=f"{tenant}-{i}", job="tests.noop", cron="0 * * * *", tenant=tenant).save()
        except ValidationError as exc:
            errors.append(" ".join(exc.messages))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(creators)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return Schedule.objects.filter(tenant=tenant).count(), errors


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_creators_never_make_the_4th_schedule_of_a_record(db):
    Tenant.objects.create(key="acme", max_schedules=3)
    made, errors = _race("acme")
    assert made == 3 and len(errors) == 17
    assert all("max_schedules" in e and "quota is 3" in e for e in errors), errors[:3]


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_creators_respect_the_defaults(db):
    with override_settings(PGSCHED={"TENANT_DEFAULTS": {"max_schedules": 3}}):
        made, errors = _race("newco")
    assert made == 3 and len(errors) == 17


def test_a_records_quotas_hold_for_raw_sql_too(db):
    Tenant.objects.create(key="acme", max_schedules=1, allowed_jobs=["tests.noop"])
    _create("a1", "acme")
    insert = (
        "INSERT INTO pgsched_schedule (name, job, kwargs, cron, status, misfire_policy,"
        " catch_up_limit, skipped_occurrences, source, last_error, tenant, updated_at)"
        " VALUES (%s, %s, '{}', '0 * * * *', 'active', 'skip', 10, 0, 'database', '',"
        " 'acme', now())"
    )
    for name, job, quota in (
        ("a2", "tests.noop", "max_schedules"),
        ("a3", "tests.fail", "allowed_jobs"),
    ):
        with pytest.raises(IntegrityError, match=quota), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(insert, [name, job])


def test_allowed_jobs_and_min_interval_name_the_quota_and_the_values(db):
    Tenant.objects.create(
        key="acme", allowed_jobs=["tests.noop"], min_interval=timedelta(minutes=1)
    )
    with pytest.raises(ValidationError) as job:
        _create("x", "acme", job="tests.fail")
    assert "allowed_jobs" in str(job.value) and "tests.fail" in str(job.value)
    with pytest.raises(ValidationError) as gap:
        _create("y", "acme", cron="*/10 * * * * *")
    message = str(gap.value)
    assert "min_interval" in message and "10s" in message and "60s" in message
    _create("z", "acme", cron="*/2 * * * *")  # two minutes apart: allowed
    with pytest.raises(ValidationError, match="min_interval"):
        _create("w", "acme", interval=timedelta(seconds=30), cron=None)
    # no tenant: no quotas
    _create("mine", "", job="tests.fail", cron="* * * * * *")


def test_a_paused_tenant_plans_nothing_claims_nothing_and_ledgers_its_occurrences(db):
    start = at("2026-03-01 12:00:00")
    s = Schedule.objects.create(
        name="every-second", job="tests.noop", cron="* * * * * *", tenant="acme",
        next_fire_at=start,
    )  # fmt: skip
    other = Schedule.objects.create(
        name="theirs", job="tests.noop", cron="* * * * * *", tenant="globex", next_fire_at=start
    )
    pending = enqueue("tests.noop", tenant="acme")  # a one-off, made before the pause
    paused = tenants.pause("acme", reason="invoice overdue")
    assert paused.paused and paused.pause_reason == "invoice overdue"
    Planner().run_once(now=start + timedelta(seconds=9, milliseconds=500))
    assert not JobRun.objects.filter(schedule=s).exists()
    assert JobRun.objects.filter(schedule=other).count() >= 10
    (ledger,) = SkippedRange.objects.filter(schedule=s)
    assert (ledger.reason, ledger.count) == ("tenant_paused", 10)
    assert (ledger.first, ledger.last) == (start, start + timedelta(seconds=9))
    s.refresh_from_db()
    assert s.next_fire_at == start + timedelta(seconds=10)
    # the executor claims the other tenant's runs, never the paused one's
    Executor(concurrency=4, inline=True).run_once()
    pending.refresh_from_db()
    assert pending.status == "pending"
    JobRun.objects.filter(schedule=other).delete()  # claimed first: they are older
    tenants.resume("acme")
    Executor(concurrency=4, inline=True).run_once()
    pending.refresh_from_db()
    assert pending.status == "succeeded"
    Planner().run_once(now=start + timedelta(seconds=10, milliseconds=500))
    assert JobRun.objects.filter(schedule=s).exists()  # carries on from its next occurrence


def test_a_schedule_paused_by_name_keeps_its_reason_and_only_its_tenant_finds_it(db):
    _create("report", "acme")
    with pytest.raises(ValidationError, match="no schedule named 'report' for tenant 'globex'"):
        django_pgsched.pause("report", reason="x", tenant="globex")
    s = django_pgsched.pause("report", reason="migrating the warehouse", tenant="acme")
    s.refresh_from_db()
    assert (s.status, s.pause_reason) == ("paused", "migrating the warehouse")
    s = django_pgsched.resume("report", tenant="acme")
    s.refresh_from_db()
    assert (s.status, s.pause_reason) == ("active", "")


def test_bad_tenant_defaults_are_a_system_check_error(db):
    from django_pgsched.ops.checks import check_settings

    with override_settings(PGSCHED={"TENANT_DEFAULTS": {"max_schedule": 3}}):
        messages = [m for m in check_settings() if "TENANT_DEFAULTS" in m.msg]
    assert [m.id for m in messages] == ["pgsched.E003"] and "max_schedule" in messages[0].msg
    assert db_now()  # the database is still there
