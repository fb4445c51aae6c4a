"""The executor and the reaper against real PostgreSQL: claims, leases, fencing, outcomes."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_pgsched import enqueue
from django_pgsched.engine import db as db_module
from django_pgsched.engine import executor as executor_module
from django_pgsched.engine import queries, recording
from django_pgsched.engine.claims import ClaimState
from django_pgsched.engine.executor import Executor, Outcome
from django_pgsched.engine.maintenance import Reaper, Retention
from django_pgsched.engine.rows import DatabaseNow
from django_pgsched.models import Attempt, JobRun
from tests.conftest import seconds
from tests.testapp import jobs

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")

# the claim cursor as the index condition: (priority * -1, fire_after, id) >= (...), the
# columns cast to their types under their domains (migrations/sql/domains.sql), as
# PostgreSQL deparses it
CLAIM_ORDER_BOUND = re.compile(
    r"ROW\(\(+priority\)?(?:::smallint)? \* '-1'::integer\), \(?fire_after\)?"
    r"(?:::timestamp with time zone)?, id\) >= ROW\("
)


def now_db():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def attempts_of(run: JobRun) -> list[tuple[int, str]]:
    return list(Attempt.objects.filter(job_run=run).values_list("number", "status"))


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_inline_pass_runs_a_due_job_and_records_success(db):
    run = enqueue("tests.noop", kwargs={"x": 1})
    result = Executor(concurrency=2, inline=True).run_once()
    run.refresh_from_db()
    assert result.claimed == 1 and result.completed == 1
    assert jobs.CALLS == [{"job": "noop", "x": 1}]
    assert run.status == "succeeded" and run.attempts == 1 and run.finished_at is not None
    assert run.claimed_by is None and run.claim_expires_at is None
    assert attempts_of(run) == [(1, "succeeded")]


def test_context_carries_the_run(db):
    run = enqueue("tests.context", kwargs={"a": "b"}, idempotency_key="k-1")
    Executor(concurrency=1, inline=True, worker_id="w-test").run_once()
    (call,) = jobs.CALLS
    ctx = call["context"]
    assert call["kwargs"] == {"a": "b"}
    assert ctx.job_run_id == run.pk and ctx.attempt == 1 and ctx.idempotency_key == "k-1"
    assert ctx.schedule_name is None and ctx.worker == "w-test"
    assert ctx.scheduled_for == run.scheduled_for and ctx.scheduled_for.tzinfo is not None
    assert not ctx.is_cancelled()


def test_failure_retries_with_backoff_then_fails_at_max_attempts(db):
    run = enqueue("tests.fail")  # max_attempts=2 from the decorator
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "retrying" and run.attempts == 1 and run.finished_at is None
    assert run.fire_after > now_db()  # backoff: not due yet
    assert attempts_of(run) == [(1, "failed")]
    first = Attempt.objects.get(job_run=run)
    assert "RuntimeError: boom" in first.error
    assert first.error_class == "builtins.RuntimeError"  # the exception's class, by path
    later = run.fire_after + seconds(1)
    Executor(concurrency=1, inline=True).run_once(now=later)
    run.refresh_from_db()
    assert run.status == "failed" and run.attempts == 2 and run.finished_at is not None
    assert attempts_of(run) == [(1, "failed"), (2, "failed")]


def test_a_job_that_raises_is_logged_in_one_line(db, caplog):
    run = enqueue("tests.fail", kwargs={"message": "disk full\nsecond line"})
    with caplog.at_level("WARNING", logger="django_pgsched"):
        Executor(concurrency=1, inline=True).run_once()
    lines = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert lines == [f"run {run.pk} (tests.fail), attempt 1, failed: RuntimeError: disk full"]
    assert not [r for r in caplog.records if r.exc_info]  # the traceback is the attempt's


def test_claim_is_bounded_by_idle_slots(db):
    for _ in range(10):
        enqueue("tests.noop")
    executor = Executor(concurrency=3)  # threads not started: claims stay queued
    assert executor.run_once().claimed == 3
    assert executor.run_once().claimed == 0  # no idle slot left
    assert JobRun.objects.filter(status="running").count() == 3


def test_unknown_jobs_are_not_claimed(db):
    run = enqueue("tests.noop")
    JobRun.objects.filter(pk=run.pk).update(job="somewhere.else")
    assert Executor(concurrency=1, inline=True).run_once().claimed == 0


def test_one_executor_pass_query_budget(db, django_assert_num_queries):
    for _ in range(3):
        enqueue("tests.noop")
    executor = Executor(concurrency=4, inline=True)
    executor.run_once(now=now_db() - timedelta(hours=1))  # opens and configures the session
    # one statement claims 3 of the 4 slots (and, a slot being left, says when the next run
    # is due); after the jobs ran inline, one more records the 3 outcomes with their attempts
    with django_assert_num_queries(2):
        result = executor.run_once()
    assert result.claimed == 3 and result.completed == 3


def claim_one(executor: Executor):
    (claim,) = executor._exchange(connection, None, 1).claims
    return claim


def record(executor: Executor, outcomes: list[Outcome]) -> list[tuple[int, str]]:
    """Record ``outcomes`` alone (the fallback path): (id, status) of each recorded."""
    return list(recording.record_alone(connection, None, outcomes, executor.settings).items())


@pytest.mark.parametrize("write", ["complete", "retry", "release"])
def test_a_stale_token_cannot_write(db, write):
    run = enqueue("tests.noop")
    executor = Executor(concurrency=1)
    claim = claim_one(executor)
    # meanwhile the lease expired, the reaper recovered it and another replica claimed it
    fresh = uuid.uuid4()
    JobRun.objects.filter(pk=run.pk).update(claimed_by=fresh)
    if write == "release":
        assert executor.release_unstarted() == 0  # claim still "queued": a release is attempted
    else:
        result = "succeeded" if write == "complete" else "failed"
        assert record(executor, [Outcome(claim, result, "", 0.1)]) == []
    run.refresh_from_db()
    assert run.status == "running" and run.claimed_by == fresh and run.attempts == 1
    assert attempts_of(run) == []


def test_minimal_write_when_the_full_write_fails(db):
    run = enqueue("tests.noop")
    executor = Executor(concurrency=1)
    claim = claim_one(executor)
    Attempt.objects.create(job_run=run, number=1, status="failed", finished_at=now_db())  # clash
    rows = recording.record_one_or_minimal(
        connection, None, Outcome(claim, "succeeded", "", 0.1), executor.settings, "default"
    )
    run.refresh_from_db()
    assert rows and run.status == "retrying" and run.claimed_by is None
    assert "outcome could not be recorded" in run.note


def test_release_gives_back_unstarted_runs_without_consuming_an_attempt(db):
    run = enqueue("tests.noop")
    executor = Executor(concurrency=1)
    assert executor.run_once().claimed == 1
    assert executor.release_unstarted() == 1
    run.refresh_from_db()
    assert run.status == "pending" and run.attempts == 0 and run.claimed_by is None


def test_a_job_returning_after_its_timeout_is_recorded_timed_out(db):
    run = enqueue("tests.sleep", kwargs={"seconds": 1.2, "cooperative": False}, timeout=seconds(1))
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "retrying"
    ((number, status),) = attempts_of(run)
    assert (number, status) == (1, "timed_out")
    assert "timed out" in Attempt.objects.get(job_run=run).error


def test_an_overdue_job_keeps_its_lease_until_its_thread_returns(transactional_db):
    """A job that ignores is_cancelled() must not be retried while it still runs (I6)."""
    run = enqueue("tests.sleep", kwargs={"seconds": 2.0, "cooperative": False}, timeout=seconds(1))
    executor = Executor(concurrency=1)
    executor.start_threads()
    assert executor.run_once().claimed == 1
    (claim,) = executor.in_flight.values()
    deadline = time.monotonic() + 1.3
    while time.monotonic() < deadline:
        executor.run_once()
        time.sleep(0.05)
    assert claim.state is ClaimState.OVERDUE and claim.context.is_cancelled()
    run.refresh_from_db()
    assert run.status == "running" and attempts_of(run) == []  # still leased: no retry yet
    assert executor.idle_slots() == 0
    deadline = time.monotonic() + 10
    while attempts_of(run) == [] and time.monotonic() < deadline:
        executor.wake.wait(0.2)
        executor.run_once()
    run.refresh_from_db()
    assert attempts_of(run) == [(1, "timed_out")] and run.status == "retrying"
    assert executor.idle_slots() == 1


def test_jobs_ending_together_are_recorded_by_one_statement(db, monkeypatch):
    """A pass with an outcome waits (a bounded moment) for the jobs still running."""
    monkeypatch.setattr(executor_module, "GATHER_WINDOW", 5.0)  # the test's margin, not 2 ms
    quick = enqueue("tests.sleep", kwargs={"seconds": 0, "witness": False})
    slow = enqueue("tests.sleep", kwargs={"seconds": 0.2, "witness": False})
    executor = Executor(concurrency=2)
    executor.start_threads()
    assert executor.run_once().claimed == 2
    deadline = time.monotonic() + 10
    while executor.slots.outcomes.empty() and time.monotonic() < deadline:
        time.sleep(0.005)  # the quick job has returned; the slow one is still sleeping
    result = executor.run_once()
    assert result.completed == 2  # without the gather: 1, and a second statement for the other
    quick.refresh_from_db()
    slow.refresh_from_db()
    assert quick.status == slow.status == "succeeded"


class CountingCondition(threading.Condition):
    """A condition that counts its notify_all() calls (each wakes the gathering pass)."""

    def __init__(self, lock: Any) -> None:
        super().__init__(lock)
        self.notified = 0

    def notify_all(self) -> None:
        self.notified += 1
        super().notify_all()


def test_the_gathering_pass_is_woken_once_by_the_last_job_it_waits_for(db, monkeypatch):
    monkeypatch.setattr(executor_module, "GATHER_WINDOW", 5.0)  # the test's margin, not 2 ms
    runs = [
        enqueue("tests.sleep", kwargs={"seconds": seconds_, "witness": False})
        for seconds_ in (0, 0.1, 0.3)
    ]
    executor = Executor(concurrency=3)
    returned = CountingCondition(executor.slots.lock)
    executor.slots._returned = returned
    executor.start_threads()
    assert executor.run_once().claimed == 3
    deadline = time.monotonic() + 10
    while executor.slots.outcomes.empty() and time.monotonic() < deadline:
        time.sleep(0.005)  # the quick job has returned; the others are still sleeping
    assert executor.run_once().completed == 3
    assert returned.notified == 1  # not one wake-up per job: the last one's
    for run in runs:
        run.refresh_from_db()
        assert run.status == "succeeded"


def test_the_named_statements_of_a_connection_reuse_their_cursors(db):
    """db.fetch() keeps a psycopg cursor per connection and record; rows are each their own."""
    (first,) = db_module.fetch(connection, queries.DATABASE_NOW, {})
    raw = connection.connection
    cursor = raw._pgsched_cursors[DatabaseNow]
    run = enqueue("tests.noop")
    params = {"ids": [run.id], "tokens": [uuid.uuid4()]}
    assert db_module.fetch(connection, queries.EXECUTOR_RELEASE, params) == []
    (second,) = db_module.fetch(connection, queries.DATABASE_NOW, {})
    assert type(first) is type(second) is DatabaseNow and second.now >= first.now
    assert raw._pgsched_cursors[DatabaseNow] is cursor
    cursor.close()  # a closed one is replaced
    db_module.fetch(connection, queries.DATABASE_NOW, {})
    assert raw._pgsched_cursors[DatabaseNow] is not cursor
    assert not raw._pgsched_cursors[DatabaseNow].closed


def test_lost_lease_cancels_the_job_and_discards_its_result(db):
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(30))
    executor = Executor(concurrency=1, clock=clock)
    claim = claim_one(executor)
    JobRun.objects.filter(pk=run.pk).update(
        status="cancelled", claimed_by=None, claim_expires_at=None, finished_at=now_db()
    )
    clock.t += 21  # a third of the 60 s lease: time to renew
    result = executor.run_once()
    assert result.lost == 1 and claim.context.is_cancelled()
    assert "lost" in claim.context.cancel_reason
    executor.slots._run(claim)  # the job's thread reaches its end after all
    assert executor.run_once().completed == 0
    run.refresh_from_db()
    assert run.status == "cancelled" and attempts_of(run) == []


def test_lease_renewal_extends_claim_expires_at(db):
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(30))
    executor = Executor(concurrency=1, clock=clock)
    claim_one(executor)
    run.refresh_from_db()
    first = run.claim_expires_at
    clock.t += 25
    assert executor.run_once(now=first - seconds(30)).renewed == 1
    run.refresh_from_db()
    assert run.claim_expires_at == first - seconds(30) + seconds(60)


def test_unrenewable_lease_is_abandoned_by_the_local_clock(db):
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(10))
    executor = Executor(concurrency=1, clock=clock)
    claim = claim_one(executor)
    clock.t += 19.5  # past trust_until = claim + 20 s lease - 1 s margin
    result = executor.run_once()
    assert result.lost == 1 and claim.context.is_cancelled() and claim.state is ClaimState.ABANDONED
    run.refresh_from_db()
    assert run.status == "running"  # nothing written: the reaper will recover it


def test_an_abandoned_run_keeps_its_slot_until_the_database_lease_has_expired(db):
    """Lease rule 1 as the database sees it: never more live leases than slots.

    The replica gives a run up at its trust deadline, a margin before the
    database's expiry; claiming a successor at once would hold two live leases
    on one slot for that margin.
    """
    clock = FakeClock()
    first = enqueue("tests.noop", timeout=seconds(10))  # a 20 s lease, trusted for 19 s
    executor = Executor(concurrency=1, clock=clock)  # threads not started: the claim stays queued
    claim = claim_one(executor)
    second = enqueue("tests.noop", timeout=seconds(10))
    clock.t += 19.5
    result = executor.run_once()
    assert result.lost == 1 and claim.state is ClaimState.ABANDONED
    assert result.claimed == 0 and executor.idle_slots() == 0  # the database may still hold it
    assert executor.seconds_until_next_pass() == pytest.approx(0.5)  # when the slot frees
    clock.t += 0.5
    assert executor.idle_slots() == 1 and executor.in_flight == {}
    result = executor.run_once()
    assert result.claimed == 1
    (successor,) = executor.in_flight.values()
    assert successor.run_id == second.pk
    first.refresh_from_db()
    assert first.status == "running"  # the reaper's to recover


def test_a_run_reclaimed_by_the_replica_that_abandoned_it_is_a_separate_claim(db):
    """In-flight claims are keyed by token: the old claim's end must not drop the new one."""
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(10))
    executor = Executor(concurrency=2, clock=clock)
    old = claim_one(executor)
    clock.t += 19.5
    assert executor.run_once().lost == 1
    expire(run)
    Reaper().run_once()
    JobRun.objects.filter(pk=run.pk).update(fire_after=now_db())
    (new,) = executor._exchange(connection, None, 1).claims
    assert new.run_id == old.run_id and new.token != old.token
    assert set(executor.in_flight) == {old.token, new.token}
    clock.t += 1  # the old lease is certainly over: its slot frees, the new claim stays
    assert executor.idle_slots() == 1 and list(executor.in_flight) == [new.token]


