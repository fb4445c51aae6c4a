"""Named time zones: validation, loading, and the instants where a zone's offset changes.

The only module that imports :mod:`zoneinfo`. Zones come from the IANA tz
database through the standard library (the system's zone files, else the
``tzdata`` package). A zone is loaded once per process and kept (the
module holds a strong reference), so one replica never mixes two versions of
the tz database; a replica reads updated zone files when it restarts (see the
explanation of time in the docs).

A *transition* is an instant where the zone's UTC offset changes. Only the
offset matters here, never ``dst()``: Europe/Dublin's negative summer time is
a transition like any other. The transitions of a zone are found by reading
its offset every twelve hours and bisecting each change to the second, using
nothing but ``datetime.astimezone``: the closest two offset changes in the tz
database are four days apart, so a twelve-hour probe sees every one of them.
Results are cached per zone and year.

Times here are whole seconds on the scale of
:mod:`django_pgsched.timing.timetable`: ``ordinal day × 86400 + second of
day``, in UTC for instants and in wall-clock time for local times.
"""

from __future__ import annotations

import difflib
import functools
import threading
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from .errors import TimetableError

__all__ = [
    "DEFAULT_ZONE",
    "MAX_ZONE_LENGTH",
    "Transition",
    "get_zone",
    "offset_at",
    "transitions",
    "validate_zone",
]

DEFAULT_ZONE = "UTC"
MAX_ZONE_LENGTH = 64
_DAY = 86_400
_PROBE = 12 * 3600
_ORIGIN = datetime(1, 1, 1, tzinfo=UTC)  # second 86_400 on the scale (ordinal 1)
FIRST_YEAR, LAST_YEAR = 2, 9998  # local times of year 1 or 9999 may not fit a datetime
# names that resolve but are not zones a schedule should name: the machine's own
# zone (differs between hosts), the POSIX default rules, and leap-second clocks
_REFUSED_PREFIXES = ("right/", "posix/")
_REFUSED = frozenset({"localtime", "posixrules", "Factory"})

_zones: dict[str, ZoneInfo] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Transition:
    """The zone's offset is ``before`` until second ``at`` (UTC) and ``after`` from it on."""

    at: int
    before: int  # UTC offset in seconds
    after: int

    @property
    def change(self) -> int:
        """Seconds the wall clock jumps: > 0 forward (a gap), < 0 back (a fold)."""
        return self.after - self.before


def _fail(code: str, message: str) -> TimetableError:
    return TimetableError("timezone", code, f"timezone: {message}")


def validate_zone(name: object) -> str:
    """``name`` if it is an IANA zone this process can load; ``TimetableError`` naming it if not."""
    if not isinstance(name, str):
        raise _fail("timezone_invalid", f"expected an IANA zone name, got {type(name).__name__}")
    shown = name if name.isascii() and name.isprintable() else ascii(name)
    if not name or len(name) > MAX_ZONE_LENGTH:
        raise _fail(
            "timezone_invalid",
            f"expected an IANA zone name of 1 to {MAX_ZONE_LENGTH} characters, got {shown!r}",
        )
    if name in _REFUSED or name.startswith(_REFUSED_PREFIXES):
        raise _fail(
            "timezone_unknown",
            f"{shown!r} is not accepted: name a zone of the tz database such as "
            "'Europe/Berlin' (the host's own zone and leap-second zones differ between machines)",
        )
    get_zone(name)
    return name


def get_zone(name: str) -> ZoneInfo:
    """The zone ``name``, loaded once per process and kept; ``TimetableError`` if unknown."""
    zone = _zones.get(name)
    if zone is not None:
        return zone
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        raise _unknown(name) from None
    with _lock:
        return _zones.setdefault(name, zone)


def _unknown(name: str) -> TimetableError:
    shown = name if name.isascii() and name.isprintable() else ascii(name)
    close = difflib.get_close_matches(name, sorted(known_zones()), n=3, cutoff=0.75)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return _fail(
        "timezone_unknown",
        f"unknown time zone {shown!r} (an IANA name such as 'Europe/Berlin' or "
        f"'America/New_York'){hint}",
    )


@functools.cache
def known_zones() -> frozenset[str]:
    """The zone names this process can load, less the refused ones (cached: a directory walk)."""
    names = available_timezones()
    return frozenset(z for z in names if z not in _REFUSED and not z.startswith(_REFUSED_PREFIXES))


def forget_zones() -> None:
    """Drop the loaded zones and cached transitions (tests that swap zone files use it)."""
    with _lock:
        _zones.clear()
    _year_transitions.cache_clear()
    known_zones.cache_clear()
    ZoneInfo.clear_cache()


# -- offsets and transitions ---------------------------------------------------------


def to_datetime(x: int) -> datetime:
    """Second ``x`` of the scale as an aware UTC datetime."""
    return _ORIGIN + timedelta(seconds=x - _DAY)


def from_datetime(t: datetime) -> int:
    """An aware datetime as a second of the scale (microseconds dropped)."""
    u = t.astimezone(UTC)
    return u.toordinal() * _DAY + u.hour * 3600 + u.minute * 60 + u.second


def offset_at(zone: ZoneInfo, x: int) -> int:
    """The zone's UTC offset in seconds at instant ``x``."""
    offset = to_datetime(x).astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset // timedelta(seconds=1)


def year_start(year: int) -> int:
    return date(year, 1, 1).toordinal() * _DAY


@functools.lru_cache(maxsize=8192)
def _year_transitions(zone: ZoneInfo, year: int) -> tuple[Transition, ...]:
    """The transitions with ``at`` in year ``year`` (UTC), ascending."""
    lo, hi = year_start(year), year_start(year + 1)
    found: list[Transition] = []
    a, off_a = lo - 1, offset_at(zone, lo - 1)
    while a < hi:
        b = min(a + _PROBE, hi)
        off_b = offset_at(zone, b)
        if off_b != off_a:
            # the first second in (a, b] whose offset differs from a's
            left, right = a, b
            while right - left > 1:
                mid = (left + right) // 2
                if offset_at(zone, mid) == off_a:
                    left = mid
                else:
                    right = mid
            after = offset_at(zone, right)
            if lo <= right < hi:
                found.append(Transition(right, off_a, after))
            a, off_a = right, after
            continue
        a, off_a = b, off_b
    return tuple(found)


def transitions(zone: ZoneInfo, lo: int, hi: int) -> list[Transition]:
    """The transitions with ``lo <= at < hi`` (instants on the scale), ascending."""
    first = max(FIRST_YEAR, date.fromordinal(max(1, lo // _DAY)).year)
    last = min(LAST_YEAR, date.fromordinal(max(1, min(hi // _DAY, date.max.toordinal()))).year)
    out: list[Transition] = []
    for year in range(first, last + 1):
        out.extend(t for t in _year_transitions(zone, year) if lo <= t.at < hi)
    return out
