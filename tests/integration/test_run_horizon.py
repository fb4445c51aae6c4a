"""The live months (``pgsched_run_horizon``): where the executor's pass looks, and how the
horizon moves (pgsched_run_horizon_advance, the trigger pgsched_run_horizon_lower;
docs/explanation/partitions.md "Where the claim looks")."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import ProgrammingError, connection

from django_pgsched import enqueue
from django_pgsched.engine import queries
from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun
from django_pgsched.partitions.months import add_months, month_start, partition_name
from django_pgsched.partitions.upkeep import Upkeep
from tests.conftest import dsn
from tests.integration.test_executor import FakeClock, executor_params, now_db, walk
from tests.integration.test_plans import generic_plan

OLD_INSERT = """
INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue, status,
                             fire_after, attempts, max_attempts, timeout)
VALUES (%s, %s, 'tests.noop', '{}', 'default', 'pending', %s, 0, 1, interval '1 minute')
"""


def horizon() -> datetime | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT live_since FROM pgsched_run_horizon")
        value: datetime | None = cursor.fetchone()[0]
        return value


def advance() -> datetime | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pgsched_run_horizon_advance()")
        value: datetime | None = cursor.fetchone()[0]
        return value


def previous_month() -> datetime:
    """Where an advance puts the horizon past finished history (as of a day ago)."""
    return add_months(month_start(now_db() - timedelta(days=1)), -1)


def finish(run: JobRun, status: str = "succeeded") -> None:
    JobRun.objects.filter(pk=run.pk).update(status=status, finished_at=now_db())


def test_upkeep_moves_the_horizon_to_the_previous_month_past_finished_history(db):
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    finish(old)
    assert horizon() is None  # every month, until an upkeep has looked
    result = Upkeep().run_once()
    assert result.live_since == previous_month() == horizon()


def test_the_horizon_stays_at_the_oldest_month_holding_an_unfinished_run(db):
    waiting = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    finish(enqueue("tests.noop", run_at=now_db() - timedelta(days=200)), "failed")
    retrying = enqueue("tests.noop", run_at=now_db() - timedelta(days=70))
    JobRun.objects.filter(pk=retrying.pk).update(status="retrying")
    assert advance() == month_start(waiting.scheduled_for)
    finish(waiting)
    assert advance() == month_start(retrying.scheduled_for)
    finish(retrying, "failed")
    assert advance() == previous_month() == horizon()


def test_a_run_written_unfinished_below_the_horizon_lowers_it_at_once(db):
    assert advance() == previous_month()
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    assert horizon() == month_start(old.scheduled_for)
    # a run of the previous month or later never needs to (nor fires the trigger)
    assert advance() == month_start(old.scheduled_for)
    finish(old)
    assert advance() == previous_month()
    enqueue("tests.noop", run_at=previous_month() + timedelta(hours=1))
    assert horizon() == previous_month()


def test_a_finished_run_requeued_below_the_horizon_lowers_it(db):
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    finish(old, "failed")
    assert advance() == previous_month()
    JobRun.objects.filter(pk=old.pk).update(status="pending", finished_at=None)
    assert horizon() == month_start(old.scheduled_for)


def test_the_executor_claims_a_run_written_below_the_horizon_it_last_read(db):
    executor = Executor(inline=True, clock=FakeClock(), worker_id="horizon")
    advance()
    assert executor.run_once().claimed == 0  # reads the horizon: the previous month
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    first = executor.run_once()  # looked from the horizon it had read: not in the old month
    assert first.claimed == 0
    assert executor.seconds_until_next_pass() == 0.0  # ... but saw the horizon go down
    assert executor.run_once().claimed == 1
    old.refresh_from_db()
    assert old.status == "succeeded"


def test_without_the_trigger_an_unseen_run_is_found_by_the_next_upkeep(db):
    # The negative control of the test above: a run written below the horizon without
    # the trigger (its transaction began in an earlier month, say) stays out of the
    # passes until an upkeep's advance finds it and moves the horizon back down.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgsched_job_run DISABLE TRIGGER pgsched_run_horizon_lower")
    executor = Executor(inline=True, clock=FakeClock(), worker_id="horizon")
    advance()
    assert executor.run_once().claimed == 0  # reads the horizon: the previous month
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=100))
    assert horizon() == previous_month()
    assert executor.run_once().claimed == 0
    assert executor.run_once().claimed == 0
    assert Upkeep().run_once().live_since == month_start(old.scheduled_for)
    assert executor.run_once().claimed == 0  # the horizon it had read
    assert executor.run_once().claimed == 1
    old.refresh_from_db()
    assert old.status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_an_advance_never_waits_and_never_passes_a_run_being_written():
    assert advance() == previous_month()
    writer = psycopg.connect(**dsn())
    try:
        at = (now_db() - timedelta(days=100)).replace(microsecond=0)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pgsched_ensure_months(ARRAY[%s::timestamptz])", [at])
        writer.execute(OLD_INSERT, [at, "horizon-writer", at])  # uncommitted: holds the row
        assert advance() is None  # the row is held: left as it is, nobody waited
        assert horizon() == previous_month()
        writer.commit()
        assert horizon() == month_start(at)
        assert advance() == month_start(at)
    finally:
        writer.close()


@pytest.mark.django_db(transaction=True)
def test_a_write_below_the_horizon_waits_for_an_advance_under_way_then_lowers_it():
    at = (now_db() - timedelta(days=100)).replace(microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pgsched_ensure_months(ARRAY[%s::timestamptz])", [at])
    advancing = psycopg.connect(**dsn())
    writer = psycopg.connect(**dsn())
    outcome: dict[str, Any] = {}
    try:
        (moved,) = advancing.execute("SELECT pgsched_run_horizon_advance()").fetchone()
        assert moved == previous_month()  # uncommitted: its row stays locked

        def write() -> None:
            writer.execute(OLD_INSERT, [at, "horizon-late", at])
            writer.commit()
            outcome["written"] = True

        racer = threading.Thread(target=write)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), outcome  # waits for the advance to end
        advancing.commit()
        racer.join(10)
        assert outcome == {"written": True}
    finally:
        advancing.close()
        writer.close()
    assert horizon() == month_start(at)


def test_the_pass_leaves_the_months_before_the_horizon_out_when_it_starts(db):
    now = now_db()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pgsched_ensure_months(array_agg(%s::timestamptz - k * interval '1 month'))"
            " FROM generate_series(1, 8) k",
            [now],
        )
    since = previous_month()
    old = {partition_name("pgsched_job_run", add_months(since, -k)) for k in range(1, 6)}

    def reads(plan: dict[str, Any]) -> Counter[str]:
        return Counter(name for node in walk(plan) if (name := node.get("Relation Name")) in old)

    everything = reads(generic_plan(queries.EXECUTOR_PASS.sql, executor_params(limit=4)))
    assert set(everything) == old and min(everything.values()) >= 3, everything
    params = {**executor_params(limit=4), "live_since": since}
    plan = generic_plan(queries.EXECUTOR_PASS.sql, params)
    # the claim, the lease's update and the next-due probe leave them out (as does the
    # recording, with nothing to record); the overlap checks, which read every month
    # for runs that finished late, are the guarded claim's (executor_guarded_pick)
    assert reads(plan) == {}, reads(plan)
    removed = [node["Subplans Removed"] for node in walk(plan) if "Subplans Removed" in node]
    assert len([n for n in removed if n >= 5]) >= 4, removed
    assert partition_name("pgsched_job_run", month_start(now)) in {
        node.get("Relation Name") for node in walk(plan)
    }


def test_a_run_scheduled_bc_makes_every_month_live_and_the_passes_go_on(db):
    # Written past its CHECKs (the poisoned-rows scenario): the horizon goes to NULL
    # (every month), never to an instant Python cannot read, and the run is failed
    from tests.integration.test_poisoned_rows import drop_bounds

    executor = Executor(inline=True, clock=FakeClock(), worker_id="horizon")
    assert advance() == previous_month()
    assert executor.run_once().claimed == 0  # reads the horizon: the previous month
    poison = enqueue("tests.noop")
    drop_bounds()
    bc = "'0001-06-01 00:00:00+00 BC'"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pgsched_ensure_months(ARRAY[{bc}]::timestamptz[])")
        cursor.execute(
            f"UPDATE pgsched_job_run SET scheduled_for = {bc} WHERE id = %s", [poison.pk]
        )
        cursor.execute("SELECT live_since IS NULL FROM pgsched_run_horizon")
        assert cursor.fetchone()[0]  # lowered by the trigger: every month
        cursor.execute("UPDATE pgsched_run_horizon SET live_since = %s", [previous_month()])
    # the advance finds the month by its partition's bound (its name is June of year 1 AD)
    assert advance() is None and horizon() is None
    executor.run_once()  # saw the horizon go down: looks again at once
    executor.run_once()
    assert JobRun.objects.filter(pk=poison.pk).values_list("status", flat=True)[0] == "failed"


def test_a_role_granted_only_the_documented_tables_moves_and_reads_the_horizon(db):
    # docs/how-to/database.md, "A role without superuser": no grant on the horizon's table
    with connection.cursor() as cursor:
        cursor.execute("CREATE ROLE pgsched_horizon_app NOLOGIN NOSUPERUSER")
        cursor.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON pgsched_schedule, pgsched_job_run,"
            " pgsched_attempt, pgsched_skipped_range, pgsched_schedule_change, pgsched_breaker"
            " TO pgsched_horizon_app"
        )
        cursor.execute(
            "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO pgsched_horizon_app"
        )
        at = (now_db() - timedelta(days=100)).replace(microsecond=0)
        cursor.execute("SELECT pgsched_ensure_months(ARRAY[%s::timestamptz])", [at])
        cursor.execute("SET LOCAL ROLE pgsched_horizon_app")
        cursor.execute("SELECT pgsched_run_horizon_advance()")
        assert cursor.fetchone()[0] == previous_month()
        cursor.execute(OLD_INSERT, [at, "horizon-role", at])  # the trigger lowers it
        cursor.execute("SELECT pgsched_run_horizon_since()")
        assert cursor.fetchone()[0] == month_start(at)
        # every role may read the table (migrations/sql/grants.sql: executor_pass reads it), and
        # only the SECURITY DEFINER functions write it
        cursor.execute("SELECT live_since FROM pgsched_run_horizon")
        assert cursor.fetchone()[0] == month_start(at)
        with pytest.raises(ProgrammingError, match="permission denied"):
            cursor.execute("UPDATE pgsched_run_horizon SET live_since = NULL")
