"""Recording outcomes: the run's new state and its attempt row, fenced on the token.

Outcomes are normally written by the executor's pass statement together with
its claim (``executor_pass``). This module builds their part of it, and holds
the fallback for when that write fails for a reason other than a lost
connection: each outcome alone, and if even that fails, a minimal write that
still moves the run out of ``running`` (lease rule 3: never leave it for the
reaper to redeliver forever).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.types.json import Jsonb

from .. import events
from ..conf import Settings
from ..limits import MAX_ATTEMPTS, MAX_ERROR_CHARS, MAX_NOTE_CHARS
from ..statuses import RunStatus
from . import db, queries
from .claims import Outcome
from .policies import retry_delay
from .rows import ExecutorPassResult
from .slots import clean_text

logger = logging.getLogger(__name__)


def delay(outcome: Outcome, settings: Settings) -> float | None:
    """Seconds before the run is retried; None when it is not (succeeded, or failed for good).

    A job's ``Fail(not_before=...)`` may ask for later, never for sooner: a
    number of seconds here, a time in the statement (``not_befores``).
    """
    if outcome.run_status != RunStatus.RETRYING:
        return None
    backoff = _backoff(outcome, settings)
    if isinstance(outcome.not_before, (int, float)):
        return max(backoff, float(outcome.not_before))
    return backoff


def _backoff(outcome: Outcome, settings: Settings) -> float:
    return retry_delay(
        outcome.claim.attempt,
        base=settings.RETRY_BACKOFF_BASE,
        cap=settings.RETRY_BACKOFF_MAX,
        jitter=random.random(),
    )


def record_params(outcomes: Sequence[Outcome], settings: Settings) -> dict[str, Any]:
    """The recording's parameters of ``executor_pass``."""
    return {
        "record_since": record_since(outcomes),
        "ids": [o.claim.run_id for o in outcomes],
        "tokens": [o.claim.token for o in outcomes],
        "results": [o.status for o in outcomes],
        "errors": [o.error for o in outcomes],
        "statuses": [o.run_status for o in outcomes],
        "delays": _or_null([delay(o, settings) for o in outcomes]),
        "values": _or_null([o.value for o in outcomes]),
        "error_classes": [o.error_class for o in outcomes],
        "not_befores": _or_null(
            [o.not_before if isinstance(o.not_before, datetime) else None for o in outcomes]
        ),
        "details": _or_null([Jsonb(o.detail) if o.detail else None for o in outcomes]),
    }


def record_since(outcomes: Sequence[Outcome]) -> datetime | None:
    """The earliest month the recording reads: the outcomes' earliest ``scheduled_for``.

    PostgreSQL leaves the months before it out of the recording's update when it
    starts the statement. :data:`NO_MONTH` when there is nothing to record; None
    (every month) when a claim's time could not be read (its ``scheduled_for`` was
    replaced: the row's own may be any value, a year BC included).
    """
    if not outcomes:
        return NO_MONTH
    if any(o.claim.unreadable for o in outcomes):
        return None
    return min(o.claim.scheduled_for for o in outcomes)


NO_MONTH = datetime.max.replace(tzinfo=UTC)  # after every month: nothing to record


def _or_null(values: list[Any]) -> list[Any] | None:
    """``values``, or NULL when each is NULL: one array less to send, the same rows.

    ``unnest`` of several arrays pads the shorter ones with NULLs, and reads a
    NULL array as an empty one (a pass of successes sends no delays, values,
    times or details).
    """
    return values if any(value is not None for value in values) else None


NOTHING_TO_RECORD: Mapping[str, Any] = {
    "record_since": NO_MONTH,
    "ids": [],
    "tokens": [],
    "results": [],
    "errors": [],
    "statuses": [],
    "delays": [],
    "values": [],
    "error_classes": [],
    "not_befores": [],
    "details": [],
}


