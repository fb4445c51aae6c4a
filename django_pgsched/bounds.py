"""The bounds of every stored time, duration and payload, refused before any write.

The database's CHECKs (the domains' in ``migrations/sql/domains.sql``, the tables'
in ``migrations/sql/tables.sql``: the bounds spelled out, not calls of
``pgsched_time_ok``, ``pgsched_interval_ok``, ``pgsched_json_ok``) refuse the
same values; this module refuses them first, in the model layer (``save()``,
``create()``, ``bulk_create()``), as a ``ValidationError`` naming the field and
the value.
It also turns what the database refuses for a value (a CHECK, a ``DataError``)
into one, so that nothing bare reaches an admin page or a command.

- A time: aware, from year 1 to 9999 in UTC (what a ``datetime`` holds once
  converted to UTC; ``datetime(1, 1, 1, tzinfo=+05:00)`` is year 1 BC in UTC).
- A duration: within its field's bounds (:data:`SCHEDULE_DURATIONS`,
  :data:`RUN_DURATIONS`).
- A payload: nested at most :data:`JSON_MAX_DEPTH` levels, every number under
  10^4300 in magnitude (Python reads no longer integer back), finite floats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, DataError, IntegrityError
from django.utils import timezone

from .limits import (
    LAST_FIRE_TIME,
    MAX_MISFIRE_GRACE,
    MAX_START_DEADLINE,
    MAX_TIMEOUT,
    MIN_START_DEADLINE,
    MIN_TIMEOUT,
)
from .timing.jitter import MAX_JITTER
from .timing.timetable import MAX_INTERVAL, MIN_INTERVAL

#: A payload's nesting (the root object is level 1), in the database too.
JSON_MAX_DEPTH = 100
#: A payload's numbers are smaller than this in magnitude (4,300 digits: Python's limit).
JSON_NUMBER_LIMIT = 10**4300

SCHEDULE_TIMES = ("anchor", "next_fire_at", "last_fire_at")
SCHEDULE_DURATIONS: Mapping[str, tuple[timedelta, timedelta]] = {
    "interval": (MIN_INTERVAL, MAX_INTERVAL),
    "timeout": (MIN_TIMEOUT, MAX_TIMEOUT),
    "misfire_grace": (timedelta(0), MAX_MISFIRE_GRACE),
    "jitter": (timedelta(0), MAX_JITTER),
    "start_deadline": (MIN_START_DEADLINE, MAX_START_DEADLINE),
}
SCHEDULE_PAYLOADS = ("kwargs",)
RUN_TIMES = ("scheduled_for", "fire_after", "claim_expires_at", "started_at", "finished_at")
RUN_TIMES_ALL = (*RUN_TIMES, "start_by")
RUN_DURATIONS: Mapping[str, tuple[timedelta, timedelta]] = {"timeout": (MIN_TIMEOUT, MAX_TIMEOUT)}
RUN_PAYLOADS = ("kwargs", "task_call", "return_value")

#: The CHECKs on a schedule's or a run's values, by constraint name: the fields they name.
CONSTRAINT_FIELDS: Mapping[str, tuple[str, ...]] = {
    "pgsched_schedule_times_range": (*SCHEDULE_TIMES, "created_at", "updated_at"),
    "pgsched_schedule_times_finite": ("anchor", "next_fire_at"),
    "pgsched_schedule_durations_range": ("timeout", "misfire_grace"),
    "pgsched_schedule_timeout_range": ("timeout",),
    "pgsched_schedule_grace_range": ("misfire_grace",),
    "pgsched_schedule_interval_whole_seconds": ("interval",),
    "pgsched_schedule_jitter_range": ("jitter",),
    "pgsched_schedule_start_deadline_range": ("start_deadline",),
    "pgsched_schedule_kwargs_readable": ("kwargs",),
    "pgsched_schedule_kwargs_object": ("kwargs",),
    "pgsched_schedule_catch_up_limit_check": ("catch_up_limit",),
    "pgsched_schedule_catch_up_limit_range": ("catch_up_limit",),
    "pgsched_schedule_max_attempts_check": ("max_attempts",),
    "pgsched_schedule_max_attempts_range": ("max_attempts",),
    "pgsched_schedule_cron_text": ("cron",),
    "pgsched_schedule_cron_xor_interval": ("cron", "interval"),
    "pgsched_schedule_name_nonempty": ("name",),
    "pgsched_schedule_status_valid": ("status",),
    "pgsched_schedule_policy_valid": ("misfire_policy",),
    "pgsched_schedule_overlap_valid": ("overlap",),
    "pgsched_schedule_dst_gap_valid": ("dst_gap",),
    "pgsched_schedule_dst_fold_valid": ("dst_fold",),
    "pgsched_schedule_skipped_non_negative": ("skipped_occurrences",),
    "pgsched_schedule_tenant_text": ("tenant",),
    "pgsched_schedule_timezone_name": ("timezone",),
    "pgsched_schedule_zone_needs_cron": ("timezone",),
    "pgsched_schedule_unplanned_reason": ("unplanned_reason",),
    "pgsched_schedule_tenant_quota": ("tenant",),
    "pgsched_run_times_range": (*RUN_TIMES_ALL, "created_at"),
    "pgsched_run_timeout_range": ("timeout",),
    "pgsched_run_json_readable": RUN_PAYLOADS,
    "pgsched_run_kwargs_object": ("kwargs",),
    "pgsched_run_task_call_object": ("task_call",),
    "pgsched_run_return_value_size": ("return_value",),
    "pgsched_run_attempts_range": ("attempts",),
    "pgsched_run_attempts_within_max": ("attempts", "max_attempts", "status"),
    "pgsched_run_max_attempts_range": ("max_attempts",),
    "pgsched_run_priority_range": ("priority",),
    "pgsched_run_overlap_valid": ("overlap",),
    "pgsched_run_status_valid": ("status",),
    "pgsched_run_tenant_text": ("tenant",),
    "pgsched_run_scheduled_for_whole_second": ("scheduled_for",),
    "pgsched_run_lease_iff_running": ("status", "claimed_by", "claim_expires_at"),
    "pgsched_run_terminal_has_finished_at": ("status", "finished_at"),
}


def time_error(field: str, value: object, before: datetime | None = None) -> str | None:
    """Why ``value`` cannot be stored in the time field ``field`` (None: it can)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return f"{field}: must be a datetime, got {type(value).__name__} {value!r}"
    shown = value.isoformat()
    try:
        aware = timezone.make_aware(value) if timezone.is_naive(value) else value
        utc = aware.astimezone(UTC)
    except (OverflowError, ValueError):
        return f"{field}: must be from year 1 to 9999 in UTC, got {shown}"
    if before is not None and utc >= before:
        return f"{field}: must be before {before.isoformat()}, got {shown}"
    return None


