"""Backfill: create the runs of a schedule's past occurrences that have none.

:func:`backfill` takes the occurrences of a schedule's timetable in
``[start, end)`` that have no run yet, creates their runs (``is_backfill``,
due now, in the caller's queue if one is given), and takes them out of the
ledger of occurrences that did not run: each is a run from then on, never
both. It is idempotent (the unique occurrence index absorbs a repeat, and a
second call finds nothing left to create) and bounded: more occurrences than
``limit`` (default ``PGSCHED["BACKFILL_LIMIT"]``) is refused with the count.

Only *decided* occurrences are backfilled: up to the database's now, and
before the schedule's ``next_fire_at`` (or where a paused schedule stopped):
the occurrences after that belong to the planner. The schedule's row is
locked for the transaction (``FOR NO KEY UPDATE``: a planner skips it
meanwhile), so the runs of one schedule are always created in order of
commit, which is what lets the overlap policy serialise them
(:mod:`django_pgsched.engine.guard`). A backfilled run honours the schedule's
overlap policy by waiting: it never runs beside another run of the schedule,
it starts after every run created before it has finished, and it is never
skipped for overlap (a backfill asks for those runs explicitly). It has no
start deadline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connections, transaction
from django.utils import timezone

from .. import events, sqlfiles
from ..conf import get_settings
from ..engine import queries
from ..engine.policies import Skipped
from ..limits import BACKFILL_CHUNK, MAX_BACKFILL, MAX_BACKFILL_SCAN
from ..models import Schedule
from ..registry import job_defaults, validate_queue
from ..statuses import COUNTED_REASONS
from ..timing import spans as ranges
from ..timing import timetable

# the backfill's statements (queries.sql)
UNPLANNED_SQL = sqlfiles.get("ledger", "backfill_unplanned")
EXISTING_SQL = sqlfiles.get("ledger", "backfill_existing")
EXISTING_COUNT_SQL = sqlfiles.get("ledger", "backfill_existing_count")
ENSURE_MONTHS_SQL = sqlfiles.get("ledger", "backfill_ensure_months")
INSERT_SQL = sqlfiles.get("ledger", "backfill_insert")
RANGES_SQL = sqlfiles.get("ledger", "backfill_ranges")


class BackfillRefused(ValueError):
    """A backfill larger than its limit: nothing was created; the message says how many."""

    def __init__(self, message: str, *, count: int, limit: int) -> None:
        super().__init__(message)
        self.count = count
        self.limit = limit


@dataclass(frozen=True)
class BackfillResult:
    """What :func:`backfill_occurrences` did (or, with ``dry_run``, would do)."""

    schedule: str
    created: int
    occurrences: int  # in the range, up to the decided horizon
    already: int  # of those, already a run
    horizon: datetime  # occurrences from here on were left to the planner
    from_ledger: dict[str, int] = field(default_factory=dict)  # taken out of ranges, by reason


def backfill(
    schedule_name: str,
    start: datetime,
    end: datetime,
    *,
    limit: int | None = None,
    queue: str | None = None,
    tenant: str = "",
    using: str | None = None,
) -> int:
    """Create the runs of ``schedule_name``'s occurrences in ``[start, end)`` that have none.

    Returns the number of runs created. Raises :class:`BackfillRefused` (a
    ``ValueError``) when more than ``limit`` occurrences would be created, and
    ``ValidationError`` for bad input (naming it).
    """
    return backfill_occurrences(
        schedule_name, start, end, limit=limit, queue=queue, tenant=tenant, using=using
    ).created


def backfill_occurrences(
    schedule_name: str,
    start: datetime,
    end: datetime,
    *,
    limit: int | None = None,
    queue: str | None = None,
    dry_run: bool = False,
    note: str = "backfill",
    tenant: str = "",
    using: str | None = None,
) -> BackfillResult:
    """:func:`backfill`, with the details (and a ``dry_run`` that creates nothing)."""
    settings = get_settings()
    alias = using or settings.DATABASE_ALIAS
    limit = _validate(start, end, limit, queue, settings.BACKFILL_LIMIT)
    conn = connections[alias]
    with transaction.atomic(using=alias), conn.cursor() as cursor:
        # the lock a planner takes: it skips the schedule until this commits
        schedule = (
            Schedule.objects.using(alias)
            .select_for_update(no_key=True)
            .filter(tenant=tenant, name=schedule_name)
            .first()
        )
        if schedule is None:
            owner = f" of tenant {tenant!r}" if tenant else ""
            raise ValidationError(f"schedule: no schedule named {schedule_name!r}{owner}")
        sid, name, job, own_queue = schedule.pk, schedule.name, schedule.job, schedule.queue
        cursor.execute(UNPLANNED_SQL, {"id": sid})
        unplanned, now = cursor.fetchone()
        nfa = schedule.next_fire_at
        try:
            grid = schedule.get_timetable()  # the planner's own timetable
        except timetable.TimetableError as exc:
            raise ValidationError(f"schedule {name!r} has no usable timetable: {exc}") from None
        # decided occurrences only: due by now, and before the planner's next one
        horizon = min(t for t in (end, now, nfa, unplanned) if t is not None)
        total = grid.count(start, horizon) if horizon > start else 0
        span = {"id": sid, "start": start, "end": horizon}
        cursor.execute(EXISTING_COUNT_SQL, span)
        (have,) = cursor.fetchone()
        if total - have > limit:  # at least this many: refuse before reading or enumerating
            raise _refused(name, start, end, total - have, limit, at_least=True)
        if total > MAX_BACKFILL_SCAN:  # mostly runs already: still too many to look through
            raise BackfillRefused(
                f"backfill of {name!r} refused: [{start.isoformat()}, {end.isoformat()}) holds "
                f"{total} occurrences, more than the {MAX_BACKFILL_SCAN} one backfill looks "
                "through; backfill a narrower range",
                count=total,
                limit=MAX_BACKFILL_SCAN,
            )
        cursor.execute(EXISTING_SQL, span)
        existing = {r[0] for r in cursor.fetchall()}
        missing = [t for t in grid.occurrences(start, horizon) if t not in existing]
        if len(missing) > limit:
            raise _refused(name, start, end, len(missing), limit)
        result = BackfillResult(name, 0, total, total - len(missing), horizon)
        if dry_run or not missing:
            return BackfillResult(
                name, len(missing) if dry_run else 0, total, result.already, horizon
            )
        defaults = job_defaults(job, settings)
        params: dict[str, Any] = {
            "id": sid,
            "times": missing,
            "queue": queue or own_queue or defaults.queue,
            "max_attempts": defaults.max_attempts,
            "timeout": defaults.timeout,
            "note": note,
        }
        # the months of a backfill may be long gone (retention) or never made
        cursor.execute(ENSURE_MONTHS_SQL, {"times": missing})
        created: list[datetime] = []
        for first in range(0, len(missing), BACKFILL_CHUNK):  # bounded statements
            chunk = missing[first : first + BACKFILL_CHUNK]
            cursor.execute(INSERT_SQL, {**params, "times": chunk})
            created.extend(r[0] for r in cursor.fetchall())
        taken = _take_from_ledger(cursor, sid, grid, created)
        cursor.execute(queries.get("wake_executors"), {"payload": "backfill"})
        counted = sum(n for reason, n in taken.items() if reason in COUNTED_REASONS)
        if counted:
            cursor.execute(
                "UPDATE pgsched_schedule SET skipped_occurrences = skipped_occurrences - %s"
                " WHERE id = %s",
                [counted, sid],
            )
        labels = (queue or own_queue or defaults.queue, job, schedule.kind)
        transaction.on_commit(
            lambda: events.occurrences_backfilled.send(
                sender=BackfillResult,
                schedule=name,
                labels=labels,
                created=len(created),
                taken=taken,
            ),
            using=alias,
            robust=True,
        )
    return BackfillResult(name, len(created), total, result.already, horizon, dict(taken))


def _take_from_ledger(
    cursor: Any, schedule_id: int, grid: timetable.Timetable, points: list[datetime]
) -> Counter[str]:
    """Carve ``points`` (now runs) out of the schedule's ranges; by reason, how many."""
    taken: Counter[str] = Counter()
    if not points:
        return taken
    cursor.execute(RANGES_SQL, {"id": schedule_id, "first": min(points), "last": max(points)})
    for range_id, first, last, count, reason in cursor.fetchall():
        inside = [p for p in points if first <= p <= last]
        if not inside:
            continue
        pieces = ranges.carve(grid, Skipped(first, last, count, reason), inside)
        taken[reason] += count - sum(p.count for p in pieces)
        cursor.execute("DELETE FROM pgsched_skipped_range WHERE id = %s", [range_id])
        for piece in pieces:
            cursor.execute(
                "INSERT INTO pgsched_skipped_range (schedule_id, first, last, count, reason)"
                " VALUES (%s, %s, %s, %s, %s)",
                [schedule_id, piece.first, piece.last, piece.count, piece.reason],
            )
    return taken