def test_a_lease_lost_at_renewal_frees_its_slot_when_the_job_returns(db):
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(30))
    executor = Executor(concurrency=1, clock=clock)
    claim = claim_one(executor)
    claim.state = ClaimState.RUNNING  # as if its thread had started it
    JobRun.objects.filter(pk=run.pk).update(claimed_by=uuid.uuid4())  # re-claimed elsewhere
    clock.t += 21
    assert executor.run_once().lost == 1
    assert executor.idle_slots() == 0  # the job still runs on its thread
    with executor.slots.lock:
        claim.returned = True
        executor.slots.drop_settled()
    assert executor.idle_slots() == 1  # the database no longer counts it as ours


def expire(run: JobRun) -> None:
    JobRun.objects.filter(pk=run.pk).update(claim_expires_at=now_db() - seconds(1))


def test_reaper_recovers_an_expired_lease_with_a_lost_attempt(db):
    run = enqueue("tests.noop")
    claim_one(Executor(concurrency=1))
    expire(run)
    result = Reaper().run_once()
    run.refresh_from_db()
    assert result.retried == 1 and run.status == "retrying" and run.claimed_by is None
    assert attempts_of(run) == [(1, "lost")]


def test_reaper_dates_a_lost_attempt_at_its_lease_expiry(db):
    """From the expiry on the worker held nothing (it gave the run up by its own clock)."""
    run = enqueue("tests.noop")
    claim_one(Executor(concurrency=1))
    started = now_db() - seconds(60)
    expired_at = now_db() - seconds(30)
    JobRun.objects.filter(pk=run.pk).update(started_at=started, claim_expires_at=expired_at)
    Reaper().run_once()
    lost = Attempt.objects.get(job_run=run)
    assert lost.status == "lost" and lost.started_at == started
    assert lost.finished_at == expired_at