def duration_error(field: str, value: object, lo: timedelta, hi: timedelta) -> str | None:
    """Why ``value`` cannot be stored in the duration field ``field`` (None: it can)."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        return f"{field}: must be a timedelta, got {type(value).__name__} {value!r}"
    if not lo <= value <= hi:
        return f"{field}: must be from {_span(lo)} to {_span(hi)}, got {_span(value)}"
    return None


def payload_error(field: str, value: object) -> str | None:
    """Why ``value`` cannot be stored as the JSON field ``field`` (None: it can).

    Iterative, so that a payload nested far deeper than the bound is refused,
    not a ``RecursionError``.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > JSON_MAX_DEPTH:
            return f"{field}: nested deeper than {JSON_MAX_DEPTH} levels"
        if isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        if isinstance(item, int):
            if not -JSON_NUMBER_LIMIT < item < JSON_NUMBER_LIMIT:
                return f"{field}: the integer {_digits(item)} is too large (4,300 digits or more)"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{field}: NaN and infinities are not JSON, got {item!r}"
        elif isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return None


def check(instance: Any, times: Iterable[str], durations: Mapping[str, Any], payloads: Any) -> None:
    """Raise ``ValidationError`` ({field: [message]}) for every bounded value out of bounds."""
    errors: dict[str, list[str]] = {}
    values = instance.__dict__  # a deferred field is not loaded (and not written)
    for field in times:
        if field in values:
            before = LAST_FIRE_TIME if field in ("anchor", "next_fire_at") else None
            message = time_error(field, values[field], before)
            if message:
                errors[field] = [message]
    for field, (lo, hi) in durations.items():
        if field in values:
            message = duration_error(field, values[field], lo, hi)
            if message:
                errors[field] = [message]
    for field in payloads:
        if field in values:
            message = payload_error(field, values[field])
            if message:
                errors[field] = [message]
    if errors:
        raise ValidationError(errors)


def refusal(exc: DatabaseError, instance: Any = None) -> ValidationError | None:
    """A ``ValidationError`` naming the field for a value the database refused, else None.

    A CHECK of :data:`CONSTRAINT_FIELDS` (SQLSTATE 23514) or a value out of a
    type's range (class 22, ``DataError``). Unique violations and the rest stay
    as they are (callers rely on them: an idempotency key already taken). With
    ``instance``, each field's message shows the value it held.
    """
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or ""
    diag = getattr(cause, "diag", None)
    detail = str(getattr(diag, "message_primary", None) or exc)
    if sqlstate == "23514":
        name = getattr(diag, "constraint_name", None) or ""
        fields = CONSTRAINT_FIELDS.get(name)
        if fields is None:
            return None
        values = getattr(instance, "__dict__", {})

        def shown(field: str) -> str:
            return f", got {_repr(values[field])}" if field in values else ""

        return ValidationError(
            {
                field: [f"{field}: refused by the database ({name}){shown(field)}: {detail}"]
                for field in fields
            }
        )
    if sqlstate.startswith("22"):
        return ValidationError(f"a value is out of range for the database: {detail}")
    return None


@contextmanager
def refused_as_validation_error(instance: Any = None) -> Iterator[None]:
    """What the database refuses for a value, raised as :func:`refusal`'s ``ValidationError``."""
    try:
        yield
    except (IntegrityError, DataError) as exc:
        refused = refusal(exc, instance)
        if refused is None:
            raise
        raise refused from exc


def _repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def _span(value: timedelta) -> str:
    seconds = value.total_seconds()
    if seconds and seconds % 86400 == 0:
        days = int(seconds // 86400)
        return f"{days} day" + ("s" if days != 1 else "")
    return f"{seconds:g} second" + ("s" if seconds != 1 else "")


def _digits(value: int) -> str:
    text_len = int(math.log10(abs(value))) + 1 if value else 1
    return f"of about {text_len:,} digits"
