"""Reading the audit trail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..conf import get_settings

if TYPE_CHECKING:
    from ..models import Schedule
    from .models import ScheduleChange


def changes(schedule: Schedule | int, *, limit: int = 50) -> list[ScheduleChange]:
    """The latest ``limit`` changes of ``schedule`` (or of a deleted one's id), newest first."""
    from .models import ScheduleChange

    schedule_id = schedule if isinstance(schedule, int) else schedule.pk
    return list(
        ScheduleChange.objects.using(get_settings().DATABASE_ALIAS)
        .filter(schedule_id=schedule_id)
        .order_by("-at", "-id")[:limit]
    )
