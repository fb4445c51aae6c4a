"""Overlap policy and start deadline: decided in the database by the claim and the guard.

The runs are claimed by an executor whose slot threads are not started, so a
claimed run stays ``running`` until the test finishes it (with SQL, at a time
of its choosing); ``now`` is passed to every statement.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from django_pgsched import backfill, events
from django_pgsched.conf import get_settings
from django_pgsched.engine import db, queries, recording
from django_pgsched.engine.claiming import claim_params
from django_pgsched.engine.executor import Executor
from django_pgsched.engine.guard import Guard
from django_pgsched.engine.planner import Planner
from django_pgsched.ledger.accounting import account
from django_pgsched.models import JobRun, Schedule, SkippedRange
from tests.conftest import at, seconds

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


def runs(s: Schedule) -> dict[str, str]:
    """``{"+n": status}`` of the schedule's runs, n seconds after T."""
    return {
        f"+{int((r.scheduled_for - T).total_seconds())}": r.status
        for r in JobRun.objects.filter(schedule=s).order_by("scheduled_for")
    }


def ledger(s: Schedule) -> list[tuple[int, int, int, str]]:
    return [
        (int((r.first - T).total_seconds()), int((r.last - T).total_seconds()), r.count, r.reason)
        for r in SkippedRange.objects.filter(schedule=s).order_by("first")
    ]


