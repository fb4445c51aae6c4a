"""The guard: runs that will never start, decided and recorded (overlap policy, start deadline).

A schedule's ``overlap`` policy and ``start_deadline`` are copied into each of
its runs when the planner (or a backfill) creates it (``JobRun.overlap``,
``JobRun.start_by``). Two places enforce them, both in the database:

* the claim (``executor_pass``) never starts such a run too late, nor while an
  earlier run of its schedule is unfinished: the runs of a schedule with a
  policy start one at a time, in the order they were created, and for ``skip``
  never one that an earlier started run overlapped when it fell due;
* the guard (this module, ``guard_decide`` and ``guard_apply`` in one
  transaction) finds the due runs that therefore never will start and records
  why: a run past its deadline ends ``missed`` without running; an overlapped
  one (``skip``; ``buffer_one`` beyond the one waiting) is deleted. Either way
  its occurrence goes into the ledger (reason ``deadline`` or ``overlap``), in
  the same transaction, so every occurrence stays exactly one of a run or a
  ledger point.

The guard only writes runs that are still ``pending`` under a ``SKIP LOCKED``
lock, so it never touches a run being claimed, and a run it decided can no
longer be claimed: a decision cannot race a claim. Any replica may run it
(it does not depend on the jobs or queues a replica serves): the executor runs
it when a pass leaves a due run unclaimed, the maintenance loop every
``REAPER_INTERVAL``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from .. import events
from ..conf import Settings, get_settings
from ..statuses import SkipReason
from ..timing import timetable, zoned
from ..timing.spans import group
from . import db, queries
from .policies import Skipped
from .rows import GuardDecision

BATCH = 1000  # runs decided per transaction
_EPOCH = datetime(1, 1, 2, tzinfo=UTC)


@dataclass(frozen=True)
class GuardResult:
    """What one guard pass did."""

    missed: int = 0  # runs marked missed (their start deadline passed)
    dropped: int = 0  # runs deleted as overlapped
    # occurrences recorded in the ledger, by (queue, job, kind, reason)
    ledgered_by: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    missed_by: dict[tuple[str, str], int] = field(default_factory=dict)  # by (queue, job)
    # the same by (queue, job, tenant), for the opt-in tenant label of the metrics
    missed_by_tenant: dict[tuple[str, str, str], int] = field(default_factory=dict)
    batch_full: bool = False


class Guard:
    """Decides and records the due runs that will never start. ``run_once()`` does one batch."""

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        using: str | None = None,
        role: str = "maintenance",
        batch: int = BATCH,
    ) -> None:
        self.settings = settings or get_settings()
        self.using = using or self.settings.DATABASE_ALIAS
        self.role = role
        self.batch = batch

    def run_once(self, now: datetime | None = None) -> GuardResult:
        """One batch, one transaction. ``now`` overrides the database clock (tests only)."""
        with db.session(self.role, self.using) as conn, transaction.atomic(using=self.using):
            decided = db.fetch(conn, queries.GUARD_DECIDE, {"now": now, "batch": self.batch})
            if not decided:
                return GuardResult()
            params = _apply_params(decided)
            (applied,) = db.fetch(conn, queries.GUARD_APPLY, {"now": now, **params})
        result = _result(decided, applied.missed, applied.dropped, self.batch)
        events.runs_guarded.send(
            sender=type(self),
            missed=result.missed_by,
            ledgered=result.ledgered_by,
            missed_tenants=result.missed_by_tenant,
        )
        return result


def _ledgered(row: GuardDecision) -> bool:
    """Whether the run's occurrence goes into the ledger (one of a schedule, readable)."""
    return row.schedule_id is not None and row.scheduled_for is not None


def _grid(row: GuardDecision) -> timetable.Timetable:
    if row.timezone is None or row.dst_gap is None or row.dst_fold is None:
        raise ValueError("no schedule")
    if row.cron:
        return zoned.cron(row.cron, row.timezone, row.dst_gap, row.dst_fold)
    if row.interval is None or row.anchor is None:
        raise ValueError("an interval schedule needs its interval and anchor")
    return timetable.interval(row.interval, row.anchor)


def _apply_params(decided: Sequence[GuardDecision]) -> dict[str, Any]:
    by_key: dict[tuple[int, str], list[GuardDecision]] = defaultdict(list)
    for row in decided:
        if _ledgered(row):
            by_key[(row.schedule_id, row.reason)].append(row)  # type: ignore[index]
    span_rows: list[tuple[int, Skipped, datetime | None]] = []
    for (schedule_id, reason), rows in by_key.items():
        try:
            grid = _grid(rows[0])
            spans = group(grid, [r.scheduled_for for r in rows], reason)  # type: ignore[misc]
        except Exception:
            # the schedule's timetable is broken now: one point per occurrence, never extended
            span_rows += [
                (schedule_id, Skipped(r.scheduled_for, r.scheduled_for, 1, reason), None)  # type: ignore[arg-type]
                for r in rows
            ]
            continue
        for s in spans:
            found = grid.latest(_EPOCH, s.first, 1)
            span_rows.append((schedule_id, s, found[0] if found else None))
    return {
        "missed": [r.id for r in decided if r.reason == SkipReason.DEADLINE],
        "dropped": [r.id for r in decided if r.reason == SkipReason.OVERLAP],
        "span_schedule_ids": [sid for sid, _, _ in span_rows],
        "span_first": [s.first for _, s, _ in span_rows],
        "span_last": [s.last for _, s, _ in span_rows],
        "span_count": [s.count for _, s, _ in span_rows],
        "span_reason": [s.reason for _, s, _ in span_rows],
        "span_previous": [previous for _, _, previous in span_rows],
    }


def _result(
    decided: Sequence[GuardDecision], missed: list[int], dropped: list[int], batch: int
) -> GuardResult:
    done = set(missed) | set(dropped)
    ledgered: Counter[tuple[str, str, str, str]] = Counter()
    missed_by: Counter[tuple[str, str]] = Counter()
    missed_by_tenant: Counter[tuple[str, str, str]] = Counter()
    for row in decided:
        if row.id not in done:
            continue
        kind = "cron" if row.cron else "interval"
        if _ledgered(row):
            ledgered[(row.queue, row.job, kind, row.reason)] += 1
        if row.reason == SkipReason.DEADLINE:
            missed_by[(row.queue, row.job)] += 1
            missed_by_tenant[(row.queue, row.job, row.tenant)] += 1
    return GuardResult(
        missed=len(missed),
        dropped=len(dropped),
        ledgered_by=dict(ledgered),
        missed_by=dict(missed_by),
        missed_by_tenant=dict(missed_by_tenant),
        batch_full=len(decided) >= batch,
    )


__all__ = ["BATCH", "Guard", "GuardResult"]