def test_reaper_fails_a_run_at_its_last_attempt(db):
    run = enqueue("tests.noop", max_attempts=1)
    claim_one(Executor(concurrency=1))
    expire(run)
    assert Reaper().run_once().failed == 1
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None


def test_reaper_leaves_alone_a_run_that_finished_between_its_read_and_write(db):
    run = enqueue("tests.noop")
    executor = Executor(concurrency=1, inline=True)
    claim = claim_one(executor)
    expire(run)
    reaper = Reaper()
    candidates = reaper.candidates()
    assert [c.id for c in candidates] == [run.pk]
    # the worker was only slow: it completes now, fenced on its (still current) token
    assert record(executor, [Outcome(claim, "succeeded", "", 0.1)])
    assert reaper.reap(candidates).retried == 0
    run.refresh_from_db()
    assert run.status == "succeeded" and attempts_of(run) == [(1, "succeeded")]


def test_reaper_leaves_alone_a_run_reclaimed_between_its_read_and_write(db):
    run = enqueue("tests.noop")
    claim_one(Executor(concurrency=1))
    expire(run)
    reaper = Reaper()
    candidates = reaper.candidates()
    JobRun.objects.filter(pk=run.pk).update(
        claimed_by=uuid.uuid4(), claim_expires_at=now_db() + seconds(60)
    )
    assert reaper.reap(candidates).retried == 0
    run.refresh_from_db()
    assert run.status == "running" and attempts_of(run) == []