def record_defers(
    conn: BaseDatabaseWrapper,
    now: datetime | None,
    outcomes: Sequence[Outcome],
    settings: Settings,
) -> dict[int, str]:
    """Record the jobs' Defers (``executor_defer``, fenced on the token): id -> run status."""
    defers = [o.defer for o in outcomes if o.defer is not None]
    assert len(defers) == len(outcomes), "only deferred outcomes"
    rows = db.fetch(
        conn,
        queries.EXECUTOR_DEFER,
        {
            "now": now,
            "ids": [o.claim.run_id for o in outcomes],
            "tokens": [o.claim.token for o in outcomes],
            "attempted": [d.attempted for d in defers],
            "untils": [d.until for d in defers],
            "delays": [d.delay for d in defers],
            "reasons": [clean_text(d.reason or "deferred")[:MAX_ERROR_CHARS] for d in defers],
            "details": [Jsonb(o.detail) if o.detail else None for o in outcomes],
            "max_delay": settings.DEFER_MAX,
            "max_attempts": MAX_ATTEMPTS,
        },
    )
    return {row.id: row.status for row in rows}


NOTHING_TO_CLAIM: Mapping[str, Any] = {
    "live_since": None,  # every month (a run being recorded may be in any)
    "limit": 0,
    "jobs": [],
    "queues": None,
    "worker": "",
    "lease_factor": 1.0,
    "floor_rank": None,
    "floor_at": None,
    "floor_id": None,
    "held": False,
    "default_held": False,
}


def record_alone(
    conn: BaseDatabaseWrapper,
    now: datetime | None,
    outcomes: Sequence[Outcome],
    settings: Settings,
) -> dict[int, str]:
    """Record ``outcomes`` without claiming: run id -> its status now, for each recorded."""
    params = {"now": now, **record_params(outcomes, settings), **NOTHING_TO_CLAIM}
    return ExecutorPassResult.from_rows(db.fetch(conn, queries.EXECUTOR_PASS, params)).recorded


def record_one_by_one(
    conn: BaseDatabaseWrapper,
    now: datetime | None,
    outcomes: Sequence[Outcome],
    settings: Settings,
    using: str,
) -> dict[int, str]:
    """The fallback after a failed batch: each outcome in a savepoint, else a minimal write."""
    recorded: dict[int, str] = {}
    for outcome in outcomes:
        recorded.update(record_one_or_minimal(conn, now, outcome, settings, using))
    return recorded


def record_one_or_minimal(
    conn: BaseDatabaseWrapper,
    now: datetime | None,
    outcome: Outcome,
    settings: Settings,
    using: str,
) -> dict[int, str]:
    try:
        with transaction.atomic(using=using):
            return record_alone(conn, now, [outcome], settings)
    except (OperationalError, InterfaceError):
        raise
    except DatabaseError as exc:
        logger.error(
            "run %s: outcome could not be recorded (%s); failing it minimally",
            outcome.claim.run_id,
            exc,
        )
        rows = db.fetch(
            conn,
            queries.EXECUTOR_FAIL_MINIMAL,
            {
                "now": now,
                "id": outcome.claim.run_id,
                "token": outcome.claim.token,
                # even a success is retried when it could not be recorded (at-least-once),
                # unless this was the last attempt or the job cannot run here
                "delay": _backoff(outcome, settings) if outcome.retry else None,
                "note": clean_text(f"outcome could not be recorded: {exc}")[:MAX_NOTE_CHARS],
            },
        )
        return {row.id: row.status for row in rows}


def announce(sender: type, outcomes: Sequence[Outcome], recorded: Mapping[int, str]) -> None:
    """Tell the subscribers (metrics, logs) what each outcome came to."""
    for outcome in outcomes:
        claim = outcome.claim
        status = recorded.get(claim.run_id)
        if status is None:
            logger.warning(
                "run %s: lease lost before its outcome was recorded; discarded", claim.run_id
            )
            events.lease_lost.send(sender=sender, run_id=claim.run_id, reason="completion refused")
            continue
        events.attempt_finished.send(
            sender=sender,
            run_id=claim.run_id,
            job=claim.job,
            queue=claim.queue,
            attempt=claim.attempt,
            outcome=outcome.status,
            status=status,
            duration=outcome.duration,
            tenant=claim.context.tenant,
        )
