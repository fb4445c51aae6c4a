"""From what happened on the wire to what the run does next, and the evidence kept.

==========================  ==============================  ===============
answer                      the attempt                     breaker
==========================  ==============================  ===============
2xx (body read in time)     succeeded                       alive
429 / 503 + Retry-After     deferred to that time (capped)  alive
other 3xx                   failed, no retry                alive
408 / 409 / 425             failed; retried if the          alive
                            schedule lists it
429 without Retry-After     failed, retried with backoff    alive
other 4xx                   failed, no retry                alive
5xx                         failed, retried with backoff    failure
timeout, reset, refused     failed, retried with backoff    failure
connection, TLS, lookup
==========================  ==============================  ===============
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from ..digits import ascii_int_capped
from .client import Exchange
from .request import RequestSpec
from .settings import HttpSettings


@dataclass(frozen=True)
class Verdict:
    """What to do with the run after one exchange."""

    kind: str  # succeeded, deferred, failed
    retry: bool = False
    defer_seconds: float | None = None
    breaker_failure: bool = False  # counts against the destination
    message: str = ""


def retry_after(value: str | None, *, date: str | None, now: datetime) -> float | None:
    """Seconds a ``Retry-After`` value asks for (delay-seconds or an HTTP-date), if valid.

    An HTTP-date is read against the response's ``Date`` header when there is
    one (so the server's clock and ours need not agree), else against ``now``.
    """
    if value is None:
        return None
    value = value.strip()
    if (seconds := ascii_int_capped(value, cap=10**9)) is not None:
        return float(seconds)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    base = now
    if date:
        try:
            server_now = parsedate_to_datetime(date)
            if server_now is not None and server_now.tzinfo is not None:
                base = server_now
        except (TypeError, ValueError, IndexError):
            pass
    return max(0.0, (when - base).total_seconds())


def judge(
    exchange: Exchange, spec: RequestSpec, settings: HttpSettings, *, now: datetime | None = None
) -> Verdict:
    """The verdict on one exchange (see the table above)."""
    status = exchange.status
    if exchange.error or status is None:
        what = exchange.error or "error"
        detail = exchange.message or what
        if status is not None:
            detail = f"HTTP {status}, then {detail} while reading the body"
        return Verdict("failed", retry=True, breaker_failure=True, message=f"{what}: {detail}")
    headers = dict(exchange.headers)
    label = f"HTTP {status} {exchange.reason}".rstrip()
    if 200 <= status < 300:
        return Verdict("succeeded", message=label)
    if status in (429, 503):
        seconds = retry_after(
            headers.get("retry-after"), date=headers.get("date"), now=now or datetime.now(UTC)
        )
        if seconds is not None:
            cap = settings.RETRY_AFTER_MAX.total_seconds()
            capped = min(seconds, cap)
            note = f" (asked for {seconds:g}s, capped at {cap:g}s)" if seconds > cap else ""
            return Verdict(
                "deferred",
                defer_seconds=capped,
                breaker_failure=False,
                message=f"{label}: Retry-After {headers.get('retry-after')}{note}",
            )
        if status == 429:
            return Verdict("failed", retry=True, message=f"{label} without Retry-After")
    if 300 <= status < 400:
        where = headers.get("location", "(no Location)")
        return Verdict(
            "failed", message=f"{label}: redirect to {where} not followed (MAX_REDIRECTS)"
        )
    if 400 <= status < 500:
        if status in spec.retry_statuses:
            return Verdict("failed", retry=True, message=f"{label} (retried: retry_statuses)")
        return Verdict("failed", message=f"{label}: a client error; not retried")
    return Verdict("failed", retry=True, breaker_failure=status >= 500, message=label)


def evidence(
    exchange: Exchange,
    settings: HttpSettings,
    *,
    method: str,
    hops: list[dict[str, Any]],
    timestamp: int,
    vetting: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The attempt's ``detail``: what was sent where and what came back (bodies are untrusted)."""

    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * 1000, 3)

    try:
        excerpt: str = exchange.excerpt.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        excerpt, encoding = base64.b64encode(exchange.excerpt).decode("ascii"), "base64"
    keep = set(settings.RESPONSE_HEADERS)
    detail: dict[str, Any] = {
        "kind": "http",
        "method": method,
        "address": exchange.address,
        "status": exchange.status,
        "reason": exchange.reason,
        "timings_ms": {
            "connect": ms(exchange.connect),
            "first_byte": ms(exchange.first_byte),
            "total": ms(exchange.total),
        },
        "headers": {k: v[:500] for k, v in exchange.headers if k in keep},
        "body_excerpt": excerpt.replace("\x00", "\\x00"),
        "body_encoding": encoding,
        "body_truncated": exchange.truncated,
        "error": exchange.error,
        "message": exchange.message[:1000],
        "webhook_timestamp": timestamp,
    }
    if hops:
        detail["redirects"] = hops
    if vetting:
        detail["vetting"] = list(vetting)
    return detail