def test_reaper_skips_rows_locked_by_another_connection(transactional_db, other_connection):
    run = enqueue("tests.noop")
    claim_one(Executor(concurrency=1))
    expire(run)
    other_connection.execute("SELECT 1 FROM pgsched_job_run WHERE id = %s FOR UPDATE", [run.pk])
    assert Reaper().run_once().retried == 0  # did not wait: SKIP LOCKED
    other_connection.rollback()
    assert Reaper().run_once().retried == 1


def test_retention_deletes_old_terminal_runs_with_their_attempts(db, settings):
    # a month goes once it ended before the cutoff: the old run's month (two back, which
    # conftest makes) ended at least 28 days ago, whatever the day of the month today
    settings.PGSCHED = {**getattr(settings, "PGSCHED", {}), "RETENTION": timedelta(days=20)}
    old = enqueue("tests.noop")
    Executor(concurrency=1, inline=True).run_once()
    fresh = enqueue("tests.noop")
    pending = enqueue("tests.noop", run_at=now_db() + timedelta(days=1))
    Executor(concurrency=1, inline=True).run_once()
    this_month = now_db().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    month_ago = (this_month - timedelta(days=32)).replace(day=2)  # two months back, the 2nd
    JobRun.objects.filter(pk=old.pk).update(
        scheduled_for=month_ago, fire_after=month_ago, finished_at=month_ago + seconds(1)
    )
    result = Retention().run_once()
    assert result.deleted == 1
    assert set(JobRun.objects.values_list("pk", flat=True)) == {fresh.pk, pending.pk}
    assert not Attempt.objects.filter(job_run_id=old.pk).exists()


