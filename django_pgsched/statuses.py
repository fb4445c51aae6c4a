"""Every status and choice a schedule, run or attempt can take, and their groups.

This is the one home of these values: the models, the engine, the admin, the
metrics and the API import them from here (``django_pgsched.models`` re-exports
the choices). The database's CHECK constraints and the partial indexes in the
migrations spell the same values, and the hot-path SQL in
``engine/queries.sql`` repeats the groups literally so that PostgreSQL's query
planner can match the partial indexes; ``tests/unit/test_statuses.py`` checks
that every spelling agrees with this module. A new status is added here, to a
group if it belongs to one, and to its CHECK constraint in a new migration.
"""

from __future__ import annotations

from django.db import models


class ScheduleStatus(models.TextChoices):
    ACTIVE = "active", "active"
    PAUSED = "paused", "paused"
    BROKEN = "broken", "broken (see last error)"


class MisfirePolicy(models.TextChoices):
    SKIP = "skip", "skip: run nothing that was missed"
    LATEST = "latest", "latest: run the most recent missed occurrence"
    CATCH_UP = "catch_up", "catch up: run up to catch_up_limit missed occurrences"


class DstGap(models.TextChoices):
    """A schedule's policy for a wall-clock time its zone skips (timing/zoned.py)."""

    SHIFT = "shift", "shift: run at the first instant after the gap"
    SKIP = "skip", "skip: do not run (counted as skipped)"


class DstFold(models.TextChoices):
    """A schedule's policy for a wall-clock time that happens twice (timing/zoned.py)."""

    FIRST = "first", "first: run at the first of the two instants"
    SECOND = "second", "second: run at the second of the two instants"
    BOTH = "both", "both: run at both instants"


class RunStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    RETRYING = "retrying", "retrying"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    MISSED = "missed", "missed (not started by its start deadline)"


class OverlapPolicy(models.TextChoices):
    """What a schedule's occurrence does while an earlier run of it is unfinished."""

    ALLOW = "allow", "allow: runs may overlap"
    SKIP = "skip", "skip: not started while the previous run is unfinished"
    BUFFER_ONE = "buffer_one", "buffer one: at most one waits for the previous run"


class AttemptStatus(models.TextChoices):
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    TIMED_OUT = "timed_out", "timed out"
    LOST = "lost", "lost (lease expired)"
    CANCELLED = "cancelled", "cancelled"
    DEFERRED = "deferred", "deferred (try again later)"


class SkipReason(models.TextChoices):
    """Why occurrences did not run: the reasons of the ledger (``SkippedRange.reason``)."""

    MISFIRE_SKIP = "misfire_skip", "missed: later than the grace, policy skip"
    MISFIRE_LATEST = "misfire_latest", "missed: policy latest ran only the most recent"
    CATCH_UP_LIMIT = "catch_up_limit", "missed: beyond the catch-up limit"
    DST_GAP = "dst_gap", "its local time did not exist (the clocks went forward)"
    PAUSED = "paused", "the schedule was paused"
    BROKEN = "broken", "the schedule was broken"
    OVERLAP = "overlap", "the previous run had not finished (overlap policy)"
    DEADLINE = "deadline", "not started by its start deadline (the run is missed)"
    TENANT_PAUSED = "tenant_paused", "its tenant was paused"


#: The reasons the planner decides as it advances ``next_fire_at``, and that
#: ``Schedule.skipped_occurrences`` and ``pgsched_schedule_skipped_occurrences_total``
#: count: for these, the counter equals the sum of the ledger's ranges.
COUNTED_REASONS: tuple[SkipReason, ...] = (
    SkipReason.MISFIRE_SKIP,
    SkipReason.MISFIRE_LATEST,
    SkipReason.CATCH_UP_LIMIT,
    SkipReason.DST_GAP,
)
#: The ledger reason of each misfire policy's discarded occurrences.
MISFIRE_REASONS: dict[str, SkipReason] = {
    MisfirePolicy.SKIP: SkipReason.MISFIRE_SKIP,
    MisfirePolicy.LATEST: SkipReason.MISFIRE_LATEST,
    MisfirePolicy.CATCH_UP: SkipReason.CATCH_UP_LIMIT,
}
#: What a stopped schedule's unplanned occurrences are recorded as once it is active again.
STOPPED_REASONS: dict[str, SkipReason] = {
    ScheduleStatus.PAUSED: SkipReason.PAUSED,
    ScheduleStatus.BROKEN: SkipReason.BROKEN,
}


#: Runs an executor may claim once due (``pgsched_run_claimable_idx``).
CLAIMABLE_STATUSES: tuple[RunStatus, ...] = (RunStatus.PENDING, RunStatus.RETRYING)
#: Runs that are over: they never change again (retention deletes them).
TERMINAL_STATUSES: tuple[RunStatus, ...] = (
    RunStatus.SUCCEEDED,
    RunStatus.FAILED,
    RunStatus.CANCELLED,
    RunStatus.MISSED,
)
#: Runs not over yet: claimable or running (the backlog gauge counts the due ones).
UNFINISHED_STATUSES: tuple[RunStatus, ...] = (*CLAIMABLE_STATUSES, RunStatus.RUNNING)
#: Runs that ended without success (``pgsched_run_unsuccessful_idx``).
UNSUCCESSFUL_STATUSES: tuple[RunStatus, ...] = (RunStatus.FAILED, RunStatus.CANCELLED)
#: Runs that ``api.retry_run()`` (the admin's "retry") accepts.
RETRYABLE_STATUSES: tuple[RunStatus, ...] = (*UNSUCCESSFUL_STATUSES, RunStatus.MISSED)
#: Runs an operator's cancel changes (a running one only while its lease token holds).
CANCELLABLE_STATUSES: tuple[RunStatus, ...] = UNFINISHED_STATUSES
