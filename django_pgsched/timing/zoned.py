"""Cron in a named time zone, with an explicit policy for the gap and the fold.

A cron expression read in a zone matches *wall-clock* times. Mapping them to
instants is one-to-one except at the zone's transitions (see
:mod:`django_pgsched.timing.zones`):

* **Gap** (clocks go forward, e.g. Berlin 02:00 → 03:00): the wall-clock times
  in between never happen. ``dst_gap="shift"`` (the default) fires them at the
  first instant after the gap, the transition itself; all the matching times of
  one gap become that one occurrence, and if the first wall-clock time after
  the gap matches anyway they are all part of it. ``dst_gap="skip"`` fires none
  of them. Either way every matching wall-clock time of a gap that does not
  become an occurrence of its own is reported by :meth:`ZonedCronTimetable.gap_skips`
  (the planner adds them to ``skipped_occurrences`` with the reason ``dst_gap``).
* **Fold** (clocks go back, e.g. New York 02:00 → 01:00): the wall-clock times
  in between happen twice, first at the earlier offset, then at the later one.
  ``dst_fold="first"`` (the default) fires each matching time at its first
  instant, ``"second"`` at its second, ``"both"`` at both. "First" and
  "second" are chronological, never "summer" or "winter" (Europe/Dublin's
  negative summer time reads the same way).

The policies apply to every matching wall-clock time, whatever the field
pattern: ``*/30 * 2 * * *`` has 120 matching times in a one-hour gap or fold,
``* * * * *`` has 60, ``30 2 * * *`` has one.

Every instant returned is canonical UTC (whole seconds, ``tzinfo=UTC``).
Arithmetic is by pieces: between two transitions the offset is constant, so
the wall-clock timetable (:class:`~django_pgsched.timing.timetable.CronTimetable`
on the local scale) answers for the whole piece at once. Counting over a range
costs O(transitions + months), never a step per occurrence.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import ClassVar

from . import timetable, zones
from .cron import CronFields
from .timetable import CronTimetable, GapSkip, Timetable, TimetableError

__all__ = [
    "DST_FOLD_DEFAULT",
    "DST_FOLD_POLICIES",
    "DST_GAP_DEFAULT",
    "DST_GAP_POLICIES",
    "Annotation",
    "ZonedCronTimetable",
    "cron",
]

DST_GAP_POLICIES = ("shift", "skip")
DST_FOLD_POLICIES = ("first", "second", "both")
DST_GAP_DEFAULT = "shift"  # a daily job still runs on the day the clocks go forward
DST_FOLD_DEFAULT = "first"  # ... and runs once on the day they go back
_DAY = 86_400
_MARGIN = 2 * _DAY + 3600  # more than any offset change (Pacific/Apia: 24 h)


@dataclass(frozen=True, slots=True)
class _Piece:
    """Instants ``[lo, hi)`` at one offset, all of them in the timetable's wall-clock range."""

    lo: int
    hi: int
    offset: int
    shift: bool  # a gap's matching times fire at ``lo`` (the transition)


@dataclass(frozen=True, slots=True)
class Annotation:
    """An occurrence as a person reads it: its wall-clock time and what a transition did to it."""

    at: datetime  # UTC
    local: datetime  # aware, in the zone (``fold`` set on the second pass of a fold)
    kind: str  # "regular", "shifted", "merged", "fold_first", "fold_second"
    note: str  # "" for a regular occurrence

    @property
    def affected(self) -> bool:
        return self.kind != "regular"