def insert_runs(n: int, *, status: str, days_ago: float, finished_days_ago: float | None) -> None:
    """``n`` runs scheduled ``days_ago`` (a second apart), finished ``finished_days_ago``."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, queue, status,
                                         fire_after, attempts, max_attempts, timeout, finished_at)
            SELECT t, 'test:' || gen_random_uuid(), 'tests.noop', 'default', %(status)s, t,
                   0, 3, interval '30 seconds',
                   statement_timestamp() - %(finished)s * interval '1 day'
              FROM generate_series(1, %(n)s) AS g,
                   LATERAL (SELECT date_trunc('second', statement_timestamp())
                                   - %(days)s * interval '1 day' - g * interval '1 second') AS c(t)
            """,
            {"n": n, "status": status, "days": days_ago, "finished": finished_days_ago},
        )


@pytest.mark.parametrize("plan_cache_mode", ["auto", "force_generic_plan"])
def test_executor_claim_uses_the_claim_order_index_and_stops_at_the_limit(db, plan_cache_mode):
    # force_generic_plan: how the scheduler's own sessions plan their prepared statements
    for i in range(50):
        run = enqueue("tests.noop")
        if i % 5 == 0:  # some runs of a higher priority, as django.tasks' tasks may have
            JobRun.objects.filter(pk=run.pk).update(priority=10)
    with db_module.cursor(connection) as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"SET LOCAL plan_cache_mode = {plan_cache_mode}")
        for _ in range(3):  # prepared after its first execution: the later ones use the plan
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + queries.get("executor_pass"),
                executor_params(limit=4),
            )
            plan = cursor.fetchone()[0]
    text = json.dumps(plan)
    assert "pgsched_run_claim_order_idx" in text, text
    # one scan per month (pgsched_run_claim_order_idx_p202612, ...): the current one has them
    (scan,) = [
        n
        for n in walk(plan[0]["Plan"])
        if n.get("Index Name", "").startswith("pgsched_run_claim_order_idx")
        and n["Node Type"] == "Index Scan"
        and n["Actual Rows"]
    ]
    # the claim reads the index in (priority, fire_after) order, without a sort, and stops
    # after the 4 rows it locks, however many are due (42 left here)
    assert scan["Actual Rows"] == 4, scan
    (claim,) = [n for n in walk(plan[0]["Plan"]) if n.get("Subplan Name") == "CTE claimable"]
    assert not [n for n in walk(claim) if n["Node Type"] in ("Sort", "Seq Scan")], claim


