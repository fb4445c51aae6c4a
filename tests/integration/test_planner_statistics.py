"""After a burst, the planner analyzes the months of runs it outgrew.

Plans are prepared once and kept; made while a month was small, they stay made for
a small month until the month is analyzed (tests/integration/test_plans.py shows
what such plans do). The planner does not wait for autovacuum.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection

from django_pgsched import enqueue
from django_pgsched.engine import planner as planner_module
from django_pgsched.engine.planner import Planner
from django_pgsched.models import Schedule, db_now


def _flush_statistics() -> None:
    """This backend's pending counts to the shared statistics, and visible to it.

    PostgreSQL 15 on: flushed at the backend's next idle moment when forced. 14: sent to
    the statistics collector at most every 500 ms after a commit; waited for here until
    this backend's view of them changes (a fresh snapshot each read).
    """
    with connection.cursor() as cursor:
        if connection.pg_version >= 150000:
            cursor.execute("SELECT pg_stat_force_next_flush()")
            cursor.execute("SELECT 1")
            return
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(STATISTICS_SEEN)
        before = cursor.fetchone()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.2)
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(STATISTICS_SEEN)
            if cursor.fetchone() != before:
                time.sleep(0.6)  # the collector's next message holds the rest
                return


# what the collector has counted of the runs' months (PostgreSQL 14)
STATISTICS_SEEN = (
    "SELECT coalesce(sum(n_mod_since_analyze), 0), coalesce(sum(analyze_count), 0)"
    " FROM pg_stat_user_tables WHERE relname LIKE 'pgsched_job_run_p%%'"
)


def _analyzed(month: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relid = %s::regclass", [month]
        )
        return int(cursor.fetchone()[0])


def _current_month() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM pgsched_job_run ORDER BY id DESC LIMIT 1"
        )
        return str(cursor.fetchone()[0])


def _outgrown_month(monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A month 150 runs outgrew (more than half of what its statistics count), and how
    many times it was analyzed so far."""
    monkeypatch.setattr(planner_module, "ANALYZE_AFTER", 200)
    for _ in range(150):
        enqueue("tests.noop")
    month = _current_month()
    _flush_statistics()
    return month, _analyzed(month)


def test_a_month_outgrown_by_new_runs_is_analyzed_once(transactional_db, monkeypatch):
    month, before = _outgrown_month(monkeypatch)
    assert month in Planner().refresh_statistics()
    _flush_statistics()
    assert _analyzed(month) == before + 1
    _flush_statistics()
    assert month not in Planner().refresh_statistics()  # nothing new since
    assert _analyzed(month) == before + 1


def test_a_planner_that_created_enough_runs_refreshes_the_statistics(transactional_db, monkeypatch):
    monkeypatch.setattr(planner_module, "ANALYZE_AFTER", 20)
    refreshed = []
    monkeypatch.setattr(Planner, "refresh_statistics", lambda self: refreshed.append(1) or [])
    due = db_now() - timedelta(seconds=1)
    Schedule.objects.bulk_create(
        Schedule(name=f"burst-{i}", job="tests.noop", cron="* * * * * *", next_fire_at=due)
        for i in range(30)
    )
    planner = Planner(batch=1)
    created = 0
    while created < 20:
        assert refreshed == []  # fewer than ANALYZE_AFTER created so far
        created += planner.run_once().created
    assert refreshed == [1]  # once


@pytest.mark.parametrize("error", ["lock", "permission"])
def test_a_refused_analyze_leaves_the_planned_runs(transactional_db, monkeypatch, error):
    # Without ownership of the table (a least-privileged role before PostgreSQL 17's
    # MAINTAIN) PostgreSQL skips with a warning; any other failure is logged, never
    # raised into the planner's loop.
    from django.db import DatabaseError

    monkeypatch.setattr(planner_module, "ANALYZE_AFTER", 2)

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise DatabaseError(error)

    monkeypatch.setattr(planner_module.db, "fetch", refuse)
    assert Planner().refresh_statistics() == []


def test_a_role_that_does_not_own_the_months_is_skipped_with_a_warning(
    transactional_db, monkeypatch
):
    # The least-privileged role of how-to/database.md: PostgreSQL refuses its ANALYZE
    # with a warning (before 17's MAINTAIN), and the planner goes on.
    month, before = _outgrown_month(monkeypatch)
    with connection.cursor() as cursor:
        cursor.execute(
            "DO $$ BEGIN CREATE ROLE pgsched_not_owner; EXCEPTION WHEN duplicate_object"
            " THEN NULL; END $$"
        )
        cursor.execute("SET ROLE pgsched_not_owner")
    try:
        assert month in Planner().refresh_statistics()  # tried, without raising
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute("DROP ROLE pgsched_not_owner")
    _flush_statistics()
    assert _analyzed(month) == before  # skipped: not analyzed