class ZonedCronTimetable(Timetable):
    """The occurrences of a cron expression read in ``zone``; build it with :func:`cron`."""

    kind: ClassVar[str] = "cron"

    def __init__(self, base: CronTimetable, zone: str, dst_gap: str, dst_fold: str) -> None:
        self.base = base
        self.zone_name = zone
        self.zone = zones.get_zone(zone)
        self.dst_gap = dst_gap
        self.dst_fold = dst_fold
        self._pieces = functools.lru_cache(maxsize=512)(self._pieces_of_year)

    @property
    def expression(self) -> str:
        return self.base.expression

    @property
    def fields(self) -> CronFields:
        return self.base.fields

    def __repr__(self) -> str:
        return (
            f"ZonedCronTimetable({self.expression!r}, {self.zone_name!r}, "
            f"dst_gap={self.dst_gap!r}, dst_fold={self.dst_fold!r})"
        )

    def _key(self) -> tuple[object, ...]:
        return (self.base, self.zone_name, self.dst_gap, self.dst_fold)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ZonedCronTimetable) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    # -- the pieces of a year --------------------------------------------------------

    def _pieces_of_year(self, year: int) -> tuple[_Piece, ...]:
        """The pieces covering the UTC year ``year``, less the fold passes the policy drops."""
        lo, hi = zones.year_start(year), zones.year_start(year + 1)
        near = zones.transitions(self.zone, lo - _MARGIN, hi + _MARGIN)
        cuts = {lo, hi}
        dropped: list[tuple[int, int]] = []
        for t in near:
            cuts.add(t.at)
            if t.change < 0 and self.dst_fold != "both":
                # the second pass is [at, at + |change|), the first [at - |change|, at)
                span = (
                    (t.at, t.at - t.change)
                    if self.dst_fold == "first"
                    else (
                        t.at + t.change,
                        t.at,
                    )
                )
                dropped.append(span)
                cuts.update(span)
        points = sorted(c for c in cuts if lo <= c <= hi)
        pieces = []
        for a, b in itertools.pairwise(points):
            if any(x <= a < y for x, y in dropped):
                continue
            offset = self._offset(near, a)
            shift = False
            if self.dst_gap == "shift":
                gap = next((g for g in near if g.at == a and g.change > 0), None)
                shift = gap is not None and self._gap_counts(gap)[1]
            pieces.append(_Piece(a, b, offset, shift))
        return tuple(pieces)

    def _offset(self, near: list[zones.Transition], x: int) -> int:
        offset = None
        for t in near:
            if t.at <= x:
                offset = t.after
            elif offset is None:
                return t.before
            else:
                break
        return offset if offset is not None else zones.offset_at(self.zone, x)

    def _gap_counts(self, t: zones.Transition) -> tuple[int, bool]:
        """(matching wall-clock times in the gap of ``t``, whether one fires at ``t.at``)."""
        matched = self.base.count_seconds(t.at + t.before, t.at + t.after)
        shifted = (
            self.dst_gap == "shift" and matched > 0 and not self.base.matches_second(t.at + t.after)
        )
        return matched, shifted

    def _years(self, lo: int, hi: int) -> Iterator[_Piece]:
        """The pieces overlapping instants ``[lo, hi)``, ascending."""
        first = max(zones.FIRST_YEAR, _year(lo))
        for year in range(first, min(zones.LAST_YEAR, _year(hi - 1)) + 1):
            for p in self._pieces(year):
                if p.hi > lo and p.lo < hi:
                    yield p

    # -- the integer scale -----------------------------------------------------------

    def count_seconds(self, lo: int, hi: int) -> int:
        n = 0
        for p in self._years(lo, hi):
            a, b = max(p.lo, lo), min(p.hi, hi)
            n += self.base.count_seconds(a + p.offset, b + p.offset)
            n += p.shift and lo <= p.lo
        return n

    def ascending_seconds(self, lo: int) -> Iterator[int]:
        year = max(zones.FIRST_YEAR, _year(lo))
        while year <= zones.LAST_YEAR:
            for p in self._pieces(year):
                if p.hi <= lo:
                    continue
                if p.shift and p.lo >= lo:
                    yield p.lo
                stop = p.hi + p.offset
                for x in self.base.ascending_seconds(max(p.lo, lo) + p.offset):
                    if x >= stop:
                        break
                    yield x - p.offset
            year += 1

    def descending_seconds(self, hi: int) -> Iterator[int]:
        year = min(zones.LAST_YEAR, _year(hi - 1))
        while year >= zones.FIRST_YEAR:
            for p in reversed(self._pieces(year)):
                if p.lo >= hi:
                    continue
                stop = p.lo + p.offset
                for x in self.base.descending_seconds(min(p.hi, hi) + p.offset):
                    if x < stop:
                        break
                    yield x - p.offset
                if p.shift:
                    yield p.lo
            year -= 1

    def matches_second(self, x: int) -> bool:
        for p in self._years(x, x + 1):
            return (p.shift and p.lo == x) or self.base.matches_second(x + p.offset)
        return False

    # -- the Timetable API -----------------------------------------------------------

    def next_after(self, t: datetime) -> datetime:
        lo = _floor(t) + 1
        for x in self.ascending_seconds(lo):
            return zones.to_datetime(x)
        raise _beyond(t)

    def following(self, after: datetime, count: int) -> list[datetime]:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        out: list[datetime] = []
        for x in self.ascending_seconds(_floor(after) + 1) if count else ():
            out.append(zones.to_datetime(x))
            if len(out) == count:
                return out
        if len(out) < count:
            raise _beyond(after)
        return out

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        lo, hi = _ceil(start), _ceil(end)
        for x in self.ascending_seconds(lo) if lo < hi else ():
            if x >= hi:
                return
            yield zones.to_datetime(x)

    def count(self, start: datetime, end: datetime) -> int:
        return self.count_seconds(_ceil(start), _ceil(end))

    def latest(self, start: datetime, end: datetime, k: int) -> list[datetime]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        lo, hi = _ceil(start), _ceil(end)
        found: list[int] = []
        for x in self.descending_seconds(hi) if k and lo < hi else ():
            if x < lo:
                break
            found.append(x)
            if len(found) == k:
                break
        return [zones.to_datetime(x) for x in reversed(found)]

    def contains(self, t: datetime) -> bool:
        u = timetable.canonical(t)
        return u.microsecond == 0 and self.matches_second(_floor(u))

    def gap_skips(self, start: datetime, end: datetime) -> list[GapSkip]:
        lo, hi = _ceil(start), _ceil(end)
        out = []
        for t in zones.transitions(self.zone, lo, hi) if lo < hi else ():
            if t.change <= 0:
                continue
            matched, shifted = self._gap_counts(t)
            skipped = matched - shifted
            if not skipped:
                continue
            gap_lo, gap_hi = t.at + t.before, t.at + t.after
            ascending = self.base.ascending_seconds(gap_lo)
            first = next(ascending)
            if shifted:  # the earliest fires at the transition; the rest are skipped
                first = next(ascending)
            last = next(self.base.descending_seconds(gap_hi))
            out.append(
                GapSkip(
                    transition=zones.to_datetime(t.at),
                    count=skipped,
                    first=zones.to_datetime(first - t.before),
                    last=zones.to_datetime(last - t.before),
                    first_local=zones.to_datetime(first).replace(tzinfo=None),
                    last_local=zones.to_datetime(last).replace(tzinfo=None),
                )
            )
        return out

    # -- words -----------------------------------------------------------------------

    def annotate(self, t: datetime) -> Annotation:
        """What a transition did to occurrence ``t`` (for the admin and ``pgsched_cron``)."""
        u = timetable.canonical(t)
        x = _floor(u)
        local = u.astimezone(self.zone)
        for tr in zones.transitions(self.zone, x, x + 1):
            if tr.change > 0:
                matched, shifted = self._gap_counts(tr)
                gap = _gap_words(tr)
                if shifted:
                    return Annotation(u, local, "shifted", f"shifted: {gap} (dst_gap=shift)")
                if matched:
                    how = "shift" if self.dst_gap == "shift" else "skip"
                    return Annotation(
                        u, local, "merged", f"after {gap}: {matched} skipped (dst_gap={how})"
                    )
        twin = local.replace(fold=1 - local.fold)
        if twin.utcoffset() != local.utcoffset():
            which = "second" if local.fold else "first"
            words = f"{which} of two {local:%H:%M:%S} (clocks went back; dst_fold={self.dst_fold})"
            return Annotation(u, local, f"fold_{which}", words)
        return Annotation(u, local, "regular", "")


