"""The tenant schedule API, beside the history API and under the same ``TENANT_RESOLVER``.

``GET|POST schedules/``, ``GET|PATCH|DELETE schedules/<name>/``, ``POST
schedules/<name>/pause/`` (``{"reason": "..."}``), ``POST schedules/<name>/resume/``,
``POST schedules/<name>/trigger/`` (201, ``{"run": <id>}``). A tenant sees and changes
its own schedules only: another tenant's answers 404, as a missing one does. Bodies use
the model's field names (``interval``, ``start_deadline`` and ``jitter`` in seconds);
every field is checked by ``Schedule.full_clean()``, the tenant's quotas included, and
only the jobs of the tenant's ``allowed_jobs`` may be scheduled (none by default). A bad
field answers 400 ``{"error": ..., "field": ...}``; a quota 403 with its name in
``error``; a name taken 409. Header values in ``kwargs`` are never sent back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from .. import api
from ..conf import get_settings
from ..delivery.request import masked_kwargs
from ..digits import ascii_int
from ..models import Schedule
from ..tenants import limits as tenant_limits
from ..tenants import quotas
from .queries import _AllTenants
from .views import _error, _json, _resolve

#: Fields a body may set (seconds for the durations), and those only a list shows.
WRITABLE = (
    "name",
    "job",
    "kwargs",
    "cron",
    "interval",
    "start_deadline",
    "jitter",
    "timezone",
    "dst_gap",
    "dst_fold",
    "misfire_policy",
    "catch_up_limit",
    "overlap",
)
SECONDS = ("interval", "start_deadline", "jitter")
QUOTAS = ("max_schedules", "min_interval", "allowed_jobs")
MAX_BODY = 256 * 1024
PAGE = 100
MAX_PAGE = 500


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def schedule_json(s: Schedule) -> dict[str, Any]:
    return {
        "name": s.name,
        "job": s.job,
        "kwargs": masked_kwargs(s.kwargs),
        "cron": s.cron,
        "interval": _seconds(s.interval),
        "start_deadline": _seconds(s.start_deadline),
        "jitter": _seconds(s.jitter),
        "timezone": s.timezone,
        "dst_gap": s.dst_gap,
        "dst_fold": s.dst_fold,
        "misfire_policy": s.misfire_policy,
        "catch_up_limit": s.catch_up_limit,
        "overlap": s.overlap,
        "status": s.status,
        "pause_reason": s.pause_reason,
        "next_fire_at": s.next_fire_at.isoformat().replace("+00:00", "Z")
        if s.next_fire_at
        else None,
    }


def _field_error(field: str, message: str, status: int = 400) -> JsonResponse:
    return _json({"error": message, "field": field}, status)


class BadBody(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _body(request: HttpRequest) -> dict[str, Any]:
    if len(request.body) > MAX_BODY:
        raise BadBody("body", f"body: at most {MAX_BODY} bytes")
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadBody("body", "body: expected a JSON object") from None
    if not isinstance(body, dict):
        raise BadBody("body", "body: expected a JSON object")
    return body


def _apply(s: Schedule, body: dict[str, Any]) -> None:
    """Set the body's fields on ``s`` (BadBody naming a field it cannot be)."""
    unknown = sorted(set(body) - set(WRITABLE))
    if unknown:
        raise BadBody(unknown[0], f"{unknown[0]}: not a field of a schedule (fields: "
                      f"{', '.join(WRITABLE)})"[:400])  # fmt: skip
    for field, value in body.items():
        if field in SECONDS:
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 366 * 86400
            ):
                raise BadBody(field, f"{field}: seconds (a number up to 366 days) or null")
            value = timedelta(seconds=value) if value is not None else None
        elif field == "catch_up_limit":
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadBody(field, f"{field}: an integer, got {value!r}"[:300])
        elif field == "kwargs":
            if not isinstance(value, dict):
                raise BadBody(field, "kwargs: a JSON object")
        elif value is not None and not isinstance(value, str):
            raise BadBody(field, f"{field}: a string, got {value!r}"[:300])
        if field == "jitter" and value is None:
            value = timedelta(0)
        setattr(s, field, value)
    if "cron" in body and body["cron"] is not None and "interval" not in body:
        s.interval = None
    if "interval" in body and body["interval"] is not None and "cron" not in body:
        s.cron = None


def _validation(exc: ValidationError) -> JsonResponse:
    """The first problem, with its field; a quota answers 403."""
    errors = exc.message_dict if hasattr(exc, "error_dict") else {"__all__": exc.messages}
    for field, messages in errors.items():
        for message in messages:
            if any(message.startswith(f"{quota}:") for quota in QUOTAS):
                return _field_error(field, message, 403)
    field, messages = next(iter(errors.items()))
    return _field_error(field if field != "__all__" else "body", messages[0])


def _job_allowed(tenant: str, job: object) -> JsonResponse | None:
    """The tenant API schedules only the tenant's allowed jobs (none by default)."""
    settings = get_settings()
    limits = tenant_limits.limits_for(
        tenant, settings.TENANT_DEFAULTS, using=settings.DATABASE_ALIAS
    )
    try:
        quotas.check_job(tenant, job, limits, through_api=True)
    except ValidationError as exc:
        return _field_error("job", exc.messages[0], 403)
    return None


_UNIQUE_NAME = next(
    c.violation_error_message
    for c in Schedule._meta.constraints
    if c.name == "pgsched_schedule_tenant_name"
)


def _taken(name: str) -> JsonResponse:
    return _field_error("name", f"name: this tenant has a schedule named {name!r}", 409)


