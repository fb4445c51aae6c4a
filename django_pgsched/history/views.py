"""The read-only JSON API: ``GET runs/`` (a page) and ``GET runs/<id>/`` (a run and its attempts).

Every answer is JSON. Whose runs a request reads is decided by
:func:`.access.request_tenant` before anything is looked up; a run of another
tenant answers exactly as a run that does not exist (404), and every filter
is applied within the request's tenant, so no parameter, cursor or id reaches
another tenant's runs, schedules or counts. A bad parameter answers 400 with
``{"error": "<parameter>: <what is wrong>"}``; an unknown parameter is bad.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from functools import wraps
from importlib.resources import files
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.views.decorators.csrf import csrf_exempt

from ..conf import get_settings
from ..digits import ascii_int
from ..models import Attempt, JobRun
from .access import request_tenant
from .cursors import InvalidParameter
from .queries import _AllTenants, check_query, page
from .serialize import RUN_FIELDS, attempt_json, run_json

# the query parameters only staff may give (without a TENANT_RESOLVER); the served
# document leaves them out where a resolver decides the tenant
STAFF_ONLY = frozenset({"tenant"})
LIST_PARAMETERS = frozenset({"cursor", "status", "schedule", "since", "until", "limit"})
STAFF_PARAMETERS = frozenset({"tenant"})  # staff (no resolver) may narrow to one tenant
MAX_ID = 2**63 - 1


def _json(body: dict[str, Any], status: int = 200) -> JsonResponse:
    response = JsonResponse(body, status=status)
    patch_cache_control(response, private=True, no_store=True)
    patch_vary_headers(response, ("Cookie", "Authorization"))
    return response


def _error(message: str, status: int) -> JsonResponse:
    return _json({"error": message}, status)


def _datetime(name: str, text: str) -> datetime:
    """An ISO 8601 datetime with an offset, or a date (midnight UTC)."""
    candidates = [text]
    if " " in text:  # an unencoded "+" in a query string arrives as a space
        head, _, tail = text.rpartition(" ")
        candidates.append(f"{head}+{tail}")
    for candidate in candidates:
        try:
            if len(candidate) == 10:
                return datetime.combine(date.fromisoformat(candidate), time(), tzinfo=UTC)
            value = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if value.tzinfo is None:
            raise InvalidParameter(name, f"timezone offset required (e.g. Z), got {text!r}")
        return value
    raise InvalidParameter(name, f"expected an ISO 8601 date or datetime, got {text!r}")


def _one(request: HttpRequest, name: str) -> str | None:
    values = request.GET.getlist(name)
    if len(values) > 1:
        raise InvalidParameter(name, "given more than once")
    return values[0] if values else None


def require_safe(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """GET and HEAD only; any other method answers 405 in JSON.

    Exempt from the CSRF check, which would answer an unsafe method 403 in HTML
    before the view says 405: the view never acts on one.
    """

    @wraps(view)
    def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            response = _error(f"method {request.method} not allowed (read-only API)", 405)
            response["Allow"] = "GET, HEAD"
            return response
        return view(request, *args, **kwargs)

    return csrf_exempt(inner)


def _resolve(request: HttpRequest) -> str | _AllTenants | JsonResponse:
    try:
        return request_tenant(request)
    except PermissionDenied as exc:
        return _error(str(exc) or "permission denied", 403)
    except ValidationError as exc:  # the resolver returned something that is not a tenant
        return _error(f"the request's tenant is not usable: {exc.messages[0]}", 403)


@require_safe
def run_list(request: HttpRequest) -> HttpResponse:
    """``GET runs/``: ``{"results": [...], "next": cursor or null}``."""
    tenant = _resolve(request)
    if isinstance(tenant, JsonResponse):
        return tenant
    allowed = LIST_PARAMETERS | (STAFF_PARAMETERS if isinstance(tenant, _AllTenants) else set())
    unknown = sorted(set(request.GET) - allowed)
    if unknown:
        return _error(
            f"{unknown[0]}: not a parameter of this API (known: {', '.join(sorted(allowed))})",
            400,
        )
    try:
        if isinstance(tenant, _AllTenants) and (narrow := _one(request, "tenant")) is not None:
            tenant = narrow
        status_text = _one(request, "status")
        since, until = _one(request, "since"), _one(request, "until")
        limit_text = _one(request, "limit")
        limit = 100
        if limit_text is not None:
            parsed = ascii_int(limit_text, high=999_999)  # check_query bounds it further
            if parsed is None:
                raise InvalidParameter("limit", f"expected an integer, got {limit_text!r}")
            limit = parsed
        query = check_query(
            tenant=tenant,
            schedule=_one(request, "schedule"),
            status=status_text.split(",") if status_text is not None else None,
            since=_datetime("since", since) if since is not None else None,
            until=_datetime("until", until) if until is not None else None,
            limit=limit,
        )
        result = page(query, _one(request, "cursor"), only=RUN_FIELDS)
    except InvalidParameter as exc:
        return _error(str(exc), 400)
    return _json({"results": [run_json(run) for run in result.items], "next": result.next_cursor})


@require_safe
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """``GET runs/<id>/``: the run with its ``attempts`` (a list); 404 when not the tenant's."""
    tenant = _resolve(request)
    if isinstance(tenant, JsonResponse):
        return tenant
    if request.GET:
        name = sorted(request.GET)[0]
        return _error(f"{name}: not a parameter of this API (it takes none)", 400)
    not_found = _error("run not found", 404)
    pk = ascii_int(run_id, high=MAX_ID)
    if pk is None:
        return not_found
    alias = get_settings().DATABASE_ALIAS
    runs = JobRun.objects.using(alias).filter(pk=pk)
    if not isinstance(tenant, _AllTenants):
        runs = runs.filter(tenant=tenant)
    run = runs.only(*RUN_FIELDS).first()
    if run is None:
        return not_found
    body = run_json(run)
    body["attempts"] = [
        attempt_json(a, staff=isinstance(tenant, _AllTenants))
        for a in Attempt.objects.using(alias).filter(job_run_id=run.pk).order_by("number")
    ]
    return _json(body)


@require_safe
def openapi(request: HttpRequest) -> HttpResponse:
    """``GET openapi.json``: the OpenAPI description of these APIs (no data).

    Its ``servers`` entry is where the project mounted the URLs (this document's
    own path without ``openapi.json``), so that clients and tools built from it
    call the paths there.
    """
    text = files(__package__).joinpath("openapi.json").read_text(encoding="utf-8")
    document = json.loads(text)
    mount = request.path[: -len("openapi.json")].rstrip("/") or "/"
    document["servers"] = [{"url": mount}]
    if get_settings().TENANT_RESOLVER:  # a tenant's requests: no staff-only parameter
        for item in document["paths"].values():
            for operation in item.values():
                if isinstance(operation, dict) and "parameters" in operation:
                    operation["parameters"] = [
                        p for p in operation["parameters"] if p.get("name") not in STAFF_ONLY
                    ]
    return HttpResponse(json.dumps(document, indent=2), content_type="application/json")
