"""Helpers for testing code that uses the scheduler (your jobs, your schedules).

:func:`run_due` does in your test's thread what the replicas would do: plan the
due schedules, then claim every due run, run its job and record the outcome,
with the real engine (leases, attempt rows, retries), on your test's database
connection and inside its transaction. No threads, no processes, no sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import events
from .engine.executor import Executor
from .engine.guard import Guard
from .engine.planner import Planner
from .statuses import AttemptStatus

__all__ = ["RunDueResult", "TooManyRuns", "run_due"]


class TooManyRuns(RuntimeError):
    """:func:`run_due` ran ``max_runs`` attempts and runs were still due (a job that
    keeps enqueueing due runs, say)."""


@dataclass(frozen=True)
class RunDueResult:
    """What :func:`run_due` did."""

    #: Runs the planner created for due schedule occurrences.
    planned: int = 0
    #: Every attempt that ran, as ``(run id, attempt status)``, in the order they ran.
    attempts: tuple[tuple[int, str], ...] = field(default=())

    @property
    def ran(self) -> int:
        """Attempts that ran."""
        return len(self.attempts)

    @property
    def succeeded(self) -> int:
        return sum(1 for _, status in self.attempts if status == AttemptStatus.SUCCEEDED)

    @property
    def failed(self) -> int:
        """Attempts that failed or timed out (their runs retry later or fail for good)."""
        return self.ran - self.succeeded

    @property
    def run_ids(self) -> tuple[int, ...]:
        """The runs that had an attempt, each once, in the order they first ran."""
        return tuple(dict.fromkeys(run_id for run_id, _ in self.attempts))


def run_due(
    *,
    now: datetime | None = None,
    plan: bool = True,
    queues: Sequence[str] | None = None,
    max_runs: int = 1000,
    using: str | None = None,
) -> RunDueResult:
    """Run, in this thread, every run that is due at ``now`` (default: the database's clock).

    With ``plan`` (the default) the due schedules are planned first, as a
    replica's planner would (at ``now``, with its lookahead). Then due runs are
    claimed, run and recorded until none is left: a run a job enqueues for now
    runs too, while a failed attempt's retry falls due after its backoff, so it
    waits for a later ``now`` (pass ``now=run.fire_after``). ``queues`` limits
    the runs to those queues. Raises :class:`TooManyRuns` past ``max_runs``
    attempts.

    Jobs run exactly as on a replica, but in the calling thread and on the
    calling thread's database connection, so pytest-django's ``db`` fixture (or
    ``django_db`` mark) is enough and everything is rolled back after the test.
    ``now`` is a test's time machine; in production the database clock decides.
    Before each pass and at the end, the guard records what will never start, as
    on a replica: a run past its start deadline ends ``missed``, one its
    schedule's overlap policy holds back for good is deleted (both go into the
    ledger).
    """
    planned = 0
    if plan:
        planner = Planner(using=using)
        while True:
            result = planner.run_once(now=now)
            planned += result.created
            if not result.batch_full:
                break
    attempts: list[tuple[int, str]] = []

    def finished(sender: object, run_id: int, outcome: str, **kwargs: Any) -> None:
        attempts.append((run_id, str(outcome)))

    executor = Executor(inline=True, queues=queues, using=using, worker_id="run_due")
    guard = Guard(using=using)
    events.attempt_finished.connect(finished, sender=Executor, weak=False)
    try:
        while True:
            if len(attempts) >= max_runs:
                raise TooManyRuns(
                    f"run_due ran {len(attempts)} attempts and runs are still due "
                    f"(max_runs={max_runs})"
                )
            # from the start of the claimable runs every time: a run a job enqueued
            # may fall due before the ones claimed last (the claim cursor is for
            # replicas under load)
            executor.claim_cursor.reset()
            # what a replica's guard records: runs past their start deadline end
            # missed, runs an overlap policy will never start leave for the ledger
            guard.run_once(now=now)
            if not executor.run_once(now=now).claimed:
                break
        guard.run_once(now=now)
    finally:
        events.attempt_finished.disconnect(finished, sender=Executor)
    return RunDueResult(planned=planned, attempts=tuple(attempts))