def _save(s: Schedule) -> JsonResponse | None:
    try:
        with transaction.atomic(using=get_settings().DATABASE_ALIAS):
            s.full_clean(validate_unique=False)
            s.save()
    except ValidationError as exc:
        if _UNIQUE_NAME in exc.messages:  # created by another request since the check
            return _taken(s.name)
        return _validation(exc)
    except IntegrityError as exc:
        if "pgsched_schedule_tenant_name" in str(exc):
            return _taken(s.name)
        raise
    return None


def _enforce_csrf_for_sessions(request: HttpRequest) -> JsonResponse | None:
    """An API client (a token in a header, as the resolver reads it) needs no CSRF
    token; a browser session does: a request that carries the session cookie is checked
    as Django checks a form."""
    from django.conf import settings

    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return None
    reason = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(
        request, lambda r: HttpResponse(), (), {}
    )
    if reason is not None:
        return _error("CSRF verification failed for a session request", 403)
    return None


def tenant_view(
    methods: tuple[str, ...],
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """The methods it answers (else 405), the request's tenant (a tenant only: staff
    without a resolver have no schedules of their own here) passed as ``tenant``."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = _error(f"method {request.method} not allowed", 405)
                response["Allow"] = ", ".join(methods)
                return response
            tenant = _resolve(request)
            if isinstance(tenant, JsonResponse):
                return tenant
            if isinstance(tenant, _AllTenants):
                return _error("the schedule API is a tenant's: configure TENANT_RESOLVER", 403)
            if request.method not in ("GET", "HEAD"):
                refused = _enforce_csrf_for_sessions(request)
                if refused is not None:
                    return refused
            try:
                return view(request, *args, tenant=tenant, **kwargs)
            except BadBody as exc:
                return _field_error(exc.field, str(exc))

        return inner

    return decorate


def _own(tenant: str, name: str) -> Schedule | None:
    alias = get_settings().DATABASE_ALIAS
    return Schedule.objects.using(alias).filter(tenant=tenant, name=name).first()


_NOT_FOUND = "schedule not found"


@tenant_view(("GET", "HEAD", "POST"))
def schedules(request: HttpRequest, *, tenant: str) -> HttpResponse:
    """``GET``: ``{"results": [...], "next": name or null}`` (``?after=<name>``,
    ``?limit=``); ``POST``: create one (201)."""
    if request.method == "POST":
        body = _body(request)
        refused = _job_allowed(tenant, body.get("job"))
        if refused is not None:
            return refused
        if not isinstance(body.get("name"), str) or not body["name"]:
            return _field_error("name", "name: required, a non-empty string")
        alias = get_settings().DATABASE_ALIAS
        if Schedule.objects.using(alias).filter(tenant=tenant, name=body["name"]).exists():
            return _taken(body["name"])
        s = Schedule(tenant=tenant)
        _apply(s, body)
        failed = _save(s)
        if failed is not None:
            return failed
        return _json(schedule_json(s), 201)
    unknown = sorted(set(request.GET) - {"after", "limit"})
    if unknown:
        return _error(f"{unknown[0]}: not a parameter of this API (known: after, limit)", 400)
    limit = PAGE
    if (text := request.GET.get("limit")) is not None:
        parsed = ascii_int(text, low=1, high=MAX_PAGE)
        if parsed is None:
            return _field_error("limit", f"limit: an integer from 1 to {MAX_PAGE}, got {text!r}")
        limit = parsed
    rows = Schedule.objects.using(get_settings().DATABASE_ALIAS).filter(tenant=tenant)
    if (after := request.GET.get("after")) is not None:
        rows = rows.filter(name__gt=after)
    page = list(rows.order_by("name")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return _json(
        {"results": [schedule_json(s) for s in page], "next": page[-1].name if more else None}
    )


@tenant_view(("GET", "HEAD", "PATCH", "DELETE"))
def schedule(request: HttpRequest, name: str, *, tenant: str) -> HttpResponse:
    s = _own(tenant, name)
    if s is None:
        return _error(_NOT_FOUND, 404)
    if request.method == "DELETE":
        s.delete()
        return HttpResponse(status=204)
    if request.method == "PATCH":
        body = _body(request)
        if "name" in body and body["name"] != s.name:
            return _field_error("name", "name: a schedule cannot be renamed here")
        if "job" in body and body["job"] != s.job:
            refused = _job_allowed(tenant, body["job"])
            if refused is not None:
                return refused
        _apply(s, body)
        failed = _save(s)
        if failed is not None:
            return failed
    return _json(schedule_json(s))


@tenant_view(("POST",))
def pause(request: HttpRequest, name: str, *, tenant: str) -> HttpResponse:
    s = _own(tenant, name)
    if s is None:
        return _error(_NOT_FOUND, 404)
    body = _body(request)
    unknown = sorted(set(body) - {"reason"})
    if unknown:
        return _field_error(unknown[0], f"{unknown[0]}: not a field (fields: reason)")
    try:
        s = api.pause(s, reason=body.get("reason", ""))
    except ValidationError as exc:
        return _validation(exc)
    return _json(schedule_json(s))


@tenant_view(("POST",))
def resume(request: HttpRequest, name: str, *, tenant: str) -> HttpResponse:
    s = _own(tenant, name)
    if s is None:
        return _error(_NOT_FOUND, 404)
    s = api.resume(s)
    s.refresh_from_db()
    return _json(schedule_json(s))


@tenant_view(("POST",))
def trigger(request: HttpRequest, name: str, *, tenant: str) -> HttpResponse:
    s = _own(tenant, name)
    if s is None:
        return _error(_NOT_FOUND, 404)
    run = api.run_schedule_now(s, note="triggered through the tenant API")
    return _json({"run": run.pk}, 201)
