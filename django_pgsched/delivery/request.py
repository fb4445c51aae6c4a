"""The request a ``pgsched.http`` run describes, checked field by field.

The job's kwargs are ``url``, ``method`` (default ``POST``), ``headers``,
``body`` (JSON: an object, array, number, boolean or null is sent as
``application/json``; a string as ``text/plain``), ``timeout`` (seconds, at
most the run's own timeout), ``signing_secret`` (the *name* of a secret in
``PGSCHED["HTTP"]["SIGNING_SECRETS"]``) and ``retry_statuses`` (which of
408, 409 and 425 to retry; other 4xx answers fail the run at once).
:func:`parse_request` raises a ``ValidationError`` whose messages name the
field and the value, the same at every entrance (admin, settings, ORM,
``enqueue()``) and again at each attempt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from .settings import HttpSettings
from .urls import Refused, Target, parse_url

KWARGS = ("url", "method", "headers", "body", "timeout", "signing_secret", "retry_statuses")
METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET", "HEAD")
RETRYABLE_4XX = (408, 409, 425)
MAX_HEADERS = 32
MAX_HEADER_BYTES = 8192
MAX_BODY_BYTES = 256 * 1024
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# set by the scheduler (or by the HTTP connection itself): never from a schedule
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)


@dataclass(frozen=True)
class RequestSpec:
    """A checked request: what each attempt sends (the webhook headers are added per attempt)."""

    target: Target
    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    content_type: str | None
    timeout: float | None  # seconds; None: PGSCHED["HTTP"]["TIMEOUT"]
    signing_secret: str | None
    retry_statuses: frozenset[int] = field(default_factory=frozenset)


def _headers(value: object, errors: list[str]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        errors.append(f"headers: expected an object of name -> value, got {value!r}"[:300])
        return ()
    if len(value) > MAX_HEADERS:
        errors.append(f"headers: {len(value)} headers is too many (at most {MAX_HEADERS})")
    result: list[tuple[str, str]] = []
    size = 0
    seen: set[str] = set()
    for name, text in value.items():
        if not isinstance(name, str) or not _TOKEN.match(name) or len(name) > 100:
            errors.append(f"headers: {name!r} is not a valid header name"[:300])
            continue
        lower = name.lower()
        if lower in RESERVED_HEADERS or lower.startswith("proxy-"):
            errors.append(f"headers: {name} is set by the scheduler, not by a schedule")
            continue
        if lower in seen:
            errors.append(f"headers: {name} is given twice")
            continue
        seen.add(lower)
        if not isinstance(text, str):
            errors.append(f"headers: the value of {name} must be a string, got {text!r}"[:300])
            continue
        if any(c in text for c in "\r\n\x00") or any(ord(c) < 0x20 and c != "\t" for c in text):
            errors.append(f"headers: invalid character in the value of {name}")
            continue
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            errors.append(f"headers: the value of {name} must be ASCII or Latin-1")
            continue
        size += len(name) + len(text) + 4
        result.append((name, text))
    if size > MAX_HEADER_BYTES:
        errors.append(f"headers: {size} bytes in all is too large (at most {MAX_HEADER_BYTES})")
    return tuple(result)


def _body(value: object, method: str, errors: list[str]) -> tuple[bytes, str | None]:
    if value is None:
        return b"", None
    if method in ("GET", "HEAD"):
        errors.append(f"body: a {method} request cannot have a body")
        return b"", None
    if isinstance(value, str):
        data, kind = value.encode("utf-8", "surrogatepass"), "text/plain; charset=utf-8"
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            errors.append(f"body: must be JSON or text ({exc})")
            return b"", None
        data, kind = text.encode("utf-8", "surrogatepass"), "application/json"
    if len(data) > MAX_BODY_BYTES:
        errors.append(f"body: {len(data)} bytes is too large (at most {MAX_BODY_BYTES})")
    return data, kind


def _timeout(value: object, run_timeout: timedelta | None, errors: list[str]) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value == value:
        errors.append(f"timeout: expected a number of seconds, got {value!r}")
        return None
    if not 0.1 <= value <= 3600:
        errors.append(f"timeout: must be between 0.1 and 3600 seconds, got {value!r}")
        return None
    if run_timeout is not None and value > run_timeout.total_seconds():
        errors.append(
            f"timeout: {value:g}s is longer than the run's timeout "
            f"({run_timeout.total_seconds():g}s); raise the schedule's timeout or lower this"
        )
    return float(value)


def parse_request(
    kwargs: object,
    settings: HttpSettings,
    *,
    run_timeout: timedelta | None = None,
    tenant: str = "",
) -> RequestSpec:
    """Check a run's kwargs for a run of ``tenant``; raise ``ValidationError`` with one
    message per problem."""
    if not isinstance(kwargs, dict):
        raise ValidationError(f"kwargs: expected an object, got {kwargs!r}"[:300])
    errors: list[str] = []
    unknown = sorted(set(kwargs) - set(KWARGS))
    if unknown:
        errors.append(
            f"kwargs: unknown argument(s) {', '.join(map(repr, unknown))} for pgsched.http "
            f"(known: {', '.join(KWARGS)})"
        )
    target: Target | None = None
    try:
        target = parse_url(kwargs.get("url"), settings)
    except Refused as exc:
        errors.append(str(exc))
    method = kwargs.get("method", "POST")
    if not isinstance(method, str) or method.upper() not in METHODS:
        errors.append(f"method: {method!r} is not one of {', '.join(METHODS)}"[:300])
        method = "POST"
    method = method.upper()
    headers = _headers(kwargs.get("headers"), errors)
    body, content_type = _body(kwargs.get("body"), method, errors)
    timeout = _timeout(kwargs.get("timeout"), run_timeout, errors)
    secret = kwargs.get("signing_secret")
    if secret is not None and (
        not isinstance(secret, str) or settings.secret_for(secret, tenant) is None
    ):
        # The same answer for a name that does not exist and one limited to other tenants,
        # and never the names there are: a tenant learns nothing of another's secrets.
        errors.append(
            f"signing_secret: no secret named {secret!r} for this run's tenant in "
            "PGSCHED['HTTP']['SIGNING_SECRETS']"[:400]
        )
    retry = kwargs.get("retry_statuses") or []
    if not isinstance(retry, list) or not all(s in RETRYABLE_4XX for s in retry):
        errors.append(
            f"retry_statuses: a list of some of {', '.join(map(str, RETRYABLE_4XX))}, "
            f"got {retry!r}"[:300]
        )
        retry = []
    if errors:
        raise ValidationError(errors)
    assert target is not None
    return RequestSpec(
        target=target,
        method=method,
        headers=headers,
        body=body,
        content_type=content_type,
        timeout=timeout,
        signing_secret=secret,
        retry_statuses=frozenset(retry),
    )


def validate_http_kwargs(
    kwargs: dict[str, Any], run_timeout: timedelta | None, *, tenant: str = ""
) -> dict[str, Any]:
    """The job's kwargs check for schedules and ``enqueue()`` (see ``JobSpec.check_kwargs``)."""
    from ..conf import get_settings

    parse_request(kwargs, get_settings().http, run_timeout=run_timeout, tenant=tenant)
    return kwargs


#: What a header's value reads as to those who may not change the schedule.
MASK = "[masked]"


def masked_kwargs(kwargs: Any) -> Any:
    """``kwargs`` with every header's value masked (they may be credentials: an
    ``Authorization``, a cookie), the names kept; anything else unchanged."""
    if isinstance(kwargs, dict) and isinstance(kwargs.get("headers"), dict):
        return {**kwargs, "headers": dict.fromkeys(kwargs["headers"], MASK)}
    return kwargs
