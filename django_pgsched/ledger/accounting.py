"""The accounting of a schedule's occurrences: each one a run or a ledger point, never both.

:func:`check` is pure (it takes the timetable, the runs and the ranges): the
fault suite's invariant runs it over rows it read with SQL, the tests and
:func:`account` over the ORM. For the occurrences ``t`` of the timetable with
``start <= t < end``:

* each is exactly one of: a run that is not ``missed``, or a point of one
  ledger range (never both, never neither);
* a ``missed`` run's occurrence is a point of a ``deadline`` range, and a
  ``deadline`` point is a ``missed`` run;
* every range is pure: ``count`` is the number of occurrences in
  ``[first, last]``; ranges do not overlap; runs are on the timetable.

``dst_gap`` ranges count local times that never existed (no instant of the
timetable), so they take no part beyond being listed.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..statuses import COUNTED_REASONS, SkipReason
from ..timing.timetable import Timetable

if TYPE_CHECKING:
    from ..models import Schedule

SECOND = timedelta(seconds=1)
COUNTED = frozenset(COUNTED_REASONS)  # the reasons skipped_occurrences counts
MISSED = "missed"  # the run status of a run not started by its start deadline
MAX_PROBLEMS = 50  # a report lists at most this many


@dataclass(frozen=True)
class Range:
    first: datetime
    last: datetime
    count: int
    reason: str


@dataclass
class Report:
    """What :func:`check` found for one schedule and window."""

    occurrences: int = 0
    runs: int = 0  # occurrences that are runs (not missed)
    ledgered: int = 0  # occurrences in ranges (including the missed runs' deadline points)
    missed: int = 0  # runs missed at their deadline (each also a deadline point)
    by_reason: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)


def check(
    grid: Timetable,
    start: datetime,
    end: datetime,
    runs: Mapping[datetime, str],
    ranges: Iterable[Range],
) -> Report:
    """Account for every occurrence in ``[start, end)``; ``runs`` maps scheduled_for to status."""
    report = Report()
    spans = sorted((r for r in ranges if r.reason != SkipReason.DST_GAP), key=lambda r: r.first)
    for a, b in itertools.pairwise(spans):
        if b.first <= a.last:
            report.problem(f"ranges overlap: {_span(a)} and {_span(b)}")
    for r in spans:
        points = grid.count(r.first, r.last + SECOND)
        if points != r.count or not grid.contains(r.first) or not grid.contains(r.last):
            report.problem(
                f"range {_span(r)} is not pure: {points} occurrence(s) from first to last"
            )
    firsts = [r.first for r in spans]

    def covering(t: datetime) -> Range | None:
        i = bisect_right(firsts, t) - 1
        return spans[i] if i >= 0 and spans[i].last >= t else None

    for t in runs:
        if start <= t < end and not grid.contains(t):
            report.problem(f"run at {t.isoformat()} is not an occurrence of the timetable")
    for t in grid.occurrences(start, end):
        report.occurrences += 1
        status = runs.get(t)
        span = covering(t)
        if span is not None:
            report.ledgered += 1
            report.by_reason[span.reason] = report.by_reason.get(span.reason, 0) + 1
        if status == MISSED:
            report.missed += 1
            if span is None or span.reason != SkipReason.DEADLINE:
                report.problem(f"{t.isoformat()}: a missed run outside a deadline range")
        elif status is not None:
            report.runs += 1
            if span is not None:
                report.problem(f"{t.isoformat()}: a run ({status}) and in {_span(span)}")
        elif span is None:
            report.problem(f"{t.isoformat()}: neither a run nor in the ledger")
        elif span.reason == SkipReason.DEADLINE:
            report.problem(f"{t.isoformat()}: in {_span(span)} without a missed run")
    return report


def _span(r: Range) -> str:
    return f"[{r.first.isoformat()} .. {r.last.isoformat()}] x{r.count} {r.reason}"


def ranges_of(rows: Iterable[Sequence[Any]]) -> list[Range]:
    """``(first, last, count, reason)`` rows as ranges."""
    return [Range(first, last, count, reason) for first, last, count, reason in rows]


def account(schedule: Schedule, start: datetime, end: datetime) -> Report:
    """:func:`check` for ``schedule`` over ``[start, end)``, read with the ORM."""
    from ..models import JobRun
    from .models import SkippedRange

    runs = dict(
        JobRun.objects.filter(
            schedule=schedule, scheduled_for__gte=start, scheduled_for__lt=end
        ).values_list("scheduled_for", "status")
    )
    ranges = ranges_of(
        SkippedRange.objects.filter(schedule=schedule, last__gte=start, first__lt=end).values_list(
            "first", "last", "count", "reason"
        )
    )
    return check(schedule.get_timetable(), start, end, runs, ranges)