def finish(s: Schedule, offset: float, when: float, status: str = "succeeded") -> None:
    """The run at T+offset ends at T+when."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgsched_job_run SET status = %s, finished_at = %s, claimed_by = NULL,"
            " claim_expires_at = NULL WHERE schedule_id = %s AND scheduled_for = %s",
            [status, T + seconds(when), s.pk, T + seconds(offset)],
        )


def claim(executor: Executor, offset: float) -> int:
    return executor.run_once(now=T + seconds(offset)).claimed


@pytest.fixture
def exclusive(make_schedule):
    def make(overlap: str, **fields: Any) -> Schedule:
        s = make_schedule(overlap=overlap, next_fire_at=T, **fields)
        Planner().run_once(now=T - seconds(1))  # plans T .. T+4 (the lookahead)
        return s

    return make


def executor() -> Executor:
    return Executor(concurrency=4, worker_id="w1")  # slot threads not started: runs stay running


def test_skip_drops_the_occurrences_that_fall_due_while_the_previous_run_runs(exclusive):
    s = exclusive("skip")
    ex = executor()
    assert claim(ex, 0) == 1  # T+0 starts
    assert claim(ex, 2.5) == 0  # T+1, T+2 are due, but T+0 still runs
    guarded = Guard().run_once(now=T + seconds(2.5))
    assert (guarded.dropped, guarded.missed) == (2, 0)
    assert runs(s) == {"+0": "running", "+3": "pending", "+4": "pending"}
    assert ledger(s) == [(1, 2, 2, "overlap")]
    finish(s, 0, 3.5)
    assert claim(ex, 3.6) == 0  # T+3 fell due while T+0 ran: never started
    Guard().run_once(now=T + seconds(3.6))
    assert ledger(s) == [(1, 3, 3, "overlap")]  # the range grew
    assert claim(ex, 4.0) == 1  # T+4 fell due after T+0 ended
    assert runs(s) == {"+0": "succeeded", "+4": "running"}
    report = account(s, T, T + seconds(5))
    assert report.problems == [] and report.runs == 2 and report.by_reason == {"overlap": 3}


def test_skip_decides_by_when_a_run_fell_due_not_by_when_the_guard_looked(exclusive):
    s = exclusive("skip")
    ex = executor()
    claim(ex, 0)
    finish(s, 0, 1.5)  # T+1 fell due while T+0 ran; T+2 after it ended; no guard meanwhile
    assert claim(ex, 2.5) == 0  # T+1 never starts, and T+2 waits behind it
    Guard().run_once(now=T + seconds(2.5))
    assert ledger(s) == [(1, 1, 1, "overlap")]
    assert claim(ex, 2.6) == 1
    assert runs(s)["+2"] == "running"


def test_buffer_one_keeps_one_run_waiting_and_drops_the_rest(exclusive):
    s = exclusive("buffer_one")
    ex = executor()
    claim(ex, 0)
    assert claim(ex, 3.5) == 0
    Guard().run_once(now=T + seconds(3.5))
    assert runs(s) == {"+0": "running", "+1": "pending", "+4": "pending"}
    assert ledger(s) == [(2, 3, 2, "overlap")]
    finish(s, 0, 3.7)
    assert claim(ex, 3.8) == 1  # the waiting one starts once the running one ended
    assert runs(s) == {"+0": "succeeded", "+1": "running", "+4": "pending"}
    assert claim(ex, 4.5) == 0  # T+4 waits behind T+1
    assert Guard().run_once(now=T + seconds(4.5)).dropped == 0
    report = account(s, T, T + seconds(5))
    assert report.problems == [] and report.runs == 3 and report.by_reason == {"overlap": 2}


def test_a_retrying_run_is_unfinished(exclusive):
    s = exclusive("skip")
    ex = executor()
    claim(ex, 0)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', claimed_by = NULL,"
            " claim_expires_at = NULL, fire_after = %s"
            " WHERE schedule_id = %s AND scheduled_for = %s",
            [T + seconds(10), s.pk, T],
        )
    assert claim(ex, 1.5) == 0
    assert Guard().run_once(now=T + seconds(1.5)).dropped == 1


def test_allow_runs_side_by_side(exclusive):
    s = exclusive("allow")
    ex = executor()
    claim(ex, 0)
    assert claim(ex, 2.5) == 2
    assert Guard().run_once(now=T + seconds(2.5)).dropped == 0
    assert set(runs(s).values()) == {"running", "pending"}


def test_a_run_not_started_by_its_deadline_is_missed_without_running(exclusive):
    received: list[dict[str, Any]] = []

    def on_guarded(sender: object, **kwargs: Any) -> None:
        received.append(kwargs)

    events.runs_guarded.connect(on_guarded, weak=False, dispatch_uid="test-deadline")
    try:
        s = exclusive("allow", start_deadline=seconds(2))
        ex = Executor(concurrency=4, worker_id="w1", queues=["elsewhere"])  # claims nothing
        assert claim(ex, 3.5) == 0
        guarded = Guard().run_once(now=T + seconds(3.5))
    finally:
        events.runs_guarded.disconnect(dispatch_uid="test-deadline")
    assert guarded.missed == 2  # T+0 (start_by T+2) and T+1 (T+3); T+2 may still start
    run = JobRun.objects.get(schedule=s, scheduled_for=T)
    assert run.status == "missed" and run.attempts == 0 and run.finished_at is not None
    assert run.start_by == T + seconds(2) and "start deadline" in run.note
    assert ledger(s) == [(0, 1, 2, "deadline")]
    assert received == [
        {
            "signal": events.runs_guarded,
            "missed": {("default", "tests.noop"): 2},
            "ledgered": {("default", "tests.noop", "cron", "deadline"): 2},
            "missed_tenants": {("default", "tests.noop", ""): 2},
        }
    ]
    assert claim(executor(), 3.6) == 2  # T+2 (start_by T+4) and T+3 (T+5) start in time
    assert runs(s) == {
        "+0": "missed",
        "+1": "missed",
        "+2": "running",
        "+3": "running",
        "+4": "pending",
    }
    report = account(s, T, T + seconds(5))
    assert report.problems == [] and report.missed == 2


def test_the_claim_refuses_a_run_past_its_deadline(exclusive):
    s = exclusive("allow", start_deadline=seconds(1))
    assert claim(executor(), 2.5) == 1  # only T+2 (start_by T+3); T+0 and T+1 are past
    assert runs(s)["+2"] == "running"
    assert runs(s)["+0"] == runs(s)["+1"] == "pending"


def test_a_retry_is_not_held_to_the_start_deadline(exclusive):
    s = exclusive("allow", start_deadline=seconds(1), job="tests.fail")
    Executor(concurrency=1, inline=True).run_once(now=T)
    run = JobRun.objects.get(schedule=s, scheduled_for=T)
    assert run.status == "retrying"
    Executor(concurrency=1, inline=True).run_once(now=run.fire_after + seconds(60))
    run.refresh_from_db()
    assert run.status == "failed" and run.attempts == 2


def test_backfilled_runs_of_a_skip_schedule_wait_their_turn(make_schedule):
    s = make_schedule(cron="0 * * * * *", overlap="skip", next_fire_at=T + timedelta(hours=1),
                      start_deadline=seconds(30))  # fmt: skip
    assert backfill(s.name, T, T + timedelta(minutes=3)) == 3
    runs_ = list(JobRun.objects.filter(schedule=s).order_by("id"))
    assert [r.start_by for r in runs_] == [None] * 3  # asked for late: no start deadline
    ex = executor()
    now = runs_[0].fire_after + seconds(60)
    for i in range(3):
        assert ex.run_once(now=now).claimed == 1  # one at a time, in order, none skipped
        assert Guard().run_once(now=now).dropped == 0
        assert list(JobRun.objects.filter(schedule=s, status="running")) == [runs_[i]]
        finish(s, 60 * i, (now - T).total_seconds() + 1)
        now += seconds(2)
    assert ledger(s) == []
    report = account(s, T, T + timedelta(minutes=3))
    assert report.problems == [] and report.runs == 3


def _claim_sql(conn: psycopg.Connection[Any], now: datetime, worker: str) -> list[Any]:
    params = {
        "now": now,
        "live_since": None,
        **recording.NOTHING_TO_RECORD,
        **claim_params(
            limit=4,
            jobs=["tests.noop"],
            queues=None,
            worker=worker,
            settings=get_settings(),
            floor=None,
        ),
    }
    # a run with an overlap policy is the guarded claim's: picked, then claimed by id
    unbounded = {"ceil_rank": None, "ceil_at": None, "ceil_id": None}
    picked = conn.execute(queries.get("executor_guarded_pick"), {**params, **unbounded}).fetchall()
    ids = [row[0] for row in picked if row[0] is not None]
    params = {**params, "claim_ids": ids, "held": False, "limit": len(ids)}
    rows = conn.execute(queries.get("executor_pass_by_id"), params).fetchall()
    return [row[0] for row in rows if row[0] is not None]


def test_two_sessions_never_start_two_runs_of_a_skip_schedule(other_connection, make_schedule):
    """Session A claims T+0 and has not committed; session B, at T+1.5, must not start T+1."""
    s = make_schedule(overlap="skip", next_fire_at=T)
    Planner().run_once(now=T - seconds(1))
    with psycopg.connect(**_dsn()) as a:
        assert len(_claim_sql(a, T, "a")) == 1  # T+0 (T+1 is not due yet); not committed
        # B's snapshot: T+0 pending (and locked: skipped), T+1 due behind an unfinished run
        assert _claim_sql(other_connection, T + seconds(1.5), "b") == []
        other_connection.commit()
        a.commit()
    assert _claim_sql(other_connection, T + seconds(1.5), "b") == []  # T+0 runs now
    other_connection.commit()
    assert list(
        JobRun.objects.filter(schedule=s, status="running").values_list("worker", flat=True)
    ) == ["a"]


def _dsn() -> dict[str, Any]:
    from tests.conftest import dsn

    return dsn()


def test_missed_runs_carry_their_tenant_to_the_opt_in_metrics_label(exclusive):
    from django_pgsched.ops.metrics import Metrics
    from tests.integration.test_metrics import value

    metrics = Metrics(tenant_label=True)
    metrics.connect()
    try:
        exclusive("allow", start_deadline=seconds(2), tenant="acme")
        Guard().run_once(now=T + seconds(3.5))
    finally:
        metrics.disconnect()
    labels = {"queue": "default", "job": "tests.noop", "status": "missed"}
    assert value(metrics, "pgsched_runs_finished_total", **labels, tenant="acme") == 2


def test_run_due_records_what_will_never_start(make_schedule):
    from django_pgsched.testing import run_due

    s = make_schedule(overlap="skip", start_deadline=seconds(2), next_fire_at=T)
    run_due(now=T - seconds(1))  # plans T .. T+4, runs nothing yet
    result = run_due(now=T + seconds(3.5), plan=False)  # T+0 .. T+1 are past their deadline
    assert len(result.attempts) == 1  # T+2 ran (inline, finished at T+3.5); T+3 it overlapped
    assert runs(s) == {"+0": "missed", "+1": "missed", "+2": "succeeded", "+4": "pending"}
    assert ledger(s) == [(0, 1, 2, "deadline"), (3, 3, 1, "overlap")]


def test_the_usual_claim_leaves_guarded_runs_to_the_guarded_claim(make_schedule):
    """executor_pass never claims a run with an overlap policy or a start deadline; the
    same pass claims it by the guarded claim, and a plain run beside it as usual."""
    guarded = make_schedule(name="guarded", overlap="skip", next_fire_at=T)
    deadline = make_schedule(name="deadline", start_deadline=seconds(30), next_fire_at=T)
    plain = make_schedule(name="plain", next_fire_at=T)
    Planner().run_once(now=T - seconds(1))
    params = {
        "now": T,
        "live_since": None,
        **recording.NOTHING_TO_RECORD,
        **claim_params(limit=8, jobs=["tests.noop"], queues=None, worker="x",
                       settings=get_settings(), floor=None),
    }  # fmt: skip
    with transaction.atomic():
        rows = db.fetch(connection, queries.EXECUTOR_PASS, params)
        claimed = {row.id for row in rows if row.id is not None}
        transaction.set_rollback(True)
    assert claimed == {JobRun.objects.get(schedule=plain, scheduled_for=T).pk}
    assert claim(executor(), 0) == 3
    assert {s.name: runs(s)["+0"] for s in (guarded, deadline, plain)} == {
        "guarded": "running", "deadline": "running", "plain": "running"
    }  # fmt: skip


def test_a_retrying_run_past_its_start_deadline_is_claimed_again(make_schedule):
    """A deadline bounds the first start only; the guarded claim reads retrying runs too."""
    s = make_schedule(start_deadline=seconds(2), next_fire_at=T, max_attempts=3)
    Planner().run_once(now=T - seconds(1))
    ex = executor()
    assert claim(ex, 0) == 1
    with connection.cursor() as cursor:  # failed; due again at T+10, past its deadline (T+2)
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', fire_after = %s, claimed_by = NULL,"
            " claim_expires_at = NULL WHERE schedule_id = %s AND scheduled_for = %s",
            [T + seconds(10), s.pk, T],
        )
    assert claim(ex, 10) >= 1
    assert runs(s)["+0"] == "running"


def test_under_a_backlog_a_guarded_run_never_starts_ahead_of_the_claims_order(db):
    """While every pass fills every slot, the guarded claim takes only the runs the usual
    claim has passed over: a deadline run due last starts after every run due before it."""
    from django_pgsched import enqueue

    now = datetime.now(UTC)
    plain = [enqueue("tests.noop", run_at=now - timedelta(seconds=60 - i)) for i in range(8)]
    late = enqueue("tests.noop", run_at=now - timedelta(seconds=1))
    with connection.cursor() as cursor:  # a start deadline: the guarded claim's
        cursor.execute(
            "UPDATE pgsched_job_run SET start_by = %s WHERE id = %s",
            [now + timedelta(hours=1), late.pk],
        )
    ex = Executor(concurrency=2, inline=True)
    started: list[int] = []
    for _ in range(6):
        ex.run_once()
        ex._guarded_next = 0.0  # no back-off: the guarded claim may run at every pass
        started += [
            r.pk for r in JobRun.objects.filter(status="succeeded").exclude(pk__in=started)
            .order_by("started_at", "pk")
        ]  # fmt: skip
    assert started[-1] == late.pk and sorted(started[:-1]) == [r.pk for r in plain], started
