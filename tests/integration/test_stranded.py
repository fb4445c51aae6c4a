"""Runs nobody can execute: registrations as advisory locks, the gauges, coalescing, W005.

Before: a schedule naming a job no replica registers made a pending run per
occurrence forever, each counted in ``pgsched_runs_due_backlog``, and nothing
said so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.urls import reverse

from django_pgsched.engine import stranded
from django_pgsched.engine.stranded import Stranded
from django_pgsched.models import JobRun, db_now
from django_pgsched.ops.checks import check_database_version
from django_pgsched.ops.metrics import DatabaseCollector, Metrics
from tests.conftest import dsn

GONE = "gone.job"  # a job no code registers


def sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def replica(db: None) -> Iterator[Callable[..., None]]:
    """A live replica's registrations, held by a session of its own."""
    sessions: list[psycopg.Connection[Any]] = []

    def start(jobs: list[str], queues: list[str] | None = None) -> None:
        conn = psycopg.connect(**dsn(), autocommit=True)
        keys = stranded.lock_keys(jobs, queues)
        conn.execute(
            "SELECT count(pg_advisory_lock_shared(k.ns, hashtext(k.text)))"
            "  FROM unnest(%s::int[], %s::text[]) AS k(ns, text)",
            [[ns for ns, _ in keys], [text for _, text in keys]],
        )
        sessions.append(conn)

    yield start
    for conn in sessions:
        conn.close()


def add_schedule(job: str, name: str) -> int:
    return sql(
        "INSERT INTO pgsched_schedule (name, job, kwargs, cron, status, misfire_policy,"
        " catch_up_limit, skipped_occurrences, source, last_error, updated_at)"
        " VALUES (%s, %s, '{}', '* * * * *', 'active', 'latest', 10, 0, 'database', '', now())"
        " RETURNING id",
        [name, job],
    )[0][0]


def add_runs(job: str, *, schedule: int | None, minutes_ago: list[int], queue: str = "default"):
    now = db_now().replace(second=0, microsecond=0)
    for m in minutes_ago:
        at = now - timedelta(minutes=m)
        sql(
            "INSERT INTO pgsched_job_run (schedule_id, scheduled_for, idempotency_key, job,"
            " kwargs, queue, status, fire_after, attempts, max_attempts, timeout, note)"
            " VALUES (%s, %s, %s, %s, '{}', %s, 'pending', %s, 0, 1, interval '1 minute', '')",
            [schedule, at, f"{job}:{schedule}:{m}:{queue}", job, queue, at],
        )


def gauges() -> dict[str, float]:
    m = Metrics()
    m.registry.register(DatabaseCollector())
    return {
        f.name: f.samples[0].value
        for f in m.registry.collect()
        if f.name in ("pgsched_runs_due_backlog", "pgsched_runs_stranded",
                      "pgsched_schedules_stranded")
    }  # fmt: skip


def test_the_backlog_counts_what_a_live_replica_could_run(replica):
    gone = add_schedule(GONE, "orphan")
    add_runs(GONE, schedule=gone, minutes_ago=[60, 30])
    add_runs("tests.noop", schedule=None, minutes_ago=[60])
    # nobody registered at all (an outage, or scraped from elsewhere): all of it counts
    assert gauges() == {
        "pgsched_runs_due_backlog": 3,
        "pgsched_runs_stranded": 0,
        "pgsched_schedules_stranded": 0,
    }
    replica(["tests.noop"])
    assert gauges() == {
        "pgsched_runs_due_backlog": 1,
        "pgsched_runs_stranded": 2,
        "pgsched_schedules_stranded": 1,
    }
    replica([GONE], queues=["other"])  # the job, but not its queue
    assert gauges()["pgsched_runs_due_backlog"] == 1
    replica([GONE], queues=["default"])
    assert gauges() == {
        "pgsched_runs_due_backlog": 3,
        "pgsched_runs_stranded": 0,
        "pgsched_schedules_stranded": 0,
    }


def test_stranded_runs_are_coalesced_to_one_per_schedule_after_the_grace(replica):
    gone = add_schedule(GONE, "orphan")
    add_runs(GONE, schedule=gone, minutes_ago=[90, 60, 45, 30, 5])  # the last within grace
    add_runs(GONE, schedule=None, minutes_ago=[60])  # a one-off run: never coalesced
    clock = [0.0]
    coalesce = Stranded(clock=lambda: clock[0])
    assert coalesce.run_once().cancelled == 0  # no replica at all: an outage, not a job gone
    replica(["tests.noop"])
    first = coalesce.run_once()
    assert (first.cancelled, [(g.job, g.runs) for g in first.groups]) == (0, [(GONE, 5)])
    clock[0] += 601  # seen stranded for the whole grace
    assert coalesce.run_once().cancelled == 3
    pending = JobRun.objects.filter(job=GONE, status="pending").order_by("scheduled_for")
    kept = [r.pk for r in pending if r.schedule_id]
    assert len(kept) == 2  # the newest stranded one, and the one still within the grace
    notes = set(JobRun.objects.filter(status="cancelled").values_list("note", flat=True))
    assert notes == {f"stranded: no live replica runs {GONE} in queue default; kept run {kept[0]}"}
    assert pending.filter(schedule__isnull=True).count() == 1


def test_a_replica_registers_its_jobs_on_its_executor_session(db):
    assert stranded.register(connection, None) is True
    assert stranded.register(connection, None) is False  # once per session
    held = sql(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s"
        " AND pid = pg_backend_pid()",
        [stranded.JOB_KEY],
    )[0][0]
    from django_pgsched.registry import all_jobs

    assert held == len(all_jobs())
    sql("SELECT pg_advisory_unlock_all()")


def test_the_start_check_names_jobs_this_code_does_not_register(db):
    assert not [m for m in check_database_version(databases=["default"]) if m.id == "pgsched.W005"]
    add_schedule(GONE, "orphan")
    (found,) = [m for m in check_database_version(databases=["default"]) if m.id == "pgsched.W005"]
    assert f"{GONE} (1 schedule)" in found.msg


def test_the_admin_warns_about_stranded_runs(admin_client, replica):
    gone = add_schedule(GONE, "orphan")
    add_runs(GONE, schedule=gone, minutes_ago=[60])
    replica(["tests.noop"])
    body = admin_client.get(reverse("admin:pgsched_schedule_changelist")).content.decode()
    assert "Runs no live replica can execute" in body and GONE in body
