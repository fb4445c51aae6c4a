"""Words for operators: schedules, durations, relative times and leases.

The only module that imports ``cron-descriptor``. Two things it does not know
about our dialect are fixed here:

* **Seconds first.** A 6-field expression is handed over as 7 fields (with a
  ``*`` year), so the first field is always read as seconds, never guessed.
  A 6-field expression at one time of day reads with its seconds
  (``0 30 9 * * MON-FRI``: "At 09:30:00 AM, Monday through Friday"); a
  5-field one without them.
* **Vixie's day rule** (see :mod:`django_pgsched.timing.timetable`): when both day
  fields are restricted (neither starts with ``*``), a day matches if *either*
  matches; otherwise *both* must. cron-descriptor decides by ``!= "*"``
  instead, so ``0 0 */2 * MON`` would read "or on Monday". When both day
  fields are set, the two halves are described separately and joined with the
  right word.

All text is English (``en_US``), times are UTC, and nothing here touches the
database.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta

from cron_descriptor import CasingTypeEnum, ExpressionDescriptor, Options

from . import timetable

__all__ = ["cron", "duration", "interval", "lease", "relative"]

# the cron module's nicknames, spelled out for cron-descriptor (which knows none)
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1))
_WORDS = {86_400: "day", 3_600: "hour", 60: "minute", 1: "second"}


def _options() -> Options:
    # an explicit locale: the autodetected one warns when the system has none
    try:
        return Options(locale_code="en_US", casing_type=CasingTypeEnum.Sentence)
    except TypeError:  # cron-descriptor 1.x, as django-celery-beat 2.9 (<2.0) installs it
        options = Options()
        options.locale_code = "en_US"
        options.casing_type = CasingTypeEnum.Sentence
        return options


@functools.lru_cache(maxsize=2048)
def cron(expression: str) -> str:
    """``expression`` in words; ``TimetableError`` if it is not a valid cron expression."""
    fields = timetable.cron(expression).fields
    parts = _NICKNAMES.get(fields.expression, fields.expression).split()
    if len(parts) == 6 and all(p.isdigit() for p in parts[:3]):
        parts[0] = parts[0].zfill(2)  # "At 09:30:00 AM": the seconds were given, show them
    elif len(parts) == 5:
        parts.insert(0, "0")
    sec, minute, hour, dom, month, dow = parts
    full = ExpressionDescriptor(" ".join([*parts, "*"]), _options())
    if dom == "*" or dow == "*":
        return str(full.get_description())
    # Both day fields are set: describe each on its own and join them ourselves.
    on_days = ExpressionDescriptor(" ".join([sec, minute, hour, dom, month, "*", "*"]), _options())
    on_weekdays = ExpressionDescriptor(
        " ".join([sec, minute, hour, "*", month, dow, "*"]), _options()
    )
    weekdays = on_weekdays.get_day_of_week_description().removeprefix(", ")
    weekdays = weekdays.removeprefix("only ")
    if weekdays[:1].isupper():  # "Monday through Friday"
        weekdays = f"on {weekdays}"
    if fields.dom_restricted and fields.dow_restricted:
        days = f"{on_days.get_day_of_month_description()} or {weekdays}"
    else:
        days = f"{on_days.get_day_of_month_description()}, but only {weekdays}"
    text = f"{full.get_time_of_day_description()}{days}{full.get_month_description()}"
    text = full.transform_verbosity(text, use_verbose_format=False)
    return str(ExpressionDescriptor.transform_case(text, CasingTypeEnum.Sentence))


def interval(every: timedelta) -> str:
    """``every`` as "Every 15 minutes", "Every hour" or "Every 1 h 30 min"."""
    total = int(every.total_seconds())
    for size, word in _WORDS.items():
        if total % size == 0 and total >= size:
            n = total // size
            if total == size:
                return f"Every {word}"
            if n < 1000 and (size == 1 or total < 100 * size):
                return f"Every {n} {word}s"
            break
    return f"Every {duration(every)}"


def duration(value: timedelta, *, parts: int = 2) -> str:
    """A short, readable length of time: "850 ms", "12 s", "2 min 5 s", "1 h 2 min", "3 d 4 h"."""
    micros = abs(value) // timedelta(microseconds=1)
    sign = "-" if value < timedelta(0) else ""
    if micros < 1_000_000:
        return f"{sign}{micros // 1000} ms"
    if micros < 9_950_000 and micros % 1_000_000 >= 50_000:
        return f"{sign}{micros / 1_000_000:.1f} s"
    seconds = round(micros / 1_000_000)
    words: list[str] = []
    for unit, size in _UNITS:
        n, seconds = divmod(seconds, size)
        if n or words:
            words.append(f"{n} {unit}")
        if len(words) == parts:
            break
    while len(words) > 1 and words[-1].startswith("0 "):
        words.pop()
    return sign + " ".join(words)


def relative(when: datetime, now: datetime) -> str:
    """``when`` seen from ``now``: "in 12 s", "3 min ago", "now"."""
    delta = when - now
    if abs(delta) < timedelta(seconds=1):
        return "now"
    # one unit under an hour ("49 min ago"), two above ("6 h 34 min ago")
    words = duration(abs(delta), parts=1 if abs(delta) < timedelta(hours=1) else 2)
    return f"in {words}" if delta > timedelta(0) else f"{words} ago"


def lease(status: str, worker: str | None, expires_at: datetime | None, now: datetime) -> str:
    """A run's lease in words: "held by replica-1, 12 s left", "expired 3 s ago" or "—"."""
    if status != "running" or expires_at is None:
        return "—"
    holder = worker or "an unnamed worker"
    if expires_at > now:
        return f"held by {holder}, {duration(expires_at - now)} left"
    return f"expired {duration(now - expires_at)} ago (held by {holder})"