def executor_params(limit: int) -> dict:
    return {
        "now": None,
        "live_since": None,
        "record_since": recording.NO_MONTH,  # nothing to record
        "ids": [],
        "tokens": [],
        "results": [],
        "errors": [],
        "statuses": [],
        "delays": [],
        "values": [],
        "error_classes": [],
        "not_befores": [],
        "details": [],
        "limit": limit,
        "jobs": ["tests.noop"],
        "queues": None,
        "worker": "w",
        "lease_factor": 2.0,
        "floor_rank": None,
        "floor_at": None,
        "floor_id": None,
        "held": False,
        "default_held": False,
    }


def test_the_claim_reads_from_its_cursor_and_a_full_read_finds_a_run_behind_it(db):
    # Claims read pgsched_run_claim_order_idx from where the last full claim started,
    # so that dead index entries of runs claimed earlier are not walked again; a
    # run that falls due behind the cursor is found by the next full read.
    base = now_db() - timedelta(minutes=10)
    runs = [enqueue("tests.noop", run_at=base + timedelta(seconds=i)) for i in range(6)]
    clock = FakeClock()
    executor = Executor(concurrency=2, inline=True, clock=clock)
    assert executor.run_once().claimed == 2  # a full read; the cursor is now at runs[0]
    late = enqueue("tests.noop", run_at=base - timedelta(hours=1))  # planned late: behind it
    clock.t += 0.1
    assert executor.run_once().claimed == 2  # read from the cursor
    late.refresh_from_db()
    assert late.status == "pending"
    assert set(JobRun.objects.filter(status="succeeded").values_list("pk", flat=True)) == {
        r.pk for r in runs[:4]
    }
    clock.t += 1.0  # CLAIM_FULL_SCAN_INTERVAL later: a full read, oldest first
    assert executor.run_once().claimed == 2
    late.refresh_from_db()
    runs[4].refresh_from_db()
    assert (late.status, runs[4].status) == ("succeeded", "succeeded")


