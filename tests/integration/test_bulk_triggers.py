"""The schedule triggers under bulk statements: every behaviour kept, and linear in the rows.

The triggers are statement-level and set-based (migrations/sql/triggers.sql): one audit row
per changed schedule, one notification per statement, the unstarted runs of
paused and re-timed schedules cancelled, ``unplanned_from`` kept on a resume;
and the cost of a statement grows with its rows, not with their square.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection

from django_pgsched import enqueue
from django_pgsched.audit.models import ScheduleChange
from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule, db_now
from tests.conftest import at

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


def sql(query: str, params: object = None) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def fill(count: int, *, prefix: str = "bulk", pad: int = 0) -> None:
    """``count`` active per-minute schedules, written with the triggers off (fast, no trail).

    ``pad``: characters of payload in each one's kwargs (wide rows: the old join's
    planner switched to its nested loop at fewer rows).
    """
    sql("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
    sql(
        """
        INSERT INTO pgsched_schedule
               (name, job, kwargs, cron, status, next_fire_at, misfire_policy, catch_up_limit,
                skipped_occurrences, source, last_error, updated_at)
        SELECT %s || '-' || g, 'tests.noop',
               CASE WHEN %s > 0 THEN jsonb_build_object('pad', repeat('x', %s)) ELSE '{}' END,
               '* * * * *', 'active',
               timestamptz '2026-03-01 13:00:00+00' + (g %% 600) * interval '1 second',
               'latest', 10, 0, 'database', '', now()
          FROM generate_series(1, %s) g
        """,
        [prefix, pad, pad, count],
    )
    sql("ALTER TABLE pgsched_schedule ENABLE TRIGGER USER")


def test_a_bulk_change_records_one_change_per_schedule_with_its_actor(db):
    fill(1200)
    sql("SELECT set_config('pgsched.actor', 'dba', true)")
    sql("""UPDATE pgsched_schedule SET kwargs = '{"x": 1}' WHERE name <> 'bulk-7'""")
    changes = ScheduleChange.objects.filter(action="changed")
    assert changes.count() == 1199
    assert set(changes.values_list("actor", flat=True)) == {"dba"}
    assert changes.first().changes == {"kwargs": [{}, {"x": 1}]}
    # the runtime columns alone are not a change; an UPDATE that changes nothing neither
    sql("UPDATE pgsched_schedule SET next_fire_at = next_fire_at + interval '1 hour'")
    sql("UPDATE pgsched_schedule SET queue = queue")
    assert ScheduleChange.objects.filter(action="changed").count() == 1199


def test_bulk_insert_and_delete_are_recorded_row_by_row(db):
    Schedule.objects.bulk_create(
        Schedule(name=f"b{i}", job="tests.noop", cron="* * * * *", queue="q" if i else None)
        for i in range(3)
    )
    created = {c.schedule_name: c.changes for c in ScheduleChange.objects.filter(action="created")}
    assert set(created) == {"b0", "b1", "b2"}
    assert created["b1"]["queue"] == [None, "q"] and "queue" not in created["b0"]  # set fields
    Schedule.objects.filter(name__in=["b0", "b1"]).delete()
    deleted = {c.schedule_name: c.changes for c in ScheduleChange.objects.filter(action="deleted")}
    assert set(deleted) == {"b0", "b1"}
    assert deleted["b0"]["queue"] == [None, None] and deleted["b0"]["cron"] == ["* * * * *", None]


def test_a_bulk_pause_cancels_unstarted_runs_and_a_retime_only_future_ones(make_schedule):
    paused = [make_schedule(cron="* * * * *", next_fire_at=T) for _ in range(3)]
    retimed = make_schedule(cron="* * * * *", next_fire_at=T)
    Planner().run_once(now=T + timedelta(seconds=30))  # materialises the runs due by then
    runs = JobRun.objects.filter(schedule__in=[*paused, retimed])
    assert runs.count() == 4 and set(runs.values_list("status", flat=True)) == {"pending"}
    past = JobRun.objects.get(schedule=retimed)  # due in March 2026: before the clock
    tomorrow = db_now().replace(microsecond=0) + timedelta(days=1)
    future = JobRun.objects.create(
        schedule=retimed,
        schedule_name=retimed.name,
        scheduled_for=tomorrow,
        idempotency_key="future",
        job="tests.noop",
        fire_after=tomorrow,
        max_attempts=1,
        timeout=timedelta(minutes=1),
    )
    other = enqueue("tests.noop")  # a one-off run: no schedule, untouched
    Schedule.objects.filter(pk__in=[s.pk for s in paused]).update(status="paused")
    sql("UPDATE pgsched_schedule SET cron = '*/5 * * * *' WHERE id = %s", [retimed.pk])
    notes = dict(
        JobRun.objects.filter(schedule__in=paused).values_list("status", "note").distinct()
    )
    assert notes == {"cancelled": "schedule paused"}
    past.refresh_from_db()
    future.refresh_from_db()
    assert past.status == "pending"  # already due: a re-time keeps it
    assert (future.status, future.note) == ("cancelled", "schedule re-timed")
    assert JobRun.objects.get(pk=other.pk).status == "pending"


def test_a_bulk_resume_keeps_where_each_schedule_stopped(db):
    fill(50)
    sql("UPDATE pgsched_schedule SET status = 'paused'")
    before = dict(sql("SELECT id, next_fire_at FROM pgsched_schedule"))
    sql("UPDATE pgsched_schedule SET status = 'active'")
    rows = sql("SELECT id, next_fire_at, unplanned_from, unplanned_reason FROM pgsched_schedule")
    assert all(nxt is None for _, nxt, _, _ in rows)  # fire first after now
    assert {i: f for i, _, f, _ in rows} == before
    assert {r for *_, r in rows} == {"paused"}


def test_the_planners_advance_notifies_no_planner_and_records_nothing(make_schedule):
    s = make_schedule(next_fire_at=T - timedelta(hours=1), misfire_policy="skip")
    before = ScheduleChange.objects.count()
    sql("SET LOCAL track_functions = 'pl'")
    Planner().run_once(now=T)
    s.refresh_from_db()
    assert s.next_fire_at > T and ScheduleChange.objects.count() == before
    calls = dict(
        sql(
            "SELECT funcname, calls FROM pg_stat_xact_user_functions"
            " WHERE funcname LIKE 'pgsched_schedule%%'"
        )
    )
    assert calls.get("pgsched_schedule_before_update", 0) == 0  # row-level: never called


def test_a_bulk_statement_is_linear_in_its_rows(db):
    """4x the rows may cost about 4x the time; a quadratic plan costs 16x (it was 500x).

    The other shapes (audited columns, pause, insert, delete) are measured at 100k
    rows against the same statement without triggers in bench/b_triggers.py.
    """
    took = {}
    for rows in (10_000, 40_000):
        sql("SAVEPOINT sized")
        fill(rows, pad=1000)  # 1 kB of kwargs each
        sql("ANALYZE pgsched_schedule")
        sql("SET LOCAL statement_timeout = '30s'")  # the quadratic plan: minutes at 40k
        started = time.perf_counter()
        # later than every row: nothing to notify or record, and the old join's nested
        # loop scanned all of old_rows for each row (over 60 s at 40k rows)
        sql("UPDATE pgsched_schedule SET next_fire_at = timestamptz '2026-03-02 00:00:00+00'")
        took[rows] = time.perf_counter() - started
        sql("ROLLBACK TO SAVEPOINT sized")
    assert took[40_000] / took[10_000] < 10, took


def test_deleting_schedules_cancels_their_unstarted_runs_only(make_schedule):
    doomed = [make_schedule(cron="* * * * *", next_fire_at=T) for _ in range(2)]
    Planner().run_once(now=T + timedelta(seconds=30))
    started = JobRun.objects.get(schedule=doomed[1])
    JobRun.objects.filter(pk=started.pk).update(status="retrying", attempts=1)  # it ran once
    other = enqueue("tests.noop")
    Schedule.objects.filter(pk__in=[s.pk for s in doomed]).delete()
    runs = {r.pk: r for r in JobRun.objects.filter(schedule_name__in=[s.name for s in doomed])}
    assert len(runs) == 2 and all(r.schedule_id is None for r in runs.values())
    cancelled = [r for pk, r in runs.items() if pk != started.pk]
    assert [(r.status, r.note) for r in cancelled] == [("cancelled", "schedule deleted")]
    assert runs[started.pk].status == "retrying"  # started once: it keeps its retries
    assert JobRun.objects.get(pk=other.pk).status == "pending"
