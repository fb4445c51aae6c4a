"""Occurrence arithmetic for cron and interval schedules: pure Python, no Django.

A :class:`Timetable` is a grid of instants. Every instant it returns is
*canonical*: an aware datetime in UTC (``datetime.timezone.utc``) with
``microsecond == 0``, so two computations of the same occurrence compare equal
and can serve as a unique key. Inputs must be aware datetimes in any offset
(naive ones raise ``ValueError``) and may carry microseconds: ``next_after`` of
12:00:00.5 for a per-second cron is 12:00:01.

**Cron** (:func:`cron`, syntax in :mod:`django_pgsched.timing.cron`): an instant
matches when its second, minute, hour and month are in their sets and its day
matches. Day matching follows Vixie cron (also Debian cron, cronie and cronsim):

* a day field is *restricted* when its text does not start with ``*``;
* if **both** day-of-month and day-of-week are restricted, a day matches when
  **either** matches: ``0 0 13 * FRI`` fires on every 13th *and* every Friday;
* otherwise a day must match **both** sets. An unrestricted ``*`` matches every
  day, so this means "the restricted field, if any, must match"; a step such as
  ``*/2`` still filters but does not switch on the OR rule:
  ``0 0 */2 * MON`` fires on Mondays that fall on odd days of the month.

croniter differs on that last point (it treats any field whose expansion is not
the full set as restricted, so it reads ``*/2 … MON`` with OR); we use croniter
only to expand the fields and do the arithmetic here.

**Interval** (:func:`interval`): the instants ``anchor + k·every`` for every
integer ``k``, including negative ones, so the grid extends before the
anchor. ``every`` is a whole number of seconds from 1 to 366 days.

Performance (this is the planner's hot path): no per-occurrence croniter calls.
Within a day the matching times are the lexicographic product of the sorted
hour, minute and second tuples, so the i-th time of day and the number of times
before a given second are mixed-radix arithmetic with ``bisect``. Days come from
a table of matching days for each of the 28 month shapes (weekday of the 1st,
month length). So ``count`` is O(months in the range) and never enumerates,
``latest(k)`` is O(k + days walked), ``next_after`` is a few microseconds for
common expressions, and interval arithmetic is O(1) on integer seconds.
"""

from __future__ import annotations

import abc
import functools
import math
from bisect import bisect_left, bisect_right
from calendar import isleap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import ClassVar, NoReturn

from .cron import CronFields, parse
from .errors import MAX_CRON_LENGTH as MAX_CRON_LENGTH
from .errors import TimetableError as TimetableError

MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)

_DAY = 86_400
_MAX_ORDINAL = date.max.toordinal()
_LENGTHS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_Pos = tuple[int, int, int, int]  # (year, month, day, second of day)


def canonical(t: datetime) -> datetime:
    """``t`` converted to UTC (microseconds kept); ``ValueError`` if it is naive."""
    if not isinstance(t, datetime):
        raise TypeError(f"expected an aware datetime, got {type(t).__name__}")
    if t.tzinfo is UTC:
        return t
    if t.utcoffset() is None:
        raise ValueError(f"naive datetime {t.isoformat()}: a timezone offset is required (UTC)")
    try:
        return t.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            f"{t.isoformat()} is outside the supported range (years 1 to 9999 UTC)"
        ) from None


def _seconds(t: datetime) -> tuple[int, int]:
    """``t`` as (whole seconds on the ordinal day scale, rounded down; microseconds)."""
    u = canonical(t)
    return u.toordinal() * _DAY + u.hour * 3600 + u.minute * 60 + u.second, u.microsecond


def _floor(t: datetime) -> int:
    return _seconds(t)[0]


def _ceil(t: datetime) -> int:
    x, micro = _seconds(t)
    return x + (micro > 0)


