"""Parse and validate cron expressions. The only module that imports croniter.

The dialect (fields are read in the schedule's time zone, UTC by default; see
:mod:`django_pgsched.timing.zoned`):

* **5 fields** ``minute hour day-of-month month day-of-week``, firing at second 0.
* **6 fields** ``second minute hour day-of-month month day-of-week``: seconds come
  *first*, as in Quartz and Spring (``0 30 9 * * MON-FRI`` is 09:30:00 on weekdays).
  croniter reads a 6th field as seconds-*last* unless told otherwise, so the
  dialect is always passed to it explicitly.
* Each field is a comma-separated list of items: ``*``, a value, a range ``a-b``,
  each optionally followed by a step ``/n``. ``a/n`` means ``a-<field max>/n``.
  Ranges must not wrap around (``30-10`` is rejected) and ``a-a`` is just ``a``.
* Names ``JAN``-``DEC`` and ``SUN``-``SAT`` are accepted in any case, also in
  ranges. Day-of-week is 0-7 with both 0 and 7 meaning Sunday.
* Nicknames ``@yearly @annually @monthly @weekly @daily @midnight @hourly``.
* Runs of spaces between fields and leading/trailing spaces are collapsed.

Everything else is rejected with a :class:`~django_pgsched.timing.timetable.TimetableError`
(``field="cron"``, a stable ``code`` and a message starting ``"cron: "`` that names
the field and the value) *before* croniter sees the text, because croniter is lax
exactly where a scheduler must be strict: it expands huge ranges, accepts
wrap-around and random (``R``/``H``) fields, and reads ``5-5`` as "every value".
The validated text is rewritten into a canonical numeric form that croniter
expands; the result is a :class:`CronFields` of plain value sets.

A field is *restricted* when its text does not start with ``*`` (Vixie cron's
rule). :mod:`django_pgsched.timing.timetable` explains how the two day fields combine.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

from croniter import CroniterError, croniter

from .errors import MAX_CRON_LENGTH, TimetableError

__all__ = ["CronFields", "parse"]

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_LONG = (
    "January February March April May June July August September October November December"
).split()
_TO = "\u2013"  # en dash, for "0 to 59" in messages
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February: leap years

_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELD_COUNT = (
    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 fields "
    "(second minute hour day-of-month month day-of-week), got {n}"
)

# '?', '#', '@' and parentheses pass the character check so that they get a
# specific message later (Quartz tokens, nicknames, hashed ranges).
_ALLOWED = frozenset(string.ascii_letters + string.digits + " *,-/" + "?#@()")
_TIME_ZONE = re.compile(r"\s*((?:CRON_)?TZ\s*=\s*\S*)", re.IGNORECASE)
_ITEM = re.compile(r"(\*|([A-Z0-9]+)(?:-([A-Z0-9]+))?)(?:/([0-9]+))?", re.ASCII)
_NUMBER = re.compile(r"[0-9]+", re.ASCII)
_RANDOM = re.compile(r"[HR](?:$|[(/])", re.ASCII)
_QUARTZ = re.compile(r"L|W|LW|[0-9]+[LW]|L[0-9]+", re.ASCII)


class _Field(NamedTuple):
    name: str
    low: int
    high: int
    max_step: int
    names: tuple[str, ...]  # names[i] has the value i + name_base
    name_base: int


_FIELDS = (
    _Field("second", 0, 59, 60, (), 0),
    _Field("minute", 0, 59, 60, (), 0),
    _Field("hour", 0, 23, 24, (), 0),
    _Field("day-of-month", 1, 31, 31, (), 1),
    _Field("month", 1, 12, 12, _MONTH_NAMES, 1),
    _Field("day-of-week", 0, 7, 7, _DAY_NAMES, 0),
)


@dataclass(frozen=True, slots=True)
class CronFields:
    """The expanded value sets of a valid expression (seconds first, Sunday = 0)."""

    expression: str  # normalised: single spaces, names upper case, nicknames lower case
    seconds: frozenset[int]  # {0} for 5-field expressions
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]  # 1..31
    months: frozenset[int]  # 1..12
    days_of_week: frozenset[int]  # 0..6, Sunday = 0 (7 is folded into 0)
    dom_restricted: bool  # the day-of-month text does not start with '*'
    dow_restricted: bool  # the day-of-week text does not start with '*'


def _fail(code: str, message: str) -> NoReturn:
    raise TimetableError("cron", code, f"cron: {message}")


def _show(text: str) -> str:
    """Echo user text safely: non-printable or non-ASCII characters as U+XXXX."""
    return "".join(c if c.isascii() and c.isprintable() else f"U+{ord(c):04X}" for c in text)


def parse(expression: object) -> CronFields:
    """Validate ``expression`` and expand it; raise ``TimetableError`` if it is invalid."""
    text = _check_text(expression)
    nickname = None
    if text.startswith("@"):
        nickname = _nickname(text)
        text = _NICKNAMES[nickname]
    parts = text.split()
    if len(parts) not in (5, 6):
        hint = " (a year field is not supported)" if len(parts) == 7 else ""
        _fail("cron_field_count", _FIELD_COUNT.format(n=len(parts)) + hint)
    specs = _FIELDS if len(parts) == 6 else _FIELDS[1:]
    normalised, canonical = [], []
    for spec, part in zip(specs, parts, strict=True):
        upper = part.upper()
        _reject_tokens(spec, upper)
        normalised.append(upper)
        items = [_item(spec, upper, item) for item in upper.split(",")]
        canonical.append("*" if upper == "*" else ",".join(items))
    sec, minute, hour, dom, month, dow = _expand(" ".join(canonical), six=len(parts) == 6)
    fields = CronFields(
        expression=nickname or " ".join(normalised),
        seconds=sec,
        minutes=minute,
        hours=hour,
        days_of_month=dom,
        months=month,
        days_of_week=dow,
        dom_restricted=not parts[-3].startswith("*"),
        dow_restricted=not parts[-1].startswith("*"),
    )
    _check_possible(fields)
    return fields


def _check_text(expression: object) -> str:
    if not isinstance(expression, str):
        _fail("cron_invalid_type", f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_CRON_LENGTH:
        _fail(
            "cron_too_long",
            f"expression is {len(expression)} characters long; the maximum is {MAX_CRON_LENGTH}",
        )
    if not expression.strip(" "):
        _fail("cron_empty", "expression is empty")
    tz = _TIME_ZONE.match(expression)
    if tz:
        _fail(
            "cron_timezone_not_supported",
            f"time zones are not supported in the expression (found '{_show(tz.group(1))}'); "
            "remove the prefix and set the schedule's timezone field instead "
            "(e.g. timezone='Europe/Paris'; pgsched_cron --tz)",
        )
    for position, char in enumerate(expression, start=1):
        if char not in _ALLOWED:
            shown = f"U+{ord(char):04X}"
            if char.isascii() and char.isprintable():
                shown = f"'{char}' ({shown})"
            _fail(
                "cron_invalid_character",
                "only ASCII letters, digits, spaces and * , - / are allowed "
                f"(found {shown} at position {position})",
            )
    return expression.strip(" ")


def _nickname(text: str) -> str:
    first, *rest = text.split()
    name = first.lower()
    if name in ("@reboot", "@every"):
        why = "schedules fire at clock times, not at start-up"
        if name == "@every":
            why = "use an interval schedule instead"
        _fail("cron_unsupported_token", f"'{first}' is not supported in this dialect ({why})")
    if name not in _NICKNAMES:
        _fail(
            "cron_unknown_name",
            f"unknown nickname '{first}' (use one of {', '.join(_NICKNAMES)})",
        )
    if rest:
        _fail("cron_syntax", f"'{first}' must be used on its own, got '{text}'")
    return name


def _item(spec: _Field, field: str, item: str) -> str:
    """Validate one list item of a field; return its canonical numeric form for croniter."""
    match = _ITEM.fullmatch(item)
    if match is None:
        _diagnose(spec, field, item)
    base, first, last, step_text = match.groups()
    step = 1
    if step_text is not None:
        step = int(step_text)
        if not 1 <= step <= spec.max_step:
            _fail(
                "cron_bad_step",
                f"{spec.name} step {step} out of range 1{_TO}{spec.max_step} (in '{item}')",
            )
    if base == "*":  # explicit, because croniter mishandles '*' inside a list ('0,*')
        start, end = spec.low, spec.high
    else:
        start = _value(spec, first, item)
        end = spec.high if last is None and step_text is not None else start
        if last is not None:
            end = _value(spec, last, item)
    if start > end:
        hint = ""
        if spec.name == "day-of-week" and end == 0:
            hint = "; write Sunday as 7 at the end of a range, e.g. FRI-7"
        _fail(
            "cron_reversed_range",
            f"{spec.name} range start {first} > end {last} "
            f"(wrap-around ranges are not supported{hint})",
        )
    if start == end:  # croniter reads an explicit 'a-a' as the whole field
        return str(start)
    return f"{start}-{end}" if step == 1 else f"{start}-{end}/{step}"


def _reject_tokens(spec: _Field, field: str) -> None:
    """Reject random/hashed values and Quartz-only tokens, naming the token."""
    where = f"in the {spec.name} field '{field}'"
    for token in ("?", "#"):
        if token in field:
            _fail("cron_unsupported_token", f"'{token}' is not supported in this dialect ({where})")
    for item in field.split(","):
        if _RANDOM.match(item):
            _fail(
                "cron_random_not_supported",
                f"random/hashed values like '{item}' are not supported ({where}): "
                "they make occurrence times differ between replicas",
            )
    for atom in re.split(r"[,/-]", field):
        if _QUARTZ.fullmatch(atom):
            _fail("cron_unsupported_token", f"'{atom}' is not supported in this dialect ({where})")


def _diagnose(spec: _Field, field: str, item: str) -> NoReturn:
    base, slash, step = item.partition("/")
    if slash and (step == "" or (step[0] == "-" and _NUMBER.fullmatch(step[1:]))):
        _fail(
            "cron_bad_step",
            f"{spec.name} step {step or '(missing)'} out of range 1{_TO}{spec.max_step} "
            f"(in '{item}')",
        )
    if base.startswith("-") and _NUMBER.fullmatch(base[1:]):
        _fail(
            "cron_out_of_range", f"{spec.name} value {base} out of range {spec.low}{_TO}{spec.high}"
        )
    _fail(
        "cron_syntax",
        f"{spec.name} field '{field}' is not valid (expected *, a value, a range like 1-5, "
        "a list like 1,3,5 or a step like */15)",
    )


def _value(spec: _Field, atom: str, item: str) -> int:
    context = f" (in '{item}')" if item != atom else ""
    if _NUMBER.fullmatch(atom):
        value = int(atom)
        if spec.name == "day-of-week" and value >= 1970 and not context:
            context = " (a year field is not supported)"
        if not spec.low <= value <= spec.high:
            _fail(
                "cron_out_of_range",
                f"{spec.name} value {atom} out of range {spec.low}{_TO}{spec.high}{context}",
            )
        return value
    if not atom.isalpha():
        _fail("cron_syntax", f"{spec.name} value '{atom}' is not a number{context}")
    if not spec.names:
        _fail("cron_unknown_name", f"names are not allowed in the {spec.name} field (got '{atom}')")
    if atom not in spec.names:
        first, last = spec.names[0], spec.names[-1]
        _fail(
            "cron_unknown_name",
            f"unknown {spec.name} name '{atom}' "
            f"(use {first}{_TO}{last} or {spec.low}{_TO}{spec.high})",
        )
    return spec.names.index(atom) + spec.name_base


def _expand(canonical: str, *, six: bool) -> list[frozenset[int]]:
    """Expand validated canonical text with croniter into six sets, seconds first."""
    try:
        expanded, nth_weekday = croniter.expand(canonical, second_at_beginning=six)
    except CroniterError as exc:  # pragma: no cover - validation should make this unreachable
        _fail("cron_syntax", f"'{canonical}' could not be parsed: {exc}")
    if nth_weekday or len(expanded) != (6 if six else 5):  # pragma: no cover
        _fail("cron_syntax", f"'{canonical}' could not be parsed")
    # croniter's internal order is seconds-LAST: minute hour dom month dow [second]
    ordered = [expanded[5] if six else [0], *expanded[:5]]
    result: list[frozenset[int]] = []
    for spec, values in zip(_FIELDS, ordered, strict=True):
        high = 6 if spec.name == "day-of-week" else spec.high
        if values == ["*"]:
            result.append(frozenset(range(spec.low, high + 1)))
            continue
        if not all(type(v) is int and spec.low <= v <= spec.high for v in values):
            _fail("cron_syntax", f"'{canonical}' could not be parsed")  # pragma: no cover
        result.append(frozenset(v % 7 if spec.name == "day-of-week" else v for v in values))
    return result


def _check_possible(fields: CronFields) -> None:
    """Reject day-of-month/month combinations that never occur (``0 0 30 2 *``).

    With both day fields restricted a day matches on either, and every weekday
    occurs in every month, so only the AND case can be impossible.
    """
    if fields.dom_restricted and fields.dow_restricted:
        return
    if any(d <= _MAX_DAYS[m] for m in fields.months for d in fields.days_of_month):
        return
    days = sorted(fields.days_of_month)
    months = [_MONTH_LONG[m - 1] for m in sorted(fields.months)]
    day_text = (
        f"day {days[0]}" if len(days) == 1 else f"days {_join([str(d) for d in days], 'and')}"
    )
    verb = "occurs" if len(days) == 1 else "occur"
    _fail("cron_never_matches", f"{day_text} never {verb} in {_join(months, 'or')}")


def _join(words: Sequence[str], last: str) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} {last} {words[-1]}"
