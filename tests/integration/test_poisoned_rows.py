"""Per-row isolation: one row that Python cannot read or the engine cannot use stalls nothing.

Each case writes a poisoned value straight into a table with SQL, beside healthy
rows, with the bounds of times, durations and payloads dropped for the test (as SQL
with the CHECKs dropped could write it): the poisoned schedule ends ``broken`` with
its error, the poisoned run ``failed`` with an attempt row naming it, and every healthy
row of the same pass is planned or run. (With the bounds in place the database refuses
each value: see ``test_value_bounds.py``.)
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_pgsched import enqueue
from django_pgsched.engine.executor import Executor
from django_pgsched.engine.maintenance import Reaper, Retention
from django_pgsched.engine.planner import Planner
from django_pgsched.models import Attempt, JobRun, Schedule, ScheduleStatus
from tests.conftest import at, seconds
from tests.dropped_checks import drop_checks_sql
from tests.testapp import jobs

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")

DEEP = "('{\"a\": ' || repeat('[', 3000) || repeat(']', 3000) || '}')::jsonb"
DIGITS = "('{\"a\": ' || repeat('9', 5001) || '}')::jsonb"


def drop_bounds() -> None:
    """The bounds of times, durations and payloads dropped (this test's transaction only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            drop_checks_sql(
                [
                    "pgsched_schedule_times_range",
                    "pgsched_schedule_durations_range",
                    "pgsched_schedule_kwargs_readable",
                    "pgsched_run_times_range",
                    "pgsched_run_timeout_range",
                    "pgsched_run_json_readable",
                ]
            )
        )


def sql(statement: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])


# (column, SQL value, the words the error names)
SCHEDULE_POISONS = [
    ("next_fire_at", "'0001-06-01 00:00:00+00 BC'", "next_fire_at"),
    ("anchor", "'0001-06-01 00:00:00+00 BC'", "anchor"),
    ("timeout", "interval '100000000 years'", "timeout"),
    ("timeout", "interval '999999999 days 86399.999999 seconds'", "timeout"),  # timedelta.max
    ("misfire_grace", "interval '100000000 years'", "misfire_grace"),
    ("misfire_grace", "interval '999999999 days'", "misfire_grace"),
]


@pytest.mark.parametrize(("column", "value", "named"), SCHEDULE_POISONS)
def test_a_schedule_the_planner_cannot_read_is_broken_and_the_batch_planned(
    make_schedule, column, value, named
):
    healthy = [make_schedule(cron="* * * * * *", next_fire_at=T) for _ in range(3)]
    poison = make_schedule(name="poison", interval=seconds(1), anchor=T, next_fire_at=T)
    drop_bounds()
    sql(f'UPDATE pgsched_schedule SET "{column}" = {value} WHERE id = %s', [poison.pk])
    if column == "anchor":  # a re-timed schedule fires first after now: put it back in the batch
        sql("UPDATE pgsched_schedule SET next_fire_at = %s WHERE id = %s", [T, poison.pk])
    result = Planner().run_once(now=T)
    assert result.broken == (poison.pk,)
    assert result.created == 18  # six occurrences (lookahead 5 s) of each healthy schedule
    status, error = Schedule.objects.filter(pk=poison.pk).values_list("status", "last_error")[0]
    assert status == ScheduleStatus.BROKEN and named in error, error
    for s in healthy:
        assert JobRun.objects.filter(schedule=s).count() == 6
    assert Planner().run_once(now=T + seconds(10)).broken == ()  # not claimed again


RUN_POISONS = [
    ("kwargs", DEEP, "kwargs nested deeper"),
    ("kwargs", DIGITS, "kwargs"),
    ("kwargs", "'{\"a\": 1e4400}'::jsonb", "kwargs"),
    ("task_call", DEEP, "task_call nested deeper"),
    ("fire_after", "'0001-06-01 00:00:00+00 BC'", "fire_after"),
    ("scheduled_for", "'0001-06-01 00:00:00+00 BC'", "scheduled_for"),
    ("timeout", "interval '100000000 years'", "timeout"),
    ("timeout", "interval '999999999 days 86399.999999 seconds'", "timeout"),
]


@pytest.mark.parametrize(("column", "value", "named"), RUN_POISONS)
def test_a_run_the_executor_cannot_read_fails_alone_and_the_pass_runs(db, column, value, named):
    healthy = [enqueue("tests.noop", kwargs={"n": i}) for i in range(3)]
    poison = enqueue("tests.noop", kwargs={"n": 99})
    drop_bounds()
    if column == "scheduled_for":  # the run moves to that month: it needs a partition
        sql(f"SELECT pgsched_ensure_months(ARRAY[{value}]::timestamptz[])")
    sql(f'UPDATE pgsched_job_run SET "{column}" = {value} WHERE id = %s', [poison.pk])
    result = Executor(concurrency=8, inline=True).run_once()
    assert result.claimed == 3  # the poisoned run is failed at once, not run
    assert sorted(c["n"] for c in jobs.CALLS) == [0, 1, 2]
    for run in healthy:
        run.refresh_from_db()
        assert run.status == "succeeded"
    status, note = JobRun.objects.filter(pk=poison.pk).values_list("status", "claimed_by")[0]
    assert status == "failed" and note is None
    # (not the whole attempt: its run_scheduled_for is the run's, which Python may not hold)
    ((attempt_status, error),) = Attempt.objects.filter(job_run_id=poison.pk).values_list(
        "status", "error"
    )
    assert attempt_status == "failed" and named in error, error
    assert "cannot be read" in error
    assert not JobRun.objects.filter(status="running").exists()


