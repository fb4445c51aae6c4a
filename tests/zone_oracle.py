"""A brute-force oracle for cron in a named zone, independent of django_pgsched.timing.zoned.

It walks wall-clock time one second at a time and asks ``zoneinfo`` about
each matching second: does it exist (``fold=0`` or ``fold=1`` round-trips),
does it happen twice (both round-trip to different instants), or not at all
(neither does: a gap). Policies are applied per wall-clock second as the
reference docs state them; nothing here uses the pieces, the transition
search or the counting of the implementation. The cron fields come from the
parser (tested on its own against cronsim); the day rule is re-implemented.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django_pgsched.timing.cron import CronFields

S = timedelta(seconds=1)


def matches(f: CronFields, local: datetime) -> bool:
    dom = local.day in f.days_of_month
    dow = local.isoweekday() % 7 in f.days_of_week
    day = (dom or dow) if (f.dom_restricted and f.dow_restricted) else (dom and dow)
    return (
        day
        and local.second in f.seconds
        and local.minute in f.minutes
        and local.hour in f.hours
        and local.month in f.months
    )


def _exists(zone: ZoneInfo, local: datetime, fold: int) -> datetime | None:
    u = local.replace(tzinfo=zone, fold=fold).astimezone(UTC)
    return u if u.astimezone(zone).replace(tzinfo=None) == local else None


@dataclass
class Walk:
    """What the walk saw: per policy it yields the occurrences and the gap-skipped count."""

    regular: list[datetime] = field(default_factory=list)  # matched, exists once
    fold_first: list[datetime] = field(default_factory=list)  # matched, twice: first instant
    fold_second: list[datetime] = field(default_factory=list)
    gap: dict[datetime, int] = field(default_factory=lambda: defaultdict(int))  # target -> n

    def result(
        self, dst_gap: str, dst_fold: str, lo: datetime, hi: datetime
    ) -> tuple[list[datetime], int]:
        out = set(self.regular)
        if dst_fold in ("first", "both"):
            out.update(self.fold_first)
        if dst_fold in ("second", "both"):
            out.update(self.fold_second)
        skipped = 0
        for target, n in self.gap.items():
            if not lo <= target < hi:
                continue
            if dst_gap == "skip" or target in out:
                skipped += n
            else:
                out.add(target)
                skipped += n - 1
        return sorted(t for t in out if lo <= t < hi), skipped


def walk(f: CronFields, zone: ZoneInfo, lo: datetime, hi: datetime) -> Walk:
    """Classify every matching wall-clock second whose instants may fall in ``[lo, hi)``."""
    offsets = []
    t = lo
    while t <= hi:  # the offsets in force over the window (a transition lasts far longer)
        offsets.append(t.astimezone(zone).utcoffset())
        t += timedelta(minutes=15)
    offsets.append(hi.astimezone(zone).utcoffset())
    low = min(o for o in offsets if o is not None)
    high = max(o for o in offsets if o is not None)
    local = (lo + low).replace(tzinfo=None)
    stop = (hi + high).replace(tzinfo=None)
    seen = Walk()
    target: datetime | None = None  # the first existing second after the current gap
    while local < stop:
        if matches(f, local):
            first, second = _exists(zone, local, 0), _exists(zone, local, 1)
            if first is not None and second is not None and first != second:
                a, b = sorted((first, second))
                seen.fold_first.append(a)
                seen.fold_second.append(b)
            elif first is not None or second is not None:
                seen.regular.append(first or second)  # type: ignore[arg-type]
            else:
                if target is None or target.astimezone(zone).replace(tzinfo=None) < local:
                    after = local + S
                    while _exists(zone, after, 0) is None and _exists(zone, after, 1) is None:
                        after += S
                    found = _exists(zone, after, 0) or _exists(zone, after, 1)
                    assert found is not None
                    target = found
                seen.gap[target] += 1
        local += S
    return seen