def _instant(y: int, m: int, d: int, tod: int) -> datetime:
    h, rest = divmod(tod, 3600)
    return datetime(y, m, d, h, rest // 60, rest % 60, tzinfo=UTC)


def _position(x: int) -> _Pos:
    """The (year, month, day, second of day) of second ``x``, clamped to the end of 9999."""
    o, tod = divmod(x, _DAY)
    if o > _MAX_ORDINAL:
        return (9999, 12, 31, _DAY)
    d = date.fromordinal(o)
    return (d.year, d.month, d.day, tod)


def _beyond(field: str, t: datetime) -> TimetableError:
    return TimetableError(
        field,
        "timestamp_out_of_range",
        f"{field}: no occurrence after {t.isoformat()} within the supported range (year 9999)",
    )


class Timetable(abc.ABC):
    """The occurrences of a schedule; every returned instant is canonical UTC."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def next_after(self, t: datetime) -> datetime:
        """The first occurrence strictly after ``t``."""

    @abc.abstractmethod
    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        """The occurrences ``o`` with ``start <= o < end``, ascending."""

    @abc.abstractmethod
    def count(self, start: datetime, end: datetime) -> int:
        """The number of occurrences in ``[start, end)``, without enumerating them."""

    @abc.abstractmethod
    def latest(self, start: datetime, end: datetime, k: int) -> list[datetime]:
        """The up-to-``k`` most recent occurrences in ``[start, end)``, ascending."""

    @abc.abstractmethod
    def contains(self, t: datetime) -> bool:
        """Whether ``t`` is an occurrence (a whole second on the grid)."""

    def following(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` occurrences strictly after ``after``, ascending."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        out: list[datetime] = []
        t = after
        while len(out) < count:
            t = self.next_after(t)
            out.append(t)
        return out

    def gap_skips(self, start: datetime, end: datetime) -> list[GapSkip]:
        """Local times skipped by a clock change in ``[start, end)`` (none outside named zones)."""
        return []


@dataclass(frozen=True, slots=True)
class GapSkip:
    """Matching local times that a zone's clocks skipped and that did not run (``dst_gap``).

    They are counted at the instant the clocks went forward (``transition``).
    ``first_local`` and ``last_local`` are the earliest and latest of them as
    wall-clock times (naive: they never existed); ``first`` and ``last`` are the
    UTC instants those wall-clock times would have had at the offset in force
    before the change (how ``datetime(..., tzinfo=zone)`` reads a time in a gap).
    """

    transition: datetime
    count: int
    first: datetime
    last: datetime
    first_local: datetime
    last_local: datetime


class CronTimetable(Timetable):
    """The occurrences of a parsed cron expression; build it with :func:`cron`.

    Within a day the matching times form the product of the hour, minute and second sets
    in lexicographic order, so the i-th time of day and the number of times
    before a given second are plain mixed-radix arithmetic on sorted tuples.
    """

    kind: ClassVar[str] = "cron"

    def __init__(self, fields: CronFields) -> None:
        self.fields = fields
        self._h = tuple(sorted(fields.hours))
        self._m = tuple(sorted(fields.minutes))
        self._s = tuple(sorted(fields.seconds))
        self._per_hour = len(self._m) * len(self._s)
        self._per_day = len(self._h) * self._per_hour
        # the matching days of a month, by (day of week of the 1st, length of the month)
        self._shapes = {
            (first, length): self._matching_days(first, length)
            for first in range(7)
            for length in (28, 29, 30, 31)
        }

    @property
    def expression(self) -> str:
        return self.fields.expression

    def __repr__(self) -> str:
        return f"CronTimetable({self.expression!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CronTimetable) and other.fields == self.fields

    def __hash__(self) -> int:
        return hash(self.fields)

    def next_after(self, t: datetime) -> datetime:
        for pos in self._ascending(_floor(t) + 1):
            return _instant(*pos)
        raise _beyond("cron", t)

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        lo, hi = _ceil(start), _ceil(end)
        stop = _position(hi)
        for pos in self._ascending(lo) if lo < hi else ():
            if pos >= stop:
                return
            yield _instant(*pos)

    def count(self, start: datetime, end: datetime) -> int:
        return self.count_seconds(_ceil(start), _ceil(end))

    def latest(self, start: datetime, end: datetime, k: int) -> list[datetime]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        lo, hi = _ceil(start), _ceil(end)
        floor, found = _position(lo), []
        for pos in self._descending(hi) if k and lo < hi else ():
            if pos < floor:
                break
            found.append(pos)
            if len(found) == k:
                break
        return [_instant(*pos) for pos in reversed(found)]

    def contains(self, t: datetime) -> bool:
        u = canonical(t)
        return (
            u.microsecond == 0
            and u.second in self.fields.seconds
            and u.minute in self.fields.minutes
            and u.hour in self.fields.hours
            and self._matches(u.year, u.month, u.day)
        )

    # -- on the integer scale (whole seconds: ordinal day × 86400 + second of day) ----
    # The zoned timetables (timing/zoned.py) read wall-clock times on this scale.

    def count_seconds(self, lo: int, hi: int) -> int:
        """The number of matching seconds ``x`` with ``lo <= x < hi``, without enumerating."""
        if lo >= hi:
            return 0
        (ay, am, ad, a_tod), (by, bm, bd, b_tod) = _position(lo), _position(hi)
        # every occurrence on the days [a, b), minus those on a before lo, plus those on b before hi
        n = self._per_day * self._count_days((ay, am, ad), (by, bm, bd))
        n -= self._matches(ay, am, ad) * self._tods_below(a_tod)
        return n + self._matches(by, bm, bd) * self._tods_below(b_tod)

    def matches_second(self, x: int) -> bool:
        """Whether second ``x`` of the scale matches."""
        y, m, d, tod = _position(x)
        if tod >= _DAY:
            return False
        h, rest = divmod(tod, 3600)
        return (
            rest % 60 in self.fields.seconds
            and rest // 60 in self.fields.minutes
            and h in self.fields.hours
            and self._matches(y, m, d)
        )

    def ascending_seconds(self, lo: int) -> Iterator[int]:
        """The matching seconds from ``lo`` (inclusive) on, ascending."""
        for y, m, d, tod in self._ascending(lo):
            yield date(y, m, d).toordinal() * _DAY + tod

    def descending_seconds(self, hi: int) -> Iterator[int]:
        """The matching seconds before ``hi`` (exclusive), latest first."""
        for y, m, d, tod in self._descending(hi):
            yield date(y, m, d).toordinal() * _DAY + tod

    # -- days ------------------------------------------------------------------

    def _matching_days(self, first: int, length: int) -> tuple[int, ...]:
        f = self.fields
        either = f.dom_restricted and f.dow_restricted  # Vixie's OR rule
        days = []
        for day in range(1, length + 1):
            dom, dow = day in f.days_of_month, (first + day - 1) % 7 in f.days_of_week
            if (dom or dow) if either else (dom and dow):
                days.append(day)
        return tuple(days)

    def _month_days(self, y: int, m: int) -> tuple[int, ...]:
        """The matching days of month ``m`` of year ``y``, ascending."""
        if m not in self.fields.months:
            return ()
        length = _LENGTHS[m] if m != 2 else 28 + isleap(y)
        return self._shapes[date(y, m, 1).toordinal() % 7, length]  # ordinal 7 is a Sunday

    def _matches(self, y: int, m: int, d: int) -> bool:
        days = self._month_days(y, m)
        i = bisect_left(days, d)
        return i < len(days) and days[i] == d

    def _count_days(self, a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
        """The number of matching days in ``[a, b)``: O(months)."""
        (y, m, d), n = a, 0
        while (y, m) <= b[:2]:
            days = self._month_days(y, m)
            n += bisect_left(days, b[2] if (y, m) == b[:2] else 32) - bisect_left(days, d)
            y, m, d = (y + 1, 1, 1) if m == 12 else (y, m + 1, 1)
        return n

    # -- times of day (seconds since midnight) ---------------------------------

    def _tod(self, i: int) -> int:
        """The i-th matching time of day, 0 <= i < per_day."""
        h, rest = divmod(i, self._per_hour)
        m, s = divmod(rest, len(self._s))
        return self._h[h] * 3600 + self._m[m] * 60 + self._s[s]

    def _tods_below(self, x: int) -> int:
        """How many matching times of day are ``< x`` (0 <= x <= 86400)."""
        h, rest = divmod(x, 3600)
        m, s = divmod(rest, 60)
        n = bisect_left(self._h, h) * self._per_hour
        if h in self.fields.hours:
            n += bisect_left(self._m, m) * len(self._s)
            if m in self.fields.minutes:
                n += bisect_left(self._s, s)
        return n

    # -- walks -----------------------------------------------------------------

    def _ascending(self, lo: int) -> Iterator[_Pos]:
        """Occurrences from second ``lo`` (inclusive) to the end of year 9999."""
        y, m, d, tod = _position(lo)
        skip = self._tods_below(tod)  # on day d only
        while y <= 9999:
            days = self._month_days(y, m)
            for day in days[bisect_left(days, d) :]:
                for i in range(skip if day == d else 0, self._per_day):
                    yield y, m, day, self._tod(i)
            y, m, d = (y + 1, 1, 0) if m == 12 else (y, m + 1, 0)

    def _descending(self, hi: int) -> Iterator[_Pos]:
        """Occurrences before second ``hi`` (exclusive), latest first, down to year 1."""
        y, m, d, tod = _position(hi)
        keep = self._tods_below(tod)  # on day d only
        while y >= 1:
            days = self._month_days(y, m)
            for day in reversed(days[: bisect_right(days, d)]):
                for i in reversed(range(keep if day == d else self._per_day)):
                    yield y, m, day, self._tod(i)
            y, m, d = (y - 1, 12, 32) if m == 1 else (y, m - 1, 32)


class IntervalTimetable(Timetable):
    """The instants ``anchor + k·every`` for all integers ``k``; build with :func:`interval`."""

    kind: ClassVar[str] = "interval"

    def __init__(self, every: timedelta, anchor: datetime) -> None:
        self.every = validate_interval(every)
        self.anchor = validate_anchor(anchor)
        self._step = self.every // MIN_INTERVAL
        self._zero = _floor(self.anchor)

    def __repr__(self) -> str:
        return f"IntervalTimetable(every={self.every!r}, anchor={self.anchor.isoformat()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntervalTimetable) and (other.every, other.anchor) == (
            self.every,
            self.anchor,
        )

    def __hash__(self) -> int:
        return hash((self.every, self.anchor))

    def _at(self, k: int) -> datetime:
        o, tod = divmod(self._zero + k * self._step, _DAY)
        if not 1 <= o <= _MAX_ORDINAL:
            _fail("interval", "timestamp_out_of_range", "occurrence beyond the year 9999")
        d = date.fromordinal(o)
        return _instant(d.year, d.month, d.day, tod)

    def _bounds(self, start: datetime, end: datetime) -> tuple[int, int]:
        """The first and last ``k`` with ``start <= occurrence k < end``."""
        lo, hi = _ceil(start), _ceil(end)
        return -((self._zero - lo) // self._step), (hi - 1 - self._zero) // self._step

    def next_after(self, t: datetime) -> datetime:
        k = (_floor(t) - self._zero) // self._step + 1
        try:
            return self._at(k)
        except TimetableError:
            raise _beyond("interval", t) from None

    def occurrences(self, start: datetime, end: datetime) -> Iterator[datetime]:
        first, last = self._bounds(start, end)
        for k in range(first, last + 1):
            yield self._at(k)

    def count(self, start: datetime, end: datetime) -> int:
        first, last = self._bounds(start, end)
        return max(0, last - first + 1)

    def latest(self, start: datetime, end: datetime, k: int) -> list[datetime]:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        first, last = self._bounds(start, end)
        return [self._at(j) for j in range(max(first, last - k + 1), last + 1)]

    def contains(self, t: datetime) -> bool:
        x, micro = _seconds(t)
        return micro == 0 and (x - self._zero) % self._step == 0


@functools.lru_cache(maxsize=4096)
def _cron(expression: str) -> CronTimetable:
    return CronTimetable(parse(expression))


def cron(expression: str) -> CronTimetable:
    """The timetable of a cron expression; ``TimetableError`` if it is invalid. Cached."""
    if not isinstance(expression, str):
        _fail(
            "cron",
            "cron_invalid_type",
            f"expression must be a string, got {type(expression).__name__}",
        )
    return _cron(expression)


def interval(every: timedelta, anchor: datetime) -> IntervalTimetable:
    """The timetable ``anchor + k·every``; ``TimetableError`` if either is invalid."""
    return IntervalTimetable(every, anchor)


def _fail(field: str, code: str, detail: str) -> NoReturn:
    raise TimetableError(field, code, f"{field}: {detail}")


_MAX_MICROSECONDS = MAX_INTERVAL // timedelta(microseconds=1)
_INTERVAL_RULE = f"must be a whole number of seconds from 1 to {MAX_INTERVAL // MIN_INTERVAL:,}"


def validate_interval(every: object) -> timedelta:
    """``every`` as a timedelta of whole seconds from 1 s to 366 days.

    Accepts a ``timedelta`` or a number of seconds (``int``, or a ``float`` with no fraction).
    """
    if isinstance(every, float) and math.isfinite(every) and every.is_integer():
        every = int(every)
    if isinstance(every, timedelta):
        micros = every // timedelta(microseconds=1)
    elif isinstance(every, int) and not isinstance(every, bool):
        micros = every * 1_000_000
    elif isinstance(every, float):  # NaN, infinite or fractional
        code = "interval_not_whole_seconds" if math.isfinite(every) else "interval_out_of_range"
        code = "interval_invalid" if math.isnan(every) else code
        _fail("interval", code, f"{_INTERVAL_RULE}, got {every!r}" + " s" * math.isfinite(every))
    else:
        detail = f"must be a timedelta or a number of seconds, got {type(every).__name__}"
        _fail("interval", "interval_invalid", detail)
    whole, fraction = divmod(abs(micros), 1_000_000)
    shown = ("-" if micros < 0 else "") + f"{whole:,}" + f".{fraction:06d}".rstrip("0.")
    if fraction:
        _fail("interval", "interval_not_whole_seconds", f"{_INTERVAL_RULE}, got {shown} s")
    if not 1_000_000 <= micros <= _MAX_MICROSECONDS:
        _fail("interval", "interval_out_of_range", f"{_INTERVAL_RULE}, got {shown} s")
    return timedelta(microseconds=micros)


def validate_anchor(anchor: object) -> datetime:
    """``anchor`` converted to UTC: aware, a whole second, before the year 9999.

    Fractional seconds are rejected rather than truncated, so the stored anchor is
    exactly the grid the user sees.
    """
    if not isinstance(anchor, datetime):
        _fail("anchor", "anchor_invalid", f"must be a datetime, got {type(anchor).__name__}")
    shown = anchor.isoformat()
    if anchor.utcoffset() is None:
        detail = "timezone offset required (UTC); naive datetimes are ambiguous during DST"
        _fail("anchor", "anchor_naive", f"{detail} changes, got {shown}")
    try:
        utc = anchor.astimezone(UTC)
    except OverflowError:
        utc = datetime.max.replace(tzinfo=UTC)  # before year 1 in UTC: out of range below
    if utc.year >= 9999:
        _fail("anchor", "anchor_out_of_range", f"must be from year 1 to 9998 (UTC), got {shown}")
    if utc.microsecond:
        _fail("anchor", "anchor_not_whole_second", f"must be a whole second, got {shown}")
    return utc
