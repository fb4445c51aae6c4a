"""Spans of a timetable: occurrences that do not run, as compact, pure ranges.

Pure, no database. A span ``(first, last, count, reason)`` (:class:`Skipped`)
covers every occurrence of the timetable from ``first`` to ``last`` inclusive,
and ``count`` is their number. What the planner's policies, the guard and the
ledger's backfill share: below all three (``timing/`` imports nothing above it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .timetable import Timetable, TimetableError


@dataclass(frozen=True)
class Skipped:
    """Occurrences that do not run, for one reason: the ledger's unit (a ``SkippedRange``).

    Every occurrence of the timetable from ``first`` to ``last`` (inclusive),
    ``count`` of them. ``reason`` is a :class:`~django_pgsched.statuses.SkipReason`.
    (``dst_gap``: local times that never existed; ``first`` and ``last`` are the
    instants they would have had, see :class:`~django_pgsched.timing.timetable.GapSkip`.)
    """

    first: datetime
    last: datetime
    count: int
    reason: str


SECOND = timedelta(seconds=1)
_EPOCH = datetime(1, 1, 2, tzinfo=UTC)  # before every occurrence


def previous(grid: Timetable, t: datetime) -> datetime | None:
    """The occurrence just before ``t`` (None if there is none)."""
    found = grid.latest(_EPOCH, t, 1)
    return found[0] if found else None


def following(grid: Timetable, t: datetime) -> datetime | None:
    """The occurrence just after ``t`` (None past the supported range)."""
    try:
        return grid.next_after(t)
    except TimetableError:
        return None


def group(grid: Timetable, points: Iterable[datetime], reason: str) -> list[Skipped]:
    """Occurrences (on ``grid``) as the fewest spans: consecutive ones share a span."""
    spans: list[Skipped] = []
    for t in sorted(set(points)):
        last = spans[-1] if spans else None
        if last is not None and following(grid, last.last) == t:
            spans[-1] = Skipped(last.first, t, last.count + 1, reason)
        else:
            spans.append(Skipped(t, t, 1, reason))
    return spans


def carve(grid: Timetable, span: Skipped, points: Sequence[datetime]) -> list[Skipped]:
    """What is left of ``span`` once ``points`` (occurrences inside it) are taken out."""
    taken = sorted({p for p in points if span.first <= p <= span.last})
    if not taken:
        return [span]
    pieces: list[Skipped] = []
    start = span.first
    for p in taken:
        if start < p:
            pieces.append(_between(grid, start, p, span.reason))
        after = following(grid, p)
        if after is None or after > span.last:
            return pieces
        start = after
    pieces.append(_between(grid, start, span.last + SECOND, span.reason))
    return pieces


def _between(grid: Timetable, start: datetime, end: datetime, reason: str) -> Skipped:
    """The span of the occurrences in ``[start, end)`` (``start`` is one; there is one)."""
    last = grid.latest(start, end, 1)[0]
    return Skipped(start, last, grid.count(start, end), reason)
