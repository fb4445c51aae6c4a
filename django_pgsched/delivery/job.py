"""The built-in job ``pgsched.http``: one signed, vetted request per attempt.

An attempt, in order: check the kwargs (a bad one fails the run without
retrying); ask the destination's circuit breaker (held back: deferred
without using an attempt); resolve the host once and vet every address
(refused: failed without retrying, nothing sent); connect to a vetted
address; re-assert the lease (a fenced renewal: a run reaped a moment ago
sends nothing); send, with the Standard Webhooks headers; read the answer
within the time left; keep the evidence on the attempt; tell the breaker;
then succeed, defer, or fail (see :mod:`.verdicts`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn
from urllib.parse import urljoin

from django.core.exceptions import ValidationError

from .. import events
from ..conf import get_settings
from ..context import RunContext
from ..outcomes import Defer, Fail, LeaseLost
from ..registry import job
from . import breaker, client
from .request import RequestSpec, parse_request, validate_http_kwargs
from .settings import HttpSettings
from .signing import SigningError, webhook_headers
from .urls import Refused, Target, parse_url
from .verdicts import evidence, judge
from .vetting import ResolveError, vet

JOB_NAME = "pgsched.http"
REDIRECTS = (301, 302, 303, 307, 308)
MARGIN = 0.5  # seconds kept between the request's deadline and the job's


@job(
    name=JOB_NAME,
    takes_context=True,
    timeout=timedelta(seconds=60),
    check_kwargs=validate_http_kwargs,
)
def http(context: RunContext, **kwargs: Any) -> None:
    """Deliver one HTTP request (kwargs: url, method, headers, body, timeout, signing_secret)."""
    outcome = "failed"
    try:
        deliver(context, kwargs)
        outcome = "succeeded"
    except Defer as exc:
        outcome = "deferred" if exc.attempted else "held_back"
        raise
    except LeaseLost:
        outcome = "lease_lost"
        raise
    except Fail:
        outcome = "refused" if context.detail.get("refused") else "failed"
        raise
    finally:
        events.http_delivered.send(
            sender=http,
            outcome=outcome,
            status=context.detail.get("status"),
            run_id=context.job_run_id,
        )


def _headers(
    spec: RequestSpec,
    settings: HttpSettings,
    context: RunContext,
    body: bytes,
    timestamp: int,
    *,
    bare: bool = False,
) -> list[tuple[str, str]]:
    """The request's headers; ``bare``: to another origin than the schedule's (a redirect),
    without the schedule's own headers and without the signature."""
    given = {name.lower() for name, _ in spec.headers} if not bare else set()
    headers: list[tuple[str, str]] = []
    if "user-agent" not in given:
        headers.append(("User-Agent", settings.USER_AGENT))
    if spec.content_type and body and "content-type" not in given:
        headers.append(("Content-Type", spec.content_type))
    if bare:
        return headers
    headers.extend(spec.headers)
    keys = (
        settings.secret_for(spec.signing_secret, context.tenant) or ()
        if spec.signing_secret
        else ()
    )
    headers.extend(webhook_headers(context.idempotency_key, timestamp, body, keys))
    return headers


