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

from .. import events
from ..conf import get_settings
from ..context import RunContext
from ..limits import MAX_NOTE_CHARS
from ..outcomes import Defer, Fail, LeaseLost
from .models import Breaker

logger = logging.getLogger(__name__)

#: How far ahead a held-back run is moved (it is released at once when the breaker closes).
PARK = timedelta(days=1)
MAX_HELD_PER_STATEMENT = 5000

# The key of a breaker: the destination given, or (pgsched.http) the one the
# database computes from the URL, so that it matches pgsched_run_http_destination_idx.
_KEY = "coalesce(%(destination)s::text, pgsched_http_destination(%(url)s::text))"

# May this attempt be the probe? The breaker is open and its cool-down over, or
# half-open and its probe given up (or this run is the probe, asking again).
_PROBE = (
    "((b.state = 'open' AND b.retry_at <= c.now) OR (b.state = 'half_open'"
    " AND (b.retry_at <= c.now OR b.probe_run_id = %(run)s)))"
)
_EXTEND = "(b.park_until IS NULL OR b.park_until < c.now + %(park)s / 2)"
ADMIT_SQL = f"""
WITH clock AS (SELECT clock_timestamp() AS now),
changed AS (
    UPDATE pgsched_breaker b
       SET state = CASE WHEN {_PROBE} THEN 'half_open' ELSE b.state END,
           probe_run_id = CASE WHEN {_PROBE} THEN %(run)s ELSE b.probe_run_id END,
           since = CASE WHEN {_PROBE} AND b.state = 'open' THEN c.now ELSE b.since END,
           retry_at = CASE WHEN {_PROBE} THEN c.now + %(probe_window)s ELSE b.retry_at END,
           park_until = CASE WHEN {_EXTEND} THEN c.now + %(park)s ELSE b.park_until END
      FROM clock c
     WHERE b.tenant = %(tenant)s AND b.destination = {_KEY}
       AND b.state <> 'closed'
       AND ({_PROBE} OR {_EXTEND})
    RETURNING b.state, b.probe_run_id, b.retry_at, b.park_until, b.failures
)
SELECT c.now, {_KEY},
       coalesce(x.state, b.state), coalesce(x.probe_run_id, b.probe_run_id),
       coalesce(x.retry_at, b.retry_at), coalesce(x.park_until, b.park_until),
       coalesce(x.failures, b.failures, 0)
  FROM clock c
  LEFT JOIN pgsched_breaker b ON b.tenant = %(tenant)s AND b.destination = {_KEY}
  LEFT JOIN changed x ON true
"""

# A failed delivery. Transitions: closed -> open at the threshold; half-open ->
# open when the probe fails (or was given up); open stays open.
_REOPEN = (
    "(b.state = 'half_open' AND (b.probe_run_id IS NOT DISTINCT FROM %(run)s"
    " OR b.retry_at <= excluded.since))"
)
_OPEN = "(b.state = 'closed' AND b.failures + 1 >= %(threshold)s)"
_COOLDOWN = "least(coalesce(b.cooldown, %(cooldown)s) * 2, %(cooldown_max)s)"
FAILURE_SQL = f"""
INSERT INTO pgsched_breaker AS b
       (tenant, destination, state, failures, since, retry_at, cooldown, park_until, opened,
        opened_at, last_error, last_failure_at)
SELECT %(tenant)s, {_KEY}, CASE WHEN o THEN 'open' ELSE 'closed' END, 1, now,
       CASE WHEN o THEN now + %(cooldown)s END, CASE WHEN o THEN %(cooldown)s END,
       CASE WHEN o THEN now + %(park)s END, CASE WHEN o THEN 1 ELSE 0 END,
       CASE WHEN o THEN now END, %(error)s, now
  FROM (SELECT clock_timestamp() AS now, %(threshold)s <= 1 AS o) c
ON CONFLICT (tenant, destination) DO UPDATE
   SET failures = b.failures + 1,
       last_error = excluded.last_error,
       last_failure_at = excluded.since,
       state = CASE WHEN {_REOPEN} OR {_OPEN} THEN 'open' ELSE b.state END,
       since = CASE WHEN {_REOPEN} OR {_OPEN} THEN excluded.since ELSE b.since END,
       cooldown = CASE WHEN {_REOPEN} THEN {_COOLDOWN}
                       WHEN {_OPEN} THEN %(cooldown)s ELSE b.cooldown END,
       retry_at = CASE WHEN {_REOPEN} THEN excluded.since + {_COOLDOWN}
                       WHEN {_OPEN} THEN excluded.since + %(cooldown)s ELSE b.retry_at END,
       park_until = CASE WHEN {_OPEN} THEN excluded.since + %(park)s ELSE b.park_until END,
       opened_at = CASE WHEN {_OPEN} THEN excluded.since ELSE b.opened_at END,
       probe_run_id = CASE WHEN {_REOPEN} THEN NULL ELSE b.probe_run_id END,
       opened = b.opened + CASE WHEN {_OPEN} THEN 1 ELSE 0 END
RETURNING b.state, b.destination, b.retry_at, b.park_until, b.failures,
          (b.state = 'open' AND b.since = b.last_failure_at) AS changed,
          (b.state = 'open' AND b.opened_at = b.last_failure_at) AS opened_now
"""

