"""A claim's lifecycle and an outcome's consequence, without a database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from django_pgsched.context import RunContext
from django_pgsched.engine.backoff import Backoff
from django_pgsched.engine.claims import Claim, ClaimState, InvalidTransition, Outcome
from django_pgsched.engine.leases import Lease
from django_pgsched.statuses import AttemptStatus, RunStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def claim(*, attempt: int = 1, max_attempts: int = 3, timeout: float = 10.0) -> Claim:
    """A claim granted at monotonic 100.0 with a lease of twice its timeout."""
    return Claim(
        run_id=7,
        token=uuid.uuid4(),
        attempt=attempt,
        max_attempts=max_attempts,
        timeout=timedelta(seconds=timeout),
        job="tests.noop",
        queue="default",
        kwargs={},
        schedule_name=None,
        scheduled_for=T0,
        idempotency_key="k",
        fire_after=T0,
        started_at=T0,
        lease=Lease.granted(requested_at=100.0, duration=2 * timeout, margin=1.0),
        context=RunContext(
            job_run_id=7,
            job="tests.noop",
            schedule_name=None,
            scheduled_for=T0,
            attempt=attempt,
            max_attempts=max_attempts,
            idempotency_key="k",
            worker="w",
        ),
    )


def test_a_job_that_returns_in_time_is_done_and_frees_its_slot():
    c = claim()
    assert c.state is ClaimState.QUEUED and c.holds_slot(100.0) and c.state.leased
    assert c.start(101.0) and c.state is ClaimState.RUNNING
    assert c.context.deadline == 111.0
    assert c.job_returned(105.0) is ClaimState.RUNNING
    assert c.state is ClaimState.DONE and not c.holds_slot(105.0)
    assert c.state.leased  # its outcome is recorded fenced on the token: renewals go on
    assert c.elapsed(105.0) == 4.0


def test_a_job_that_returns_after_its_deadline_returned_overdue():
    c = claim()
    c.start(101.0)
    assert c.job_returned(111.0) is ClaimState.OVERDUE  # not timed out by a pass, but late
    assert c.state is ClaimState.DONE


def test_a_timed_out_job_is_asked_to_stop_and_keeps_its_slot_until_it_returns():
    c = claim()
    c.start(101.0)
    assert not c.time_out(110.9)
    assert c.time_out(111.0) and c.state is ClaimState.OVERDUE
    assert c.context.is_cancelled() and c.context.cancel_reason == "the timeout passed"
    assert c.holds_slot(200.0) and c.state.leased and c.state.in_progress
    assert not c.state.job_pending  # gathering does not wait for a late job
    assert not c.time_out(112.0)  # once
    assert c.job_returned(130.0) is ClaimState.OVERDUE and c.state is ClaimState.DONE


def test_a_claim_abandoned_while_queued_never_starts_and_frees_its_slot_with_the_lease():
    c = claim()
    c.abandon("the lease could not be renewed in time")
    assert c.state is ClaimState.ABANDONED and c.returned and c.context.is_cancelled()
    assert not c.start(101.0)  # the slot thread skips it
    assert c.holds_slot(119.9)  # the database may still count the lease (held until 120)
    assert not c.holds_slot(120.0) and c.settled(120.0)
    assert c.wake_times() == [120.0]  # when its slot frees


def test_an_abandoned_running_job_holds_its_slot_until_it_returns_and_the_lease_expired():
    c = claim()
    c.start(101.0)
    c.abandon("the lease was lost (reaped or cancelled)")
    assert not c.returned and c.holds_slot(500.0)  # its thread still runs the job
    assert c.wake_times() == []
    assert c.job_returned(130.0) is ClaimState.ABANDONED  # its result is discarded
    assert c.returned and c.settled(130.0)


def test_a_done_claim_whose_lease_is_lost_is_abandoned_with_its_outcome_refused():
    c = claim()
    c.start(101.0)
    c.job_returned(102.0)
    c.lease.released()  # the renewal did not find the token
    c.abandon("the lease was lost (reaped or cancelled)")
    assert c.returned and c.settled(102.0) and not c.holds_slot(102.0)


def test_only_a_queued_claim_can_be_released_and_only_a_started_one_interrupted():
    queued, running = claim(), claim()
    running.start(101.0)
    assert not running.release() and not queued.interrupt("x")
    assert queued.release() and queued.state is ClaimState.RELEASED
    assert not queued.start(101.0) and not queued.state.leased
    assert running.interrupt("interrupted: shutdown") and running.state is ClaimState.INTERRUPTED
    assert running.context.cancel_reason == "interrupted: shutdown"
    assert running.job_returned(140.0) is ClaimState.INTERRUPTED and running.returned


@pytest.mark.parametrize("state", [ClaimState.RELEASED, ClaimState.INTERRUPTED])
def test_a_claim_no_longer_leased_cannot_be_abandoned(state):
    c = claim()
    c.state = state
    with pytest.raises(InvalidTransition):
        c.abandon("lost")


def test_a_job_cannot_return_twice():
    c = claim()
    c.start(101.0)
    c.job_returned(102.0)
    with pytest.raises(InvalidTransition):
        c.job_returned(103.0)


def test_wake_times_of_a_claim_in_progress_are_renewal_trust_and_deadline():
    c = claim()
    c.start(101.0)
    assert c.wake_times() == [c.lease.renew_at, c.lease.trust_until, 111.0]


@pytest.mark.parametrize(
    ("status", "attempt", "retry", "expected"),
    [
        (AttemptStatus.SUCCEEDED, 3, True, RunStatus.SUCCEEDED),
        (AttemptStatus.FAILED, 1, True, RunStatus.RETRYING),
        (AttemptStatus.TIMED_OUT, 2, True, RunStatus.RETRYING),
        (AttemptStatus.FAILED, 3, True, RunStatus.FAILED),  # the last attempt
        (AttemptStatus.FAILED, 1, False, RunStatus.FAILED),  # cannot run here: no retry
    ],
)
def test_an_outcome_decides_the_runs_next_status(status, attempt, retry, expected):
    outcome = Outcome(claim(attempt=attempt, max_attempts=3), status, "", 0.0, retry)
    assert outcome.run_status is expected


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_success():
    backoff = Backoff()
    assert [backoff.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next() == 0.5