def test_a_claim_from_the_cursor_that_does_not_fill_the_slots_reads_from_the_start_next(db):
    base = now_db() - timedelta(minutes=10)
    for i in range(3):
        enqueue("tests.noop", run_at=base + timedelta(seconds=i))
    clock = FakeClock()
    executor = Executor(concurrency=2, inline=True, clock=clock)
    assert executor.run_once().claimed == 2
    late = enqueue("tests.noop", run_at=base - timedelta(hours=1))
    clock.t += 0.1
    assert executor.run_once().claimed == 1  # from the cursor: only the third run
    clock.t += 0.1  # well within the interval, but the last read came back short
    assert executor.run_once().claimed == 1
    late.refresh_from_db()
    assert late.status == "succeeded"


def test_claims_take_the_highest_priority_first_then_the_longest_due(db):
    base = now_db() - timedelta(minutes=10)
    order = [(0, 3), (5, 5), (0, 1), (-3, 0), (5, 2)]  # (priority, seconds after base)
    runs = []
    for priority, offset in order:
        run = enqueue("tests.noop", run_at=base + timedelta(seconds=offset))
        JobRun.objects.filter(pk=run.pk).update(priority=priority)
        runs.append(run)
    executor = Executor(concurrency=1, inline=True)
    claimed = []
    while executor.run_once().claimed:
        claimed.append(
            JobRun.objects.filter(status="succeeded").order_by("-finished_at", "-id").first().pk
        )
    # priority 5 (due at +2, then +5), then 0 (+1, +3), then -3
    assert claimed == [runs[4].pk, runs[1].pk, runs[2].pk, runs[0].pk, runs[3].pk]


def test_a_more_urgent_run_due_behind_the_cursor_is_claimed_at_the_next_full_read(db):
    base = now_db() - timedelta(minutes=10)
    for i in range(6):
        enqueue("tests.noop", run_at=base + timedelta(seconds=i))
    clock = FakeClock()
    executor = Executor(concurrency=2, inline=True, clock=clock)
    assert executor.run_once().claimed == 2  # a full read: the cursor is at priority 0
    urgent = enqueue("tests.noop", run_at=base + timedelta(seconds=30))
    JobRun.objects.filter(pk=urgent.pk).update(priority=10)  # before the cursor in claim order
    clock.t += 0.1
    executor.run_once()  # from the cursor
    urgent.refresh_from_db()
    assert urgent.status == "pending"
    clock.t += 1.0  # CLAIM_FULL_SCAN_INTERVAL later: a full read takes it first
    executor.run_once()
    urgent.refresh_from_db()
    assert urgent.status == "succeeded"
    assert JobRun.objects.filter(status="pending").count() == 1  # one priority-0 run left


def test_the_claim_cursor_is_an_index_condition(db):
    for _ in range(50):
        enqueue("tests.noop")
    floor = JobRun.objects.order_by("fire_after", "id").values_list("fire_after", "id")[10]
    with db_module.cursor(connection) as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + queries.get("executor_pass"),
            {
                **executor_params(limit=4),
                "floor_rank": 0,
                "floor_at": floor[0],
                "floor_id": floor[1],
            },
        )
        plan = cursor.fetchone()[0]
    # one scan per month (pgsched_run_claim_order_idx_p202612, ...): the current one has them
    (scan,) = [
        n
        for n in walk(plan[0]["Plan"])
        if n.get("Index Name", "").startswith("pgsched_run_claim_order_idx")
        and n["Node Type"] == "Index Scan"
        and n["Actual Rows"]
    ]
    # the row comparison bounds the index range (it is not a filter applied after reading)
    assert CLAIM_ORDER_BOUND.search(scan.get("Index Cond", "")), scan
    assert scan["Actual Rows"] == 4, scan


