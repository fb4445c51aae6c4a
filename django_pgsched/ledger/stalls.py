"""Silent stops made loud: active schedules that should have produced an occurrence and did not.

Two ways a schedule goes quiet while it still says ``active``:

``not_planned``
    its ``next_fire_at`` is far in the past (more than its misfire grace plus
    the lookahead plus a minute): no planner is running, or none can plan it;
``not_running``
    at least two of its occurrences fell due (before now minus its grace) since
    the last of its runs that started (or since it was created or last changed,
    a resume included, if that is later): each was
    skipped, missed, is stuck pending, or its run never started (a run hung
    behind an ``overlap`` policy, a queue nobody serves, a job no replica has).

:func:`stalled` lists them (``manage.py check --database default`` reports
them as ``pgsched.W004``; ``pgsched_schedules_stalled`` counts them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from .. import sqlfiles
from ..conf import get_settings
from ..timing import timetable, zoned

SLACK = timedelta(minutes=1)

CANDIDATES_SQL = sqlfiles.get("ledger", "stall_candidates")
BATCH = 1000  # candidates read per statement (a cron's are only roughly filtered in SQL)


@dataclass(frozen=True)
class Stall:
    schedule: str
    reason: str  # not_planned or not_running
    since: datetime  # next_fire_at; or its last started run's occurrence (or its last change)
    missed: int  # not_running: occurrences due since then; not_planned: 0 (not counted)

    def __str__(self) -> str:
        if self.reason == "not_planned":
            return f"{self.schedule}: not planned since {self.since.isoformat()} (next_fire_at)"
        return (
            f"{self.schedule}: no run started for {self.missed} occurrences since "
            f"{self.since.isoformat()}"
        )


def stalled(
    *, now: datetime | None = None, limit: int = 100, using: str | None = None
) -> list[Stall]:
    """Active schedules that went quiet (at most ``limit``), by name."""
    s = get_settings()
    params: dict[str, Any] = {
        "now": now,
        "grace": s.MISFIRE_GRACE,
        "lookahead": s.PLANNER_LOOKAHEAD,
        "slack": SLACK,
        "batch": BATCH,
        "after": "",
    }
    out: list[Stall] = []
    grids: dict[tuple[Any, ...], timetable.Timetable | None] = {}
    with connections[using or s.DATABASE_ALIAS].cursor() as cursor:
        while len(out) < limit:
            cursor.execute(CANDIDATES_SQL, params)
            rows = cursor.fetchall()
            out += _confirmed(rows, grids, s.PLANNER_LOOKAHEAD)
            if len(rows) < BATCH:
                break
            params["after"] = rows[-1][0]
    return out[:limit]


def _confirmed(
    rows: list[Any],
    grids: dict[tuple[Any, ...], timetable.Timetable | None],
    lookahead: timedelta,
) -> list[Stall]:
    out = []
    for name, cron, every, anchor, tz, gap, fold, nfa, grace, db_now, since, since_run in rows:
        if nfa is not None and nfa < db_now - grace - lookahead - SLACK:
            out.append(Stall(name, "not_planned", nfa, 0))
            continue
        key = (cron, every, anchor, tz, gap, fold)
        if key not in grids:
            try:
                grids[key] = (
                    zoned.cron(cron, tz, gap, fold) if cron else timetable.interval(every, anchor)
                )
            except (timetable.TimetableError, ValueError, OverflowError):
                grids[key] = None  # the planner marks it broken
        grid = grids[key]
        if grid is None:
            continue
        after = since + timedelta(seconds=1) if since_run else since
        due = grid.count(after, db_now - grace)
        if due >= 2:
            out.append(Stall(name, "not_running", since, due))
    return out


__all__ = ["Stall", "stalled"]
