"""After a tz database update: re-check the next fire time of zoned cron schedules.

A replica loads each zone once and keeps it, so new zone rules take effect when
it restarts. A schedule's stored ``next_fire_at`` was computed under the rules
of the replica that planned it last; if the new rules move the next local time
to another instant, the stored value is stale, and an occurrence moved
*earlier* would be skipped without a trace (the planner claims a schedule only
when its stored ``next_fire_at`` is due). ``runscheduler`` therefore calls
:func:`recheck_zoned_schedules` at start. For every active zoned cron schedule
whose ``next_fire_at`` lies beyond the planner's horizon (``now`` plus the
lookahead, so nothing from there on has been decided yet) and is **not an
occurrence under this replica's rules**, it is moved *earlier*, to the first
occurrence after the horizon (or the first transition whose skipped times must
be counted, if that comes first). It is never moved later, and a stored time
that is still an occurrence is kept, so an explicitly set later start stays
(the price: should new rules add an occurrence before a stored time that is
still valid, that one occurrence does not run). Under unchanged rules the pass
writes nothing. Overdue schedules are left to the planner, which reads their
occurrences with the new rules from the stored point on. Runs already planned
are never touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from ..conf import Settings, get_settings
from ..models import Schedule, ScheduleStatus, db_now
from ..timing import timetable, zones

logger = logging.getLogger(__name__)


@dataclass
class RecheckResult:
    checked: int = 0
    retimed: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)  # name: old, new


def recheck_zoned_schedules(
    *, now: datetime | None = None, using: str | None = None, settings: Settings | None = None
) -> RecheckResult:
    """Recompute stale ``next_fire_at`` values of zoned cron schedules (``now``: tests only)."""
    s = settings or get_settings()
    alias = using or s.DATABASE_ALIAS
    result = RecheckResult()
    with transaction.atomic(using=alias):
        horizon = (now or db_now(alias)) + s.PLANNER_LOOKAHEAD
        rows = (
            Schedule.objects.using(alias)
            .select_for_update(skip_locked=True, no_key=True)
            .filter(status=ScheduleStatus.ACTIVE, cron__isnull=False, next_fire_at__gt=horizon)
            .exclude(timezone=zones.DEFAULT_ZONE)
            .only("id", "name", "cron", "timezone", "dst_gap", "dst_fold", "next_fire_at")
        )
        for schedule in rows:
            result.checked += 1
            old = schedule.next_fire_at
            try:
                table = schedule.get_timetable()
                if old is None or table.contains(old):
                    continue
                expected = table.next_after(horizon)
                gaps = table.gap_skips(horizon, old)
            except timetable.TimetableError:
                continue  # the planner marks it broken when it comes due
            if gaps:  # count a gap's skipped times from its transition on
                expected = min(expected, gaps[0].transition)
            if expected >= old:
                continue
            Schedule.objects.using(alias).filter(pk=schedule.pk).update(next_fire_at=expected)
            result.retimed[schedule.name] = (old, expected)
            logger.warning(
                "schedule %s (%s): next fire time %s -> %s under this replica's tz rules",
                schedule.name,
                schedule.timezone,
                old.isoformat(),
                expected.isoformat(),
            )
    return result
