"""A claimed run: its lifecycle in this replica, and what its attempt came to.

The executor keeps one :class:`Claim` per run it holds (or held) a lease on.
Its :class:`ClaimState` moves only through the transition methods below, so
every rule about a claim is in one place and testable without a database
(``tests/unit/test_claims.py``)::

    QUEUED ──start──> RUNNING ──job_returned──> DONE ──(recorded: forgotten)
       │                 │  └──time_out──> OVERDUE ──job_returned──> DONE
       │                 └──────────┬────────┘
       │                         interrupt (shutdown past its grace)
       │                            └──> INTERRUPTED ──job_returned──> (forgotten)
       ├──release──> RELEASED   (shutdown: given back unstarted)
       └── any leased state ──abandon──> ABANDONED  (lease lost or no longer trusted)

A slot is busy from the claim until the job's outcome is taken for recording
(``DONE`` frees it: the pass that claims for it records that outcome in the
same transaction), or, for an abandoned claim, until its job's thread is done
with it *and* the database's lease has certainly expired (lease rule 1 as the
database sees it: never more live leases than slots).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..context import RunContext
from ..outcomes import Defer
from ..statuses import AttemptStatus, RunStatus
from .leases import Lease


class InvalidTransition(RuntimeError):
    """A claim was asked to move in a way its lifecycle does not allow (a bug)."""


class ClaimState(enum.Enum):
    QUEUED = "queued"  # claimed; its job has not started
    RUNNING = "running"  # its job runs on a slot
    OVERDUE = "overdue"  # its job runs past its timeout; asked to stop, still leased
    DONE = "done"  # its job returned; the outcome waits to be recorded
    RELEASED = "released"  # given back unstarted (shutdown)
    ABANDONED = "abandoned"  # the lease was lost or no longer trusted; its result is discarded
    INTERRUPTED = "interrupted"  # shutdown gave up waiting; recorded as a failed attempt

    @property
    def leased(self) -> bool:
        """The replica still holds the lease and renews it."""
        return self in _LEASED

    @property
    def job_pending(self) -> bool:
        """Its job has not returned yet and is not late: an outcome may come soon."""
        return self in (ClaimState.QUEUED, ClaimState.RUNNING)

    @property
    def in_progress(self) -> bool:
        """Its job has not returned (running, late, or not started)."""
        return self in (ClaimState.QUEUED, ClaimState.RUNNING, ClaimState.OVERDUE)


_LEASED = frozenset({ClaimState.QUEUED, ClaimState.RUNNING, ClaimState.OVERDUE, ClaimState.DONE})


@dataclass(eq=False)
class Claim:
    """A run this replica holds (or held) a lease on."""

    run_id: int
    token: uuid.UUID
    attempt: int
    max_attempts: int
    timeout: timedelta
    job: str
    queue: str
    kwargs: dict[str, Any]
    schedule_name: str | None
    scheduled_for: datetime
    idempotency_key: str
    fire_after: datetime
    started_at: datetime
    lease: Lease
    context: RunContext
    state: ClaimState = ClaimState.QUEUED
    started_mono: float | None = None
    # the job's thread is done with it (returned, or never started it)
    returned: bool = False
    # a django.tasks call (the run's task_call column): args, backend alias, run_after
    task_call: dict[str, Any] | None = None
    # why the claimed row cannot be run (a payload that cannot be decoded, a time or a
    # timeout out of range): the executor fails it at once, fenced on its token
    unreadable: str = ""

    # -- transitions ------------------------------------------------------------------

    def _move(self, allowed: tuple[ClaimState, ...], to: ClaimState) -> None:
        if self.state not in allowed:
            raise InvalidTransition(
                f"run {self.run_id}: cannot go from {self.state.value} to {to.value}"
            )
        self.state = to

    def start(self, now: float) -> bool:
        """A slot starts the job; False if it was given back or abandoned while it waited."""
        if self.state is not ClaimState.QUEUED:
            return False
        self.state = ClaimState.RUNNING
        self.started_mono = now
        self.context.deadline = now + self.timeout.total_seconds()
        return True

    def time_out(self, now: float) -> bool:
        """Past its deadline: ask the job to stop; it stays leased until its thread returns."""
        if self.state is not ClaimState.RUNNING or now < self.context.deadline:
            return False
        self.state = ClaimState.OVERDUE
        self.context.cancel("the timeout passed")
        return True

    def job_returned(self, now: float) -> ClaimState:
        """The job's function returned. Returns the state it returned in.

        ``RUNNING`` (or a job that returned after its deadline, ``OVERDUE``):
        its outcome is to be recorded, and the claim becomes ``DONE``.
        ``ABANDONED``: its result is discarded. ``INTERRUPTED``: its outcome is
        already queued; the claim is over.
        """
        was = self.state
        if was is ClaimState.RUNNING and now >= self.context.deadline:
            was = ClaimState.OVERDUE  # returned, but too late
        if was in (ClaimState.RUNNING, ClaimState.OVERDUE):
            self.state = ClaimState.DONE
        elif was in (ClaimState.ABANDONED, ClaimState.INTERRUPTED):
            self.returned = True
        else:
            raise InvalidTransition(f"run {self.run_id}: a job returned while {was.value}")
        return was

    def abandon(self, reason: str) -> None:
        """The lease is lost (or no longer trusted): cancel the job, discard its result."""
        self.context.cancel(reason)
        if self.state in (ClaimState.QUEUED, ClaimState.DONE):
            self.returned = True  # never started, or its outcome will be refused
        self._move(tuple(_LEASED), ClaimState.ABANDONED)

    def release(self) -> bool:
        """Give the run back unstarted (shutdown); False if its job already started."""
        if self.state is not ClaimState.QUEUED:
            return False
        self.state = ClaimState.RELEASED
        return True

    def interrupt(self, reason: str) -> bool:
        """Shutdown stops waiting for a running job; False if it is not running."""
        if self.state not in (ClaimState.RUNNING, ClaimState.OVERDUE):
            return False
        self.state = ClaimState.INTERRUPTED
        self.context.cancel(reason)
        return True

    # -- questions --------------------------------------------------------------------

    def holds_slot(self, now: float) -> bool:
        """Whether this claim still occupies one of the replica's slots at ``now``."""
        if self.state is ClaimState.DONE:
            return False  # its outcome is recorded by the pass that claims for the slot
        if self.state is ClaimState.ABANDONED:
            return not self.settled(now)
        return True

    def settled(self, now: float) -> bool:
        """An abandoned claim its thread is done with, whose lease has certainly expired."""
        return (
            self.state is ClaimState.ABANDONED and self.returned and not self.lease.maybe_held(now)
        )

    def wake_times(self) -> list[float]:
        """When the executor must look at this claim again (monotonic)."""
        if self.state.in_progress:
            return [self.lease.renew_at, self.lease.trust_until, self.context.deadline]
        if self.state is ClaimState.ABANDONED and self.returned:
            return [self.lease.held_until]  # when its slot frees
        return []

    def elapsed(self, now: float) -> float:
        return now - self.started_mono if self.started_mono is not None else 0.0


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to, waiting to be recorded (fenced on the claim's token)."""

    claim: Claim
    status: AttemptStatus  # the attempt's status: succeeded, failed, timed_out or deferred
    error: str
    duration: float
    retry: bool = True  # a failure may be retried (False: not registered here, Fail(retry=False))
    value: str | None = None  # JSON text of the return value, for registry entries that keep it
    error_class: str = ""  # module.QualifiedName of the exception the attempt raised
    defer: Defer | None = None  # status deferred: the job's Defer (recorded by executor_defer)
    not_before: datetime | float | None = None  # a failure's Fail(not_before=...)
    detail: dict[str, Any] | None = None  # the job's RunContext.detail, kept on the attempt

    @property
    def run_status(self) -> RunStatus:
        """The run's status once this attempt is recorded (the retry delay aside).

        A deferred attempt's run status is decided by ``executor_defer``.
        """
        if self.status == AttemptStatus.SUCCEEDED:
            return RunStatus.SUCCEEDED
        if not self.retry or self.claim.attempt >= self.claim.max_attempts:
            return RunStatus.FAILED
        return RunStatus.RETRYING