def walk(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def test_enqueue_with_an_existing_idempotency_key_returns_the_existing_run(db):
    first = enqueue("tests.noop", idempotency_key="once")
    second = enqueue("tests.noop", idempotency_key="once")
    assert first.pk == second.pk and JobRun.objects.count() == 1


def test_recording_outcomes_finds_runs_by_primary_key_not_the_running_index(private_runs):
    # While a transaction elsewhere holds vacuum back, pgsched_run_running_idx keeps an
    # entry for every run claimed since; its statistics still say few runs are running,
    # so a completion that could use it would read it whole on every pass.
    with db_module.cursor(connection) as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
                   status, fire_after, attempts, max_attempts, timeout, note, claimed_by, worker,
                   started_at, claim_expires_at, finished_at)
            SELECT date_trunc('second', now()) - g * interval '1 s', 'k' || g, 'tests.noop',
                   '{}', 'default', CASE WHEN g <= 8 THEN 'running' ELSE 'succeeded' END,
                   now(), 1, 3, interval '1 minute', '',
                   CASE WHEN g <= 8 THEN gen_random_uuid() END, 'w', now(),
                   CASE WHEN g <= 8 THEN now() + interval '2 minutes' END,
                   CASE WHEN g > 8 THEN now() END
              FROM generate_series(1, 20000) g
            """
        )
        cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        cursor.execute("SELECT id, claimed_by FROM pgsched_job_run WHERE status = 'running'")
        held = cursor.fetchall()
        params = {
            **executor_params(limit=0),
            "record_since": None,  # every month
            "ids": [row[0] for row in held],
            "tokens": [row[1] for row in held],
            "results": ["succeeded"] * len(held),
            "errors": [""] * len(held),
            "statuses": ["succeeded"] * len(held),
            "delays": [None] * len(held),
            "values": [None] * len(held),
            "error_classes": [""] * len(held),
        }
        cursor.execute("EXPLAIN (FORMAT JSON) " + queries.get("executor_pass"), params)
        plan = cursor.fetchone()[0]
    used = {n.get("Index Name") for n in walk(plan[0]["Plan"])}
    assert "pgsched_run_running_idx" not in used, used
    assert "pgsched_job_run_pkey" in used, used


def test_a_pass_sends_its_facts_on_its_first_row_only(db, monkeypatch):
    """executor_pass: the recorded ids and statuses, next due, database time and horizon
    are on the pass's first row; every other claimed row carries NULLs there, and the
    pass's result still records every outcome."""
    monkeypatch.setattr(executor_module, "GATHER_WINDOW", 5.0)  # the test's margin, not 2 ms
    runs = [enqueue("tests.noop", kwargs={"i": i}) for i in range(6)]
    passes: list[list[Any]] = []
    real_fetch = db_module.fetch

    def fetch(conn, statement, params):
        rows = real_fetch(conn, statement, params)
        if statement is queries.EXECUTOR_PASS:
            passes.append(rows)
        return rows

    monkeypatch.setattr(db_module, "fetch", fetch)
    executor = Executor(concurrency=3)
    executor.start_threads()
    try:
        assert executor.run_once().claimed == 3
        deadline = time.monotonic() + 10
        while executor.slots.outcomes.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        result = executor.run_once()  # records the 3 outcomes and claims the other 3
        assert result.completed == 3 and result.claimed == 3
        deadline = time.monotonic() + 10
        while executor.slots.outcomes.qsize() < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        executor.run_once()
    finally:
        executor.stop_threads(5)
    recording_and_claiming = [rows for rows in passes if len(rows) > 1 and rows[0].recorded_ids]
    assert recording_and_claiming, [len(rows) for rows in passes]
    for rows in passes:
        first, *others = rows
        assert first.db_now is not None
        for row in others:
            assert row.id is not None
            assert (row.recorded_ids, row.recorded_statuses, row.next_due, row.db_now) == (
                None,
                None,
                None,
                None,
            )
            assert row.live_since is None
    rows = recording_and_claiming[0]
    assert len(rows[0].recorded_ids) == len(rows[0].recorded_statuses) >= 2
    assert set(rows[0].recorded_statuses) == {"succeeded"}
    for run in runs:
        run.refresh_from_db()
    assert [run.status for run in runs] == ["succeeded"] * 6
