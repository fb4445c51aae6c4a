"""The rows the named statements of ``queries.sql`` return, as typed records.

Each result is read into its record **by column name**, once, at the edge
(``db.fetch()`` builds the record from the cursor's column names), so the
engine never reads a row by position. A record's fields are exactly its
statement's output columns; a statement whose columns drift from its record
fails at its first use with the names that differ, and
``tests/integration/test_rows.py`` prepares every named statement on the server
and compares the columns it describes with its record.

The records are ``NamedTuple``\\ s: typed and named, cheap to build, and still
unpackable where a signal's receivers expect a plain tuple (``leases_reaped``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple


class DueSchedule(NamedTuple):
    """``planner_claim``: the database time, and one due schedule (``id`` None: none due)."""

    db_now: datetime
    id: int | None
    name: str
    job: str
    cron: str | None
    interval: timedelta | None
    anchor: datetime | None
    next_fire_at: datetime | None
    misfire_policy: str
    catch_up_limit: int
    misfire_grace: timedelta | None
    max_attempts: int | None
    timeout: timedelta | None
    queue: str | None
    timezone: str
    dst_gap: str
    dst_fold: str
    jitter: timedelta
    unplanned_from: datetime | None
    unplanned_reason: str | None
    defect: str | None  # values out of range, named ('' or None: none); the row is then broken
    tenant_paused: bool | None  # its tenant is paused (None: no schedule on the row)
    tenant: str | None
    tenant_recorded: bool | None  # its tenant has a record (else TENANT_DEFAULTS apply)
    tenant_min_interval: timedelta | None  # the record's min_interval
    next_due: datetime | None  # nothing claimed: the earliest next_fire_at (else None)


class Applied(NamedTuple):
    """``planner_apply``: schedules advanced, and the schedule id of every run inserted."""

    advanced: int
    inserted: list[int]
    notified: Any  # NULL: nothing inserted, nobody woken


class PassRow(NamedTuple):
    """``executor_pass``: a run claimed for an idle slot (``id`` None: none was), and the pass.

    The pass's own facts are on its first row: the outcomes it recorded (ids and
    the runs' new statuses, in id order; NULL when none), when the next
    claimable run falls due (only when the claim did not fill the idle slots),
    the database time and the horizon. The other rows carry NULLs there, so a
    pass's facts are sent and decoded once, not once per claim.
    :class:`ExecutorPassResult` splits them apart.
    """

    id: int | None
    claimed_by: uuid.UUID | None
    attempts: int
    max_attempts: int
    timeout: timedelta
    job: str
    queue: str
    kwargs: Any  # the JSON object, as text (decoded run by run: claiming.new_claim)
    schedule_name: str | None
    scheduled_for: datetime
    idempotency_key: str
    fire_after: datetime
    started_at: datetime
    claim_expires_at: datetime
    task_call: Any  # a django.tasks call (JSON object, as text) or None
    priority: int
    tenant: str
    defect: str | None  # values out of range, named: the run is failed, not run
    recorded_ids: list[int] | None
    recorded_statuses: list[str] | None
    next_due: datetime | None
    db_now: datetime | None  # set on the first row (every pass has one)
    live_since: datetime | None  # pgsched_run_horizon: where the live months start
    held_tenants: bool  # a tenant has a max_running (the pass also runs the held claim)


@dataclass(frozen=True)
class ExecutorPassResult:
    """An ``executor_pass`` result, by kind."""

    recorded: dict[int, str]  # run id -> its status now, for every outcome recorded
    claimed: list[PassRow]  # the runs claimed
    next_due: datetime | None  # when the next claimable run falls due (slots left idle)
    db_now: datetime
    live_since: datetime | None = None  # where the months that may hold unfinished runs start
    held_tenants: bool | None = None  # a tenant has a max_running (None: not read)

    @classmethod
    def from_rows(cls, rows: Sequence[PassRow]) -> ExecutorPassResult:
        first = rows[0]  # there is always one: the pass's own row
        recorded = dict(zip(first.recorded_ids or (), first.recorded_statuses or (), strict=True))
        claimed = [row for row in rows if row.id is not None]
        assert first.db_now is not None, "the pass's facts are on its first row"
        return cls(
            recorded, claimed, first.next_due, first.db_now, first.live_since, first.held_tenants
        )


class TaskEnqueued(NamedTuple):
    """``task_enqueue``: the run a django.tasks ``enqueue()`` wrote."""

    id: int
    created_at: datetime


class Checked(NamedTuple):
    """``executor_check``: a run still held under the token asked about."""

    id: int


class Renewed(NamedTuple):
    """``executor_renew``: a lease still ours, extended."""

    id: int
    claim_expires_at: datetime


class Failed(NamedTuple):
    """``executor_fail_minimal``: a run moved out of ``running`` by the fallback write."""

    id: int
    status: str


class Deferred(NamedTuple):
    """``executor_defer``: a run a job deferred, and its status now."""

    id: int
    status: str


class GuardDecision(NamedTuple):
    """``guard_decide``: a due run that will never start, locked, and why."""

    id: int
    schedule_id: int | None  # None: a one-off run (no occurrence to ledger)
    scheduled_for: datetime | None  # None: out of what Python holds (no occurrence to ledger)
    reason: str  # a ledger reason: overlap or deadline
    job: str
    queue: str
    tenant: str
    cron: str | None
    interval: timedelta | None
    anchor: datetime | None
    timezone: str | None
    dst_gap: str | None
    dst_fold: str | None
    db_now: datetime


class GuardApplied(NamedTuple):
    """``guard_apply``: the runs marked missed and the runs deleted as overlapped."""

    missed: list[int]
    dropped: list[int]


class HeldTenantsExist(NamedTuple):
    """``held_tenants_exist``: whether any tenant has a ``max_running``."""

    held: bool


class HeldTenant(NamedTuple):
    """``executor_held_lock``: a tenant with a ``max_running`` and a due run, now locked."""

    key: str
    max_running: int
    locked: str  # pg_advisory_xact_lock()'s void, as text


class HeldRun(NamedTuple):
    """``executor_held_pick``: a run of a held tenant that has a slot for it."""

    id: int


class GuardedRun(NamedTuple):
    """``executor_guarded_pick``: a run with an overlap policy or a start deadline, startable.

    ``id`` None: none was picked. ``waiting``: how many such runs are due and
    pending, picked or not (at most the pick's limit + 1).
    """

    id: int | None
    waiting: int


class TenantedRunsExist(NamedTuple):
    """``tenanted_runs_exist``: whether any unfinished run has a tenant."""

    tenanted: bool


class StaleMonth(NamedTuple):
    """``planner_stale_months``: a month of runs whose statistics a burst outgrew."""

    month: str  # the partition, as regclass text (quoted where it must be)


class FairPick(NamedTuple):
    """``executor_fair_pick``: a run the fair claim picked, and how far its visit went."""

    id: int
    last_visited: str | None  # the last tenant visited (the next pass starts after it)
    visited: int
    starved: int  # how many tenants had more runs due than their share


class Released(NamedTuple):
    """``executor_release``: a run given back unstarted."""

    id: int


class ReapCandidate(NamedTuple):
    """``reaper_candidates``: a running run whose lease looks expired."""

    id: int
    claimed_by: uuid.UUID
    attempts: int


class ReapedRun(NamedTuple):
    """``reaper_reap``: a run recovered from an expired lease (``leases_reaped`` sends these)."""

    id: int
    status: str
    job: str
    queue: str
    tenant: str


class CancelledRun(NamedTuple):
    """``cancel_runs``: a run an operator cancelled, and what it was before."""

    id: int
    was: str
    job: str
    queue: str
    attempts: int
    tenant: str


class DatabaseNow(NamedTuple):
    """``database_now``."""

    now: datetime


class Notified(NamedTuple):
    """``wake_executors``."""

    notified: Any


class EnsuredMonths(NamedTuple):
    """``ensure_months``: how many months were created (partitions of runs and attempts)."""

    created: int