def _validate(start: Any, end: Any, limit: Any, queue: Any, default_limit: int) -> int:
    errors: dict[str, list[str]] = {}
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, datetime) or timezone.is_naive(value):
            errors[name] = [f"{name}: an aware datetime is required (times are UTC), got {value!r}"]
    if not errors and start >= end:
        errors["end"] = [f"end: must be after start ({start.isoformat()}), got {end.isoformat()}"]
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_BACKFILL
    ):
        errors["limit"] = [f"limit: an integer from 1 to {MAX_BACKFILL} is required, got {limit!r}"]
    if queue is not None:
        try:
            validate_queue(queue)
        except ValidationError as exc:
            errors["queue"] = exc.messages
    if errors:
        raise ValidationError(errors)
    return default_limit if limit is None else int(limit)


def _refused(
    name: str, start: datetime, end: datetime, count: int, limit: int, *, at_least: bool = False
) -> BackfillRefused:
    many = f"at least {count}" if at_least else str(count)
    return BackfillRefused(
        f"backfill of {name!r} refused: [{start.isoformat()}, {end.isoformat()}) holds {many} "
        f"occurrences without a run, more than the limit of {limit}; pass a limit of at least "
        f"{count} to create them all, or narrow the range",
        count=count,
        limit=limit,
    )
