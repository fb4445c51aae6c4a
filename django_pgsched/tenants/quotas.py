"""A tenant's quotas, checked wherever a schedule is defined.

``clean()`` (the ORM's ``full_clean()``, the admin, the tenant API, settings) checks
all three; ``Schedule.save()`` counts ``max_schedules`` again under the tenant's
advisory lock, which the database trigger ``pgsched_schedule_tenant_quota`` takes
too, so that concurrent creators never exceed it (the trigger enforces a tenant
record's ``max_schedules`` and ``allowed_jobs`` for every writer, raw SQL included).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import connections

from .limits import TenantLimits

if TYPE_CHECKING:
    from ..timing.timetable import Timetable

#: The advisory lock class of a tenant's schedule count (the trigger's too).
LOCK_CLASS = 1885825
#: Occurrences looked at to find a schedule's shortest gap.
GAP_SAMPLE = 512

# Two statements: the count must read with a snapshot taken after the lock is granted
# (READ COMMITTED), so that it sees the schedule of the creator it waited for.
LOCK_SQL = "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(tenant)s))"
COUNT_SQL = "SELECT count(*) FROM pgsched_schedule WHERE tenant = %(tenant)s AND id <> %(id)s"


def shortest_gap(grid: Timetable, start: datetime) -> timedelta | None:
    """The shortest gap between consecutive occurrences among the next ``GAP_SAMPLE``."""
    times = []
    t = start
    for _ in range(GAP_SAMPLE):
        try:
            t = grid.next_after(t)
        except Exception:  # the end of time: what was found is the sample
            break
        times.append(t)
    gaps = [b - a for a, b in pairwise(times)]
    return min(gaps) if gaps else None


def check_job(
    tenant: str, job: object, limits: TenantLimits | None, *, through_api: bool = False
) -> None:
    """Whether the tenant may schedule ``job``. ``allowed_jobs`` None allows any job
    through the ORM and the admin, and none through the tenant API (``through_api``)."""
    allowed = limits.allowed_jobs if limits is not None else None
    if allowed is not None and job in allowed:
        return
    if through_api:
        raise ValidationError(
            f"allowed_jobs: tenant {tenant!r} may not schedule the job {job!r} through "
            "this API (allowed_jobs)"[:400],
            code="allowed_jobs",
        )
    if allowed is None:
        return
    raise ValidationError(
        f"allowed_jobs: tenant {tenant!r} may not schedule the job {job!r} "
        f"(allowed_jobs: {', '.join(allowed) or 'none'})"[:400],
        code="allowed_jobs",
    )


def check_gap(tenant: str, gap: timedelta | None, limits: TenantLimits | None) -> None:
    """``gap``: the shortest between two occurrences of the schedule (None: unknown)."""
    if limits is None or limits.min_interval is None:
        return
    if gap is not None and gap < limits.min_interval:
        raise ValidationError(
            f"min_interval: two occurrences of this schedule are {gap.total_seconds():g}s "
            f"apart; tenant {tenant!r} allows at least "
            f"{limits.min_interval.total_seconds():g}s (min_interval)",
            code="min_interval",
        )


def check_count(
    tenant: str, limits: TenantLimits | None, *, using: str, schedule_id: int | None
) -> None:
    """Count the tenant's other schedules under its advisory lock (held to the commit)."""
    if limits is None or limits.max_schedules is None:
        return
    with connections[using].cursor() as cursor:
        params: dict[str, int | str] = {
            "lock": LOCK_CLASS,
            "tenant": tenant,
            "id": schedule_id or -1,
        }
        cursor.execute(LOCK_SQL, params)
        cursor.execute(COUNT_SQL, params)
        (others,) = cursor.fetchone()
    if others >= limits.max_schedules:
        raise ValidationError(
            f"max_schedules: tenant {tenant!r} has {others} schedule(s); its quota is "
            f"{limits.max_schedules} (max_schedules)",
            code="max_schedules",
        )
