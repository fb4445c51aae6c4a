"""What happened to each occurrence of a schedule: ran, skipped (and why), missed, or not yet.

:func:`occurrences` walks the schedule's own timetable (the planner's) over a
range and reads, for each occurrence, its run (by the unique occurrence index)
or the ledger range that holds it. It is the admin's per-schedule timeline and
the JSON API's ``schedules/<name>/occurrences/``. Outcomes:

``ran``
    a run exists (its ``status`` says how far it got: pending, running,
    retrying, succeeded, failed, cancelled);
``missed``
    its run was not started by its start deadline (status ``missed``, reason
    ``deadline``);
``skipped``
    a point of a ledger range, with its ``reason`` (misfire_skip,
    misfire_latest, catch_up_limit, paused, broken, overlap, deadline);
``stopped``
    the schedule is paused or broken and had not planned it (``reason`` says
    which; it joins the ledger when the schedule is active again);
``overdue``
    due, but not planned yet (the schedule's ``next_fire_at`` is behind: no
    planner is running, or it is stalled);
``unknown``
    neither a run nor a ledger point: retention deleted its history.

A point of the timetable from before the schedule was created, with no run (a
backfill may make runs from before it), was never an occurrence and is left out.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import connections

from .. import sqlfiles
from ..conf import get_settings
from ..statuses import RunStatus, ScheduleStatus, SkipReason

if TYPE_CHECKING:
    from ..models import Schedule

MAX_OCCURRENCES = 1000  # at most this many per call
_EPOCH = datetime(1, 1, 2, tzinfo=UTC)

STATE_SQL = sqlfiles.get("ledger", "timeline_state")
RUNS_SQL = sqlfiles.get("ledger", "timeline_runs")
RANGES_SQL = sqlfiles.get("ledger", "timeline_ranges")


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a schedule and what became of it."""

    at: datetime
    outcome: str  # ran, missed, skipped, stopped, overdue, unknown
    status: str | None = None  # the run's status, if there is a run
    reason: str | None = None  # the ledger's reason (or why a stopped schedule did not plan it)
    run_id: int | None = None
    is_backfill: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "outcome": self.outcome,
            "status": self.status,
            "reason": self.reason,
            "run": self.run_id,
            "is_backfill": self.is_backfill,
        }


def occurrences(
    schedule: Schedule,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 50,
    using: str | None = None,
) -> list[Occurrence]:
    """The newest ``limit`` occurrences of ``schedule`` in ``[since, until)``, newest first.

    ``until`` defaults to the database's now; without ``since``, the last
    ``limit`` occurrences before ``until``. At most :data:`MAX_OCCURRENCES`.
    """
    alias = using or get_settings().DATABASE_ALIAS
    limit = max(0, min(limit, MAX_OCCURRENCES))
    with connections[alias].cursor() as cursor:
        cursor.execute(STATE_SQL, [schedule.pk])
        row = cursor.fetchone()
        if row is None or limit == 0:
            return []
        status, next_fire_at, unplanned_from, unplanned_reason, now = row
        grid = schedule.get_timetable()
        points = grid.latest(since or _EPOCH, until or now, limit)
        if not points:
            return []
        cursor.execute(RUNS_SQL, [schedule.pk, points])
        runs = {t: (run_id, s, backfill) for t, run_id, s, backfill in cursor.fetchall()}
        cursor.execute(RANGES_SQL, [schedule.pk, points[0], points[-1]])
        ranges = cursor.fetchall()
    firsts = [r[0] for r in ranges]
    created = schedule.created_at
    out = []
    for t in reversed(points):
        run = runs.get(t)
        if run is not None:
            run_id, run_status, backfill = run
            if run_status == RunStatus.MISSED:
                out.append(
                    Occurrence(t, "missed", run_status, SkipReason.DEADLINE, run_id, backfill)
                )
            else:
                out.append(Occurrence(t, "ran", run_status, None, run_id, backfill))
            continue
        i = bisect_right(firsts, t) - 1
        if i >= 0 and ranges[i][1] >= t:
            out.append(Occurrence(t, "skipped", reason=ranges[i][3]))
        elif status != ScheduleStatus.ACTIVE and (unplanned_from is None or t >= unplanned_from):
            out.append(Occurrence(t, "stopped", reason=status))
        elif unplanned_from is not None and t >= unplanned_from:  # active again, not yet planned
            out.append(Occurrence(t, "stopped", reason=unplanned_reason))
        elif next_fire_at is None or t >= next_fire_at:
            out.append(Occurrence(t, "overdue"))
        elif created is None or t >= created:
            out.append(Occurrence(t, "unknown"))
        # else: before the schedule existed, not one of its occurrences
    return out


__all__ = ["MAX_OCCURRENCES", "Occurrence", "occurrences"]
