"""``GET schedules/<name>/occurrences/``: a schedule's timeline as JSON (the history API's rules).

What became of each occurrence of one schedule in a range, newest first
(:func:`django_pgsched.ledger.timeline.occurrences`): ``{"schedule": name,
"results": [{"at", "outcome", "status", "reason", "run", "is_backfill"}, ...],
"next_until": <the oldest "at" when more may be older, else null>}``.
Parameters ``since``, ``until`` (ISO 8601) and ``limit`` (1..1000, default
100). Access is the history API's (:mod:`django_pgsched.history.access`): a
schedule of another tenant answers 404, like one that does not exist.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from ..conf import get_settings
from ..history.cursors import InvalidParameter
from ..history.queries import _AllTenants
from ..history.views import _datetime, _error, _json, _one, _resolve, require_safe
from ..models import Schedule
from ..timing import timetable
from .timeline import MAX_OCCURRENCES, occurrences

PARAMETERS = frozenset({"since", "until", "limit"})


@require_safe
def schedule_occurrences(request: HttpRequest, name: str) -> HttpResponse:
    tenant = _resolve(request)
    if isinstance(tenant, JsonResponse):
        return tenant
    unknown = sorted(set(request.GET) - PARAMETERS)
    if unknown:
        return _error(
            f"{unknown[0]}: not a parameter of this API (known: {', '.join(sorted(PARAMETERS))})",
            400,
        )
    try:
        since, until = _one(request, "since"), _one(request, "until")
        limit_text = _one(request, "limit")
        limit = 100
        if limit_text is not None:
            if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_OCCURRENCES:
                raise InvalidParameter(
                    "limit", f"expected an integer from 1 to {MAX_OCCURRENCES}, got {limit_text!r}"
                )
            limit = int(limit_text)
        start = _datetime("since", since) if since is not None else None
        end = _datetime("until", until) if until is not None else None
        if start is not None and end is not None and start >= end:
            raise InvalidParameter("until", "must be after since")
    except InvalidParameter as exc:
        return _error(str(exc), 400)
    schedules = Schedule.objects.using(get_settings().DATABASE_ALIAS).filter(name=name)
    if not isinstance(tenant, _AllTenants):
        schedules = schedules.filter(tenant=tenant)
    schedule = schedules.first()
    if schedule is None:
        return _error("schedule not found", 404)
    try:
        found = occurrences(schedule, since=start, until=end, limit=limit)
    except (timetable.TimetableError, ValueError, OverflowError) as exc:
        return _error(f"the schedule has no usable timetable: {exc}", 409)
    more = len(found) == limit
    return _json(
        {
            "schedule": schedule.name,
            "results": [o.as_json() for o in found],
            "next_until": found[-1].as_json()["at"] if more else None,
        }
    )
