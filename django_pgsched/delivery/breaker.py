"""A circuit breaker per destination, kept in ``pgsched_breaker`` so every replica agrees.

States and transitions (each one SQL statement, conditional on the row as it is):

- **closed** — deliveries go through. A failed delivery (5xx, timeout,
  reset, refused connection, failed lookup) adds one to ``failures``; any
  answer that shows the server alive (2xx, 3xx, 4xx) sets it back to 0. At
  ``BREAKER_THRESHOLD`` failures in a row it **opens**.
- **open** — nothing is attempted until ``retry_at`` (now + the cool-down).
  The runs waiting for the destination are *held back*: their ``fire_after``
  moves to the breaker's ``park_until`` (an hour ahead), one statement over
  the destination's range of ``pgsched_run_http_destination_idx``. A run that
  is claimed anyway is deferred without an attempt (:class:`Defer` with
  ``attempted=False``). The run whose failure opened the breaker is retried
  at ``retry_at``: it is the probe.
- **half-open** — from ``retry_at`` one run (the first to ask) goes through as
  the probe. Success **closes** the breaker and releases the held runs (their
  ``fire_after`` back to their own time, or now); failure **opens** it again
  with a doubled cool-down (up to ``BREAKER_COOLDOWN_MAX``). A probe that
  never reports (its replica died) is given up at ``retry_at``.

So a dead destination costs one write per waiting run when it is held back
and one when it is released, plus the probe's own attempt per cool-down,
however long it stays dead. Nothing is failed for being held back, and no
occurrence is lost.

``pgsched.http`` keys a destination by ``scheme://host:port`` as the
database computes it from the URL (``pgsched_http_destination()``), per
tenant. Python jobs can use the same breaker around their own calls with
:func:`circuit`, keyed by any name; their waiting runs are not held back in
bulk (the database cannot see their destination), so each is deferred when
it is claimed, and waits up to ``park_until`` after the destination recovers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from .. import events, sqlfiles
from ..conf import get_settings
from ..context import RunContext
from ..limits import MAX_NOTE_CHARS
from ..outcomes import Defer, Fail, LeaseLost
from .models import Breaker

logger = logging.getLogger(__name__)

#: How far ahead a held-back run is moved (it is released at once when the breaker closes).
PARK = timedelta(days=1)
MAX_HELD_PER_STATEMENT = 5000

# The breaker's statements (queries.sql): admit, failure and success are templates,
# filled in with the fragments named after their fields.
_FRAGMENTS = {
    name: sqlfiles.get("delivery", name)
    for name in ("key", "probe", "extend", "reopen", "open", "next_cooldown")
}
ADMIT_SQL = sqlfiles.get("delivery", "admit").format(**_FRAGMENTS)
FAILURE_SQL = sqlfiles.get("delivery", "failure").format(**_FRAGMENTS)
HOLD_SQL = sqlfiles.get("delivery", "hold")
SUCCESS_SQL = sqlfiles.get("delivery", "success").format(**_FRAGMENTS)


@dataclass(frozen=True)
class Admission:
    """What the breaker said about one attempt."""

    now: datetime
    destination: str
    state: str  # closed, open, half_open ("closed" when there is no row)
    probe: bool  # this attempt is the half-open probe
    failures: int
    retry_at: datetime | None = None
    park_until: datetime | None = None

    @property
    def allowed(self) -> bool:
        return self.state == "closed" or self.probe


def _params(
    context: RunContext, *, destination: str | None, url: str | None, **extra: Any
) -> dict[str, Any]:
    s = get_settings().http
    return {
        "tenant": context.tenant,
        "destination": destination,
        "url": url,
        "run": context.job_run_id,
        "park": PARK,
        "threshold": s.BREAKER_THRESHOLD,
        "cooldown": s.BREAKER_COOLDOWN,
        "cooldown_max": s.BREAKER_COOLDOWN_MAX,
        **extra,
    }


def _cursor() -> Any:
    return connections[get_settings().DATABASE_ALIAS].cursor()


def admit(
    context: RunContext,
    *,
    destination: str | None = None,
    url: str | None = None,
    probe_window: timedelta = timedelta(minutes=2),
) -> Admission:
    """Ask the breaker whether this attempt may go (one read; a write only to start a probe).

    The delivery's own step: the claim that started the run never reads the
    breaker, so runs of other jobs pay nothing for it.
    """
    params = _params(context, destination=destination, url=url, probe_window=probe_window)
    with _cursor() as cursor:
        cursor.execute(ADMIT_SQL, params)
        now, key, state, probe_run, retry_at, park_until, failures = cursor.fetchone()
    state = state or "closed"
    probe = state == "half_open" and probe_run == context.job_run_id
    if probe:
        events.breaker_changed.send(
            sender=Breaker, destination=key, tenant=context.tenant, state="half_open"
        )
    return Admission(now, key or "", state, probe, failures or 0, retry_at, park_until)


def hold_back(admission: Admission, *, bulk: bool = True) -> Defer:
    """The deferral of a run that the breaker keeps back (no attempt is used).

    ``bulk`` (``pgsched.http``): until ``park_until``; the run is released as
    soon as the breaker closes. Otherwise (a Python job's :func:`circuit`):
    until the next probe may go, when the run asks again.
    """
    if bulk:
        until = admission.park_until or (admission.now + PARK)
        then = "released when it closes"
    else:
        until = max(admission.retry_at or admission.now, admission.now) + timedelta(seconds=1)
        then = "asks again when a probe may go"
    return Defer(
        until,
        attempted=False,
        reason=(
            f"held back: the circuit breaker for {admission.destination} is "
            f"{admission.state.replace('_', '-')}; {then}"
        ),
    )


@dataclass(frozen=True)
class Failure:
    """The breaker after a failed delivery was counted."""

    state: str
    destination: str
    failures: int
    retry_at: datetime | None
    park_until: datetime | None
    changed: bool  # this failure opened it (or re-opened it after a failed probe)

    def not_before(self, *, last_attempt: bool, probe: bool) -> datetime | None:
        """When the failed run may try again: at the next probe, or with the held runs."""
        if self.state == "closed" or last_attempt:
            return None
        if self.changed or probe:
            return self.retry_at  # the run that (re)opened it is the next probe
        return self.park_until  # in flight when it opened: wait with the others


def record_failure(
    context: RunContext, error: str, *, destination: str | None = None, url: str | None = None
) -> Failure:
    """Count a failed delivery; open the breaker at the threshold and hold back its runs.

    When it opens, the destination's waiting ``pgsched.http`` runs are held
    back (one statement). The run that failed is the next probe; if it has no
    attempt left, the oldest waiting run is kept for ``retry_at`` instead.
    """
    if get_settings().http.BREAKER_THRESHOLD == 0:
        return Failure("closed", destination or "", 0, None, None, False)
    params = _params(context, destination=destination, url=url, error=error[:MAX_NOTE_CHARS])
    with _cursor() as cursor:
        cursor.execute(FAILURE_SQL, params)
        state, key, retry_at, park_until, failures, changed, opened_now = cursor.fetchone()
        last = context.attempt >= context.max_attempts
        if changed and url is not None and (opened_now or last):
            cursor.execute(
                HOLD_SQL,
                {
                    "tenant": context.tenant,
                    "destination": key,
                    "park_until": park_until,
                    "retry_at": retry_at,
                    "run": context.job_run_id,
                    "limit": MAX_HELD_PER_STATEMENT,
                    "hold": bool(opened_now),
                    "designate": last,
                },
            )
            if opened_now:
                logger.warning(
                    "circuit breaker for %s opened after %d failed deliveries; "
                    "%d waiting run(s) held back until it recovers",
                    key,
                    failures,
                    cursor.rowcount,
                )
    if changed:
        events.breaker_changed.send(
            sender=Breaker, destination=key, tenant=context.tenant, state=state
        )
    return Failure(state, key, failures, retry_at, park_until, bool(changed))


def record_success(
    context: RunContext, *, destination: str | None = None, url: str | None = None
) -> int:
    """The destination answered: close the breaker and release its held runs (one statement).

    Call only when the admission showed a breaker that is not closed or counts
    failures: a healthy destination costs no write. Returns the runs released.
    """
    params = _params(context, destination=destination, url=url)
    with _cursor() as cursor:
        cursor.execute(SUCCESS_SQL, params)
        was, released = cursor.fetchone()
    if was and was != "closed":
        logger.warning("circuit breaker closed again; %d held run(s) released", released)
        events.breaker_changed.send(
            sender=Breaker, destination=destination or url, tenant=context.tenant, state="closed"
        )
    return int(released or 0)


def reset(breaker_id: int) -> int:
    """An operator's reset (the admin's button): close it, release its held runs."""
    breaker = Breaker.objects.get(pk=breaker_id)
    context = RunContext(
        job_run_id=0,
        job="",
        schedule_name=None,
        scheduled_for=breaker.since,
        attempt=1,
        max_attempts=1,
        idempotency_key="",
        worker="admin",
        tenant=breaker.tenant,
    )
    return record_success(context, destination=breaker.destination)


@contextmanager
def circuit(
    context: RunContext, destination: str, *, probe_window: timedelta | None = None
) -> Iterator[Admission]:
    """Guard a Python job's call to ``destination`` (any name) with a breaker.

    Raises :class:`Defer` (without using an attempt) while the breaker is
    open; records the outcome of the block: an exception (other than
    :class:`Defer`, :class:`LeaseLost` or ``Fail(retry=False)``) is a failed
    delivery, and a normal exit a success::

        with circuit(context, "smtp:mail.example.com"):
            send_mail(...)
    """
    window = probe_window or timedelta(minutes=2)
    admission = admit(context, destination=destination, probe_window=window)
    if not admission.allowed:
        raise hold_back(admission, bulk=False)
    try:
        yield admission
    except (Defer, LeaseLost):
        raise
    except Fail as exc:
        if exc.retry:
            record_failure(context, exc.message, destination=destination)
        raise
    except Exception as exc:
        failure = record_failure(context, f"{type(exc).__name__}: {exc}", destination=destination)
        not_before = failure.not_before(
            last_attempt=context.attempt >= context.max_attempts, probe=admission.probe
        )
        if not_before is not None and failure.state != "closed":
            raise Fail(f"{type(exc).__name__}: {exc}", not_before=failure.retry_at) from exc
        raise
    if admission.state != "closed" or admission.failures:
        record_success(context, destination=destination)
