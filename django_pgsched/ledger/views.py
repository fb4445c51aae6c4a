"""``GET schedules/<name>/occurrences/``: a schedule's timeline as JSON (the history API's rules).

What became of each occurrence of one schedule in a range, newest first
(:func:`django_pgsched.ledger.timeline.occurrences`): ``{"schedule": name,
"results": [{"at", "outcome", "status", "reason", "run", "is_backfill"}, ...],
"next_until": <the oldest "at" when more may be older, else null>}``.
Parameters ``since``, ``until`` (ISO 8601), ``limit`` (1..1000, default
100) and, for staff, ``tenant`` (whose schedule of that name; default none).
Access is the history API's (:mod:`django_pgsched.history.access`): a
schedule of another tenant answers 404, like one that does not exist. A run
of another tenant (the schedule moved between tenants; its runs keep theirs)
is not shown: its occurrence answers ``unknown``, as one whose history is gone.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from ..conf import get_settings
from ..digits import ascii_int
from ..history.cursors import InvalidParameter
from ..history.queries import _AllTenants
from ..history.views import (
    STAFF_PARAMETERS,
    _datetime,
    _error,
    _json,
    _one,
    _resolve,
    require_safe,
)
from ..models import JobRun, Schedule
from ..timing import timetable
from .timeline import MAX_OCCURRENCES, Occurrence, occurrences

PARAMETERS = frozenset({"since", "until", "limit"})


@require_safe
def schedule_occurrences(request: HttpRequest, name: str) -> HttpResponse:
    tenant = _resolve(request)
    if isinstance(tenant, JsonResponse):
        return tenant
    allowed = PARAMETERS | (STAFF_PARAMETERS if isinstance(tenant, _AllTenants) else set())
    unknown = sorted(set(request.GET) - allowed)
    if unknown:
        return _error(
            f"{unknown[0]}: not a parameter of this API (known: {', '.join(sorted(allowed))})",
            400,
        )
    try:
        # names are unique within a tenant: staff name the tenant (default: none)
        owner = tenant if not isinstance(tenant, _AllTenants) else (_one(request, "tenant") or "")
        since, until = _one(request, "since"), _one(request, "until")
        limit_text = _one(request, "limit")
        limit = 100
        if limit_text is not None:
            parsed = ascii_int(limit_text, low=1, high=MAX_OCCURRENCES)
            if parsed is None:
                raise InvalidParameter(
                    "limit", f"expected an integer from 1 to {MAX_OCCURRENCES}, got {limit_text!r}"
                )
            limit = parsed
        start = _datetime("since", since) if since is not None else None
        end = _datetime("until", until) if until is not None else None
        if start is not None and end is not None and start >= end:
            raise InvalidParameter("until", "must be after since")
    except InvalidParameter as exc:
        return _error(str(exc), 400)
    alias = get_settings().DATABASE_ALIAS
    schedule = Schedule.objects.using(alias).filter(tenant=owner, name=name).first()
    if schedule is None:
        return _error("schedule not found", 404)
    try:
        found = occurrences(schedule, since=start, until=end, limit=limit)
    except (timetable.TimetableError, ValueError, OverflowError) as exc:
        return _error(f"the schedule has no usable timetable: {exc}", 409)
    if not isinstance(tenant, _AllTenants):
        found = _own_runs_only(found, tenant, alias)
    more = len(found) == limit
    return _json(
        {
            "schedule": schedule.name,
            "results": [o.as_json() for o in found],
            "next_until": found[-1].as_json()["at"] if more else None,
        }
    )


def _own_runs_only(found: list[Occurrence], tenant: str, alias: str) -> list[Occurrence]:
    """``found`` with the runs of other tenants taken out (``unknown``, no run, no status)."""
    ids = [o.run_id for o in found if o.run_id is not None]
    if not ids:
        return found
    foreign = set(
        JobRun.objects.using(alias)
        .filter(pk__in=ids)
        .exclude(tenant=tenant)
        .values_list("pk", flat=True)
    )
    return [Occurrence(o.at, "unknown") if o.run_id in foreign else o for o in found]