def deliver(context: RunContext, kwargs: dict[str, Any]) -> None:
    """One attempt of a ``pgsched.http`` run (raises Defer, Fail or LeaseLost; see the module)."""
    settings = get_settings().http
    try:
        spec = parse_request(kwargs, settings, tenant=context.tenant)
    except ValidationError as exc:
        raise Fail("; ".join(exc.messages), retry=False) from None
    url: str = kwargs["url"]
    started = time.monotonic()
    timeout = min(
        spec.timeout or settings.TIMEOUT.total_seconds(), context.deadline - started - MARGIN
    )
    if timeout <= 0:
        raise Fail("no time left for the request before the run's timeout")
    deadline = started + timeout
    admission = breaker.admit(context, url=url, probe_window=timedelta(seconds=2 * timeout + 30))
    if not admission.allowed:
        raise breaker.hold_back(admission)

    target: Target = spec.target
    method, body = spec.method, spec.body
    hops: list[dict[str, Any]] = []
    bare = False  # a redirect left the schedule's origin: no headers of its own, no signature
    while True:
        try:
            vetted = vet(
                target, settings, timeout=deadline - time.monotonic(), tenant=context.tenant
            )
        except Refused as exc:
            context.detail = {"kind": "http", "refused": str(exc), "redirects": hops}
            if context.tenant and exc.public != str(exc):
                # A tenant's run: what the name resolved to stays in the detail (the
                # operators'), and a refused answer reads and retries as a name that does
                # not resolve, so that the tenant learns neither the answer nor whether
                # the name exists.
                _failed(context, admission, url, _unresolved(exc.public, hops), retry=True)
            if hops:  # where a followed redirect leads
                raise Fail(f"redirect refused: {exc}; not followed", retry=False) from None
            raise Fail(f"refused: {exc}; not delivered", retry=False) from None
        except ResolveError as exc:
            context.detail = {"kind": "http", "error": "resolve", "message": str(exc)}
            if exc.waited:  # this process was busy, not the destination: no breaker failure
                raise Fail(f"resolve: {exc.public}", retry=True) from None
            message = exc.public if context.tenant else str(exc)
            _failed(context, admission, url, _unresolved(message, hops), retry=True)
        timestamp = int(time.time())
        try:
            headers = _headers(spec, settings, context, body, timestamp, bare=bare)
        except SigningError as exc:
            raise Fail(str(exc), retry=False) from None
        request = client.Outgoing(
            scheme=target.scheme,
            host=target.host,
            host_header=target.host_header,
            port=target.port,
            method=method,
            path=target.path,
            headers=headers,
            body=body,
        )
        exchange = client.exchange(
            request,
            vetted.addresses,
            deadline=deadline,
            connect_timeout=settings.CONNECT_TIMEOUT.total_seconds(),
            excerpt_bytes=settings.RESPONSE_EXCERPT_BYTES,
            before_send=lambda: context.ensure_lease(max(0.0, deadline - time.monotonic())),
            on_abort=context.on_cancel,
        )
        context.detail = evidence(
            exchange, settings, method=method, hops=hops, timestamp=timestamp, vetting=vetted.notes
        )
        location = dict(exchange.headers).get("location")
        if exchange.status in REDIRECTS and location and len(hops) < settings.MAX_REDIRECTS:
            hops.append({"status": exchange.status, "from": target.url, "to": location[:2048]})
            try:
                following = parse_url(urljoin(target.url, location), settings)
            except Refused as exc:
                context.detail["refused"] = str(exc)
                raise Fail(f"redirect refused: {exc}; not followed", retry=False) from None
            if target.scheme == "https" and following.scheme == "http":
                refusal = f"redirect from https to http ({following.origin}): a downgrade"
                context.detail["refused"] = refusal
                raise Fail(f"redirect refused: {refusal}; not followed", retry=False)
            # The schedule's headers (Authorization, cookies) and the signature are its
            # origin's own: once a redirect leaves that origin, neither is sent again.
            bare = bare or following.origin != spec.target.origin
            target = following
            if exchange.status == 303 or (exchange.status in (301, 302) and method != "HEAD"):
                method, body = ("GET" if method != "HEAD" else method), b""
            continue
        break

    if exchange.error == "cancelled":
        raise LeaseLost(exchange.message or "cancelled while the request was in flight")
    verdict = judge(exchange, spec, settings, now=datetime.now(UTC))
    if verdict.breaker_failure:
        _failed(context, admission, url, verdict.message, retry=verdict.retry)
    if admission.state != "closed" or admission.failures:
        breaker.record_success(context, url=url)
    if verdict.kind == "succeeded":
        return
    if verdict.kind == "deferred":
        raise Defer(delay=verdict.defer_seconds or 0.0, reason=verdict.message)
    raise Fail(verdict.message, retry=verdict.retry)


def _unresolved(message: str, hops: list[dict[str, Any]]) -> str:
    return f"resolve: {message}" + ("; a redirect's destination, not followed" if hops else "")


def _failed(
    context: RunContext, admission: breaker.Admission, url: str, message: str, *, retry: bool
) -> NoReturn:
    """A failed delivery: tell the breaker, then fail the attempt (at the breaker's pace)."""
    failure = breaker.record_failure(context, message, url=url)
    not_before = failure.not_before(
        last_attempt=context.attempt >= context.max_attempts, probe=admission.probe
    )
    if failure.state != "closed":
        message = f"{message} (circuit breaker for {failure.destination}: {failure.state})"
    raise Fail(message, retry=retry, not_before=not_before)
