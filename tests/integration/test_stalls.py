"""Silent stops made loud: schedules not planned, or with no run started for two occurrences."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection

from django_pgsched.ledger.stalls import stalled
from django_pgsched.models import JobRun, Schedule, db_now
from django_pgsched.ops.checks import check_database_version, check_stalls
from django_pgsched.ops.metrics import Metrics


def backdate(s: Schedule, by: timedelta) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgsched_schedule SET created_at = created_at - %s,"
            " updated_at = updated_at - %s WHERE id = %s",
            [by, by, s.pk],
        )


def started_run(s: Schedule, at) -> None:
    JobRun.objects.create(
        schedule=s, schedule_name=s.name, scheduled_for=at, idempotency_key=f"k-{s.pk}-{at}",
        job=s.job, kwargs={}, queue="default", status="succeeded", fire_after=at, attempts=1,
        max_attempts=1, timeout=timedelta(seconds=5), started_at=at, finished_at=at,
    )  # fmt: skip


def test_quiet_schedules_are_found_and_healthy_ones_are_not(make_schedule):
    now = db_now().replace(microsecond=0)
    every10 = {
        "interval": timedelta(seconds=10),
        "anchor": now,
        "misfire_grace": timedelta(seconds=10),
    }
    make_schedule(name="behind", next_fire_at=now - timedelta(minutes=10))
    quiet = make_schedule(name="quiet", next_fire_at=now + timedelta(seconds=5), **every10)
    backdate(quiet, timedelta(hours=1))
    started_run(quiet, now - timedelta(minutes=50))  # then nothing started (all skipped, say)
    fine = make_schedule(name="fine", next_fire_at=now + timedelta(seconds=5), **every10)
    backdate(fine, timedelta(hours=1))
    started_run(fine, now - timedelta(seconds=10))
    young = make_schedule(name="young", next_fire_at=now + timedelta(seconds=5), **every10)
    paused = make_schedule(name="paused", next_fire_at=now - timedelta(hours=1), status="paused")
    found = {s.schedule: s for s in stalled()}
    assert set(found) == {"behind", "quiet"}, found
    assert found["behind"].reason == "not_planned"
    assert found["quiet"].reason == "not_running" and found["quiet"].missed >= 290
    assert "no run started for" in str(found["quiet"])
    (warning,) = [m for m in check_stalls(databases=["default"]) if m.id == "pgsched.W004"]
    # a deployment check: not among the database checks runscheduler runs at its start
    assert "pgsched.W004" not in {m.id for m in check_database_version(databases=["default"])}
    assert "behind: not planned since" in warning.msg and "quiet: no run started" in warning.msg
    assert young.pk and paused.pk and fine.pk
    text = _scrape()
    assert 'pgsched_schedules_stalled{reason="not_planned"} 1.0' in text
    assert 'pgsched_schedules_stalled{reason="not_running"} 1.0' in text


def _scrape() -> str:
    from prometheus_client import generate_latest

    from django_pgsched.ops import metrics as metrics_module

    metrics_module._stalls_cache = None
    registry = Metrics().registry
    registry.register(metrics_module.DatabaseCollector())
    return generate_latest(registry).decode()