# Hold back the waiting runs of a destination that just opened: each moves to
# park_until (no attempt used, nothing failed). Runs being claimed right now are
# skipped: they meet the breaker when their job asks.
# With %(hold)s false, only the probe is designated. With %(designate)s, the
# oldest waiting run is kept for retry_at instead: the next probe, when the run
# that failed has no attempt left to be it.
HOLD_SQL = """
WITH locked AS MATERIALIZED (
    SELECT r.id, r.fire_after
      FROM pgsched_job_run r
     WHERE r.job = 'pgsched.http'
       AND r.status IN ('pending', 'retrying')
       AND r.tenant = %(tenant)s
       AND pgsched_http_destination(r.kwargs ->> 'url') = %(destination)s
       AND r.fire_after < %(park_until)s
       AND r.id <> %(run)s
     ORDER BY r.fire_after, r.id
     LIMIT CASE WHEN %(hold)s THEN %(limit)s ELSE 1 END
       FOR NO KEY UPDATE OF r SKIP LOCKED
),
held AS (
    SELECT id, row_number() OVER (ORDER BY fire_after, id) AS n FROM locked
)
UPDATE pgsched_job_run r
   SET fire_after = CASE WHEN held.n = 1 AND %(designate)s THEN %(retry_at)s
                         ELSE %(park_until)s END
  FROM held
 WHERE r.id = held.id
   AND (%(hold)s OR (held.n = 1 AND %(designate)s))
"""

# Close (after a success) and release what was held back: each held run gets its
# own time back (scheduled_for), or now if that has passed.
SUCCESS_SQL = f"""
WITH old AS MATERIALIZED (
    SELECT id, park_until, opened_at, state
      FROM pgsched_breaker
     WHERE tenant = %(tenant)s AND destination = {_KEY}
       AND (state <> 'closed' OR failures > 0)
       FOR NO KEY UPDATE
),
closed AS (
    UPDATE pgsched_breaker b
       SET state = 'closed', failures = 0, retry_at = NULL, cooldown = NULL, probe_run_id = NULL,
           park_until = NULL, last_success_at = clock_timestamp(),
           since = CASE WHEN b.state <> 'closed' THEN clock_timestamp() ELSE b.since END
      FROM old
     WHERE b.id = old.id
    RETURNING b.destination
),
released AS (
    UPDATE pgsched_job_run r
       SET fire_after = greatest(clock_timestamp(), r.scheduled_for)
      FROM old
     WHERE old.park_until IS NOT NULL
       AND r.job = 'pgsched.http'
       AND r.status IN ('pending', 'retrying')
       AND r.tenant = %(tenant)s
       AND pgsched_http_destination(r.kwargs ->> 'url') = (SELECT destination FROM closed)
       -- every held run waits until some park_until of this episode: from its opening
       -- plus PARK to the latest (a run deferred by its server waits less than that)
       AND r.fire_after BETWEEN old.opened_at + %(park)s AND old.park_until
    RETURNING r.id
)
SELECT (SELECT state FROM old), (SELECT count(*) FROM released)
"""


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
