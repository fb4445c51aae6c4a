"""Deterministic jitter: when a run may start, a little after its occurrence.

A schedule with ``jitter = J`` gives each run ``fire_after = scheduled_for + offset``
with ``offset`` in ``[0, min(J, next occurrence - scheduled_for))``: spread
over the jitter, never reaching the schedule's next occurrence. The offset is
a pure function of the run's idempotency key (which names the schedule and
the occurrence): the first 8 bytes of its SHA-256, read as a fraction of
2^64, times the bound, rounded down to the microsecond. Every replica, and
anyone with the key, computes the same value; nothing random happens at run
time. ``scheduled_for`` and the idempotency key do not move.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timedelta

from .errors import TimetableError

__all__ = ["MAX_JITTER", "fraction", "occurrence_key", "offset", "validate_jitter"]

MAX_JITTER = timedelta(days=1)
_US = timedelta(microseconds=1)


def occurrence_key(schedule_id: int, scheduled_for: datetime) -> str:
    """The idempotency key the planner gives this occurrence's run (see engine/queries.sql)."""
    t = scheduled_for
    return f"pgsched:{schedule_id}:{t.year:04d}-{t:%m-%dT%H:%M:%S}Z"


def fraction(key: str) -> float:
    """``key``'s place in ``[0, 1)``: uniform, and the same everywhere."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def offset(
    schedule_id: int, scheduled_for: datetime, jitter: timedelta, following: datetime | None
) -> timedelta:
    """How long after ``scheduled_for`` its run may start (``following``: the next occurrence)."""
    bound = jitter
    if following is not None:
        bound = min(bound, following - scheduled_for)
    micros = bound // _US
    if micros <= 0:
        return timedelta(0)
    digest = hashlib.sha256(occurrence_key(schedule_id, scheduled_for).encode()).digest()
    return timedelta(microseconds=(int.from_bytes(digest[:8], "big") * micros) >> 64)


def validate_jitter(value: object) -> timedelta:
    """``value`` as a duration from 0 to one day (a timedelta or a number of seconds)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise TimetableError(
            "jitter",
            "jitter_invalid",
            f"jitter: expected a duration (timedelta or seconds), got {value!r}",
        )
    if not timedelta(0) <= value <= MAX_JITTER:
        raise TimetableError(
            "jitter",
            "jitter_out_of_range",
            f"jitter: must be from 0 seconds to {MAX_JITTER.days} day, got {value}",
        )
    return value