def test_a_huge_timeout_does_not_overflow_the_lease(db):
    run = enqueue("tests.noop")
    drop_bounds()
    sql("UPDATE pgsched_job_run SET timeout = interval '999999999 days' WHERE id = %s", [run.pk])
    healthy = enqueue("tests.noop")
    Executor(concurrency=2, inline=True).run_once()
    healthy.refresh_from_db()
    assert healthy.status == "succeeded"


def test_the_reaper_recovers_every_other_run_when_one_cannot_be_updated(db):
    runs = [enqueue("tests.noop", kwargs={"n": i}) for i in range(3)]
    sql(
        "UPDATE pgsched_job_run SET status = 'running', attempts = 1,"
        " claimed_by = gen_random_uuid(),"
        " claim_expires_at = now() - interval '1 hour', started_at = now() - interval '2 hours'"
    )
    sql(  # the database refuses to update this one
        """
        CREATE FUNCTION pgsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.kwargs = '{"n": 1}' THEN RAISE EXCEPTION 'refused by a test'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER pgsched_test_refuse BEFORE UPDATE ON pgsched_job_run
            FOR EACH ROW EXECUTE FUNCTION pgsched_test_refuse();
        """
    )
    result = Reaper().run_once()
    assert result.retried == 2
    statuses = dict(JobRun.objects.values_list("id", "status"))
    assert [statuses[r.pk] for r in runs] == ["retrying", "running", "retrying"]


def test_retention_deletes_runs_whatever_their_values(db, settings):
    drop_bounds()
    old = [enqueue("tests.noop", kwargs={"n": i}) for i in range(3)]
    # the months the runs move to (an UPDATE does not make a missing month): the middle
    # of one month about 400 days back, whatever today's date (a retention pass handles
    # two months, and an empty month before theirs would take one of the two)
    old_month = "date_trunc('month', now() - interval '400 days') + interval '14 days'"
    sql(
        f"SELECT pgsched_ensure_months(ARRAY[{old_month},"
        " '0001-06-01 00:00:00+00 BC']::timestamptz[])"
    )
    sql(
        "UPDATE pgsched_job_run SET status = 'succeeded',"
        f" finished_at = {old_month},"
        f" scheduled_for = {old_month} - id * interval '1 s'"
    )
    sql(
        f"UPDATE pgsched_job_run SET kwargs = {DEEP}, timeout = interval '100000000 years',"
        " scheduled_for = '0001-06-01 00:00:00+00 BC' WHERE id = %s",
        [old[1].pk],
    )
    settings.PGSCHED = {**getattr(settings, "PGSCHED", {}), "RETENTION": seconds(86400 * 30)}
    assert Retention().run_once().deleted == 3
    assert not JobRun.objects.exists()


def test_the_guard_ends_a_one_off_run_past_its_deadline_and_reads_no_poison(db, make_schedule):
    """A one-off run past its start_by was never claimed nor guarded: pending for ever."""
    from django_pgsched.engine.guard import Guard

    one_off = enqueue("tests.noop")
    poisoned = enqueue("tests.noop")
    drop_bounds()
    sql("UPDATE pgsched_job_run SET start_by = now() - interval '1 minute' WHERE id = %s",
        [one_off.pk])  # fmt: skip
    sql("SELECT pgsched_ensure_months(ARRAY['0001-06-01 00:00:00+00 BC']::timestamptz[])")
    sql(
        "UPDATE pgsched_job_run SET start_by = '0001-06-01 00:00:00+00 BC',"
        " scheduled_for = '0001-06-01 00:00:00+00 BC' WHERE id = %s",
        [poisoned.pk],
    )
    result = Guard().run_once()
    assert result.missed == 2 and not result.ledgered_by
    statuses = dict(JobRun.objects.values_list("id", "status"))
    assert statuses[one_off.pk] == "missed" and statuses[poisoned.pk] == "missed"


def test_slots_freed_by_unreadable_claims_are_claimed_at_once_from_the_start(db):
    """Unreadable runs sort first (a BC fire_after) and took every slot of the pass."""
    healthy = [enqueue("tests.noop", kwargs={"n": i}) for i in range(2)]
    poison = [enqueue("tests.noop") for _ in range(2)]
    drop_bounds()
    sql("UPDATE pgsched_job_run SET fire_after = '0001-06-01 00:00:00+00 BC' WHERE id = ANY(%s)",
        [[p.pk for p in poison]])  # fmt: skip
    executor = Executor(concurrency=2, inline=True)
    first = executor.run_once()
    assert first.claimed == 0 and not jobs.CALLS
    assert executor.seconds_until_next_pass() == 0  # not the poll interval
    second = executor.run_once()  # from the start, not from where the poison left the cursor
    assert second.claimed == 2 and sorted(c["n"] for c in jobs.CALLS) == [0, 1]
    assert {JobRun.objects.get(pk=r.pk).status for r in healthy} == {"succeeded"}


def test_a_run_past_its_deadline_is_not_waited_for(db):
    run = enqueue("tests.noop")
    sql("UPDATE pgsched_job_run SET start_by = now() - interval '1 minute' WHERE id = %s",
        [run.pk])  # fmt: skip
    result = Executor(concurrency=2, inline=True).run_once()
    assert result.claimed == 0 and result.next_due_in is None  # not "due now", again and again