def _gap_words(t: zones.Transition) -> str:
    a = zones.to_datetime(t.at + t.before)
    b = zones.to_datetime(t.at + t.after - 1)
    return f"{a:%H:%M:%S}–{b:%H:%M:%S} did not exist"


def _year(x: int) -> int:
    return date.fromordinal(min(max(1, x // _DAY), date.max.toordinal())).year


def _floor(t: datetime) -> int:
    return zones.from_datetime(timetable.canonical(t))


def _ceil(t: datetime) -> int:
    u = timetable.canonical(t)
    return zones.from_datetime(u) + (u.microsecond > 0)


def _beyond(t: datetime) -> TimetableError:
    return TimetableError(
        "cron",
        "timestamp_out_of_range",
        f"cron: no occurrence after {t.isoformat()} within the supported range (year 9998)",
    )


def validate_policy(field: str, value: object) -> str:
    """``value`` if it is one of ``field``'s policies; ``TimetableError`` naming both if not."""
    allowed = DST_GAP_POLICIES if field == "dst_gap" else DST_FOLD_POLICIES
    if not isinstance(value, str) or value not in allowed:
        raise TimetableError(
            field, f"{field}_invalid", f"{field}: {value!r} is not one of {', '.join(allowed)}"
        )
    return value


@functools.lru_cache(maxsize=4096)
def _zoned(expression: str, zone: str, dst_gap: str, dst_fold: str) -> ZonedCronTimetable:
    return ZonedCronTimetable(timetable.cron(expression), zone, dst_gap, dst_fold)


def cron(
    expression: str,
    timezone: str = zones.DEFAULT_ZONE,
    dst_gap: str = DST_GAP_DEFAULT,
    dst_fold: str = DST_FOLD_DEFAULT,
) -> Timetable:
    """The timetable of ``expression`` read in ``timezone``; ``TimetableError`` if invalid. Cached.

    ``"UTC"`` gives the plain :class:`~django_pgsched.timing.timetable.CronTimetable`.
    """
    validate_policy("dst_gap", dst_gap)
    validate_policy("dst_fold", dst_fold)
    if timezone == zones.DEFAULT_ZONE:
        return timetable.cron(expression)
    zones.validate_zone(timezone)
    return _zoned(expression, timezone, dst_gap, dst_fold)


def annotate(grid: Timetable, t: datetime) -> Annotation:
    """``t`` as a person reads it in ``grid``'s zone (UTC for UTC and interval timetables)."""
    if isinstance(grid, ZonedCronTimetable):
        return grid.annotate(t)
    u = timetable.canonical(t)
    return Annotation(u, u, "regular", "")


def forget() -> None:
    """Drop cached timetables and zones (tests that swap zone files)."""
    _zoned.cache_clear()
    zones.forget_zones()
