"""Occurrence arithmetic (django_pgsched.timing.timetable), with cronsim and croniter as oracles.

cronsim is an independent implementation with the same dialect (6 fields =
seconds first) and the same Vixie day rule (a day field starting with '*' turns
the DOM/DOW OR into an AND), so it is compared on every generated expression.
croniter differs on that rule; it is compared only where the two rules agree.
No database.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from croniter import croniter
from cronsim import CronSim
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from django_pgsched.timing import timetable
from django_pgsched.timing.timetable import CronTimetable, TimetableError, canonical

IST = timezone(timedelta(hours=5, minutes=30))
PST = timezone(timedelta(hours=-8))
US = timedelta(microseconds=1)
S = timedelta(seconds=1)

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def chain(tt: timetable.Timetable, t: datetime, n: int) -> list[datetime]:
    out = []
    for _ in range(n):
        t = tt.next_after(t)
        out.append(t)
    return out


# -- cron: hand-checked cases ------------------------------------------------------


def test_weekdays_at_half_past_nine() -> None:
    tt = timetable.cron("0 30 9 * * MON-FRI")
    assert chain(tt, at(2025, 3, 7, 9, 30), 3) == [  # Friday, on the grid point
        at(2025, 3, 10, 9, 30),
        at(2025, 3, 11, 9, 30),
        at(2025, 3, 12, 9, 30),
    ]


def test_next_after_is_strict_and_rounds_microseconds_up() -> None:
    tt = timetable.cron("* * * * * *")
    assert tt.next_after(at(2025, 1, 1, 12)) == at(2025, 1, 1, 12, 0, 1)
    assert tt.next_after(at(2025, 1, 1, 12) + 500_000 * US) == at(2025, 1, 1, 12, 0, 1)
    assert tt.next_after(at(2025, 1, 1, 12) - US) == at(2025, 1, 1, 12)


def test_five_fields_fire_on_whole_minutes() -> None:
    tt = timetable.cron("*/15 * * * *")
    assert chain(tt, at(2025, 1, 1, 23, 50, 30), 2) == [at(2025, 1, 2), at(2025, 1, 2, 0, 15)]


def test_29_february() -> None:
    tt = timetable.cron("0 0 29 2 *")
    assert tt.next_after(at(2025, 3, 1)) == at(2028, 2, 29)
    assert tt.next_after(at(2096, 3, 1)) == at(2104, 2, 29)  # 2100 is not a leap year
    assert tt.next_after(at(1999, 3, 1)) == at(2000, 2, 29)  # 2000 is


def test_31st_only_in_long_months() -> None:
    tt = timetable.cron("0 0 31 * *")
    assert [t.month for t in chain(tt, at(2025, 1, 1), 7)] == [1, 3, 5, 7, 8, 10, 12]


def test_last_days_of_february() -> None:
    tt = timetable.cron("0 12 28,29 2 *")
    assert chain(tt, at(2023, 1, 1), 3) == [
        at(2023, 2, 28, 12),
        at(2024, 2, 28, 12),
        at(2024, 2, 29, 12),
    ]


def test_year_boundary() -> None:
    tt = timetable.cron("@yearly")
    assert tt.next_after(at(2025, 12, 31, 23, 59, 59, 999_999)) == at(2026, 1, 1)
    assert timetable.cron("59 23 31 12 *").next_after(at(2025, 12, 31, 23, 59)) == at(
        2026, 12, 31, 23, 59
    )


def test_day_of_week_seven_is_sunday() -> None:
    assert timetable.cron("0 0 * * 7").next_after(at(2025, 3, 3)) == at(2025, 3, 9)
    assert timetable.cron("0 0 * * 7").fields.days_of_week == {0}
    assert chain(timetable.cron("0 0 * * 7"), at(2025, 3, 3), 4) == chain(
        timetable.cron("0 0 * * SUN"), at(2025, 3, 3), 4
    )


def test_day_of_month_or_day_of_week_when_both_restricted() -> None:
    tt = timetable.cron("0 0 13 * FRI")  # the 13th OR any Friday
    assert chain(tt, at(2025, 6, 1), 4) == [
        at(2025, 6, 6),
        at(2025, 6, 13),  # a Friday and the 13th: once
        at(2025, 6, 20),
        at(2025, 6, 27),
    ]
    assert tt.next_after(at(2025, 7, 11)) == at(2025, 7, 13)  # a Sunday, matched by the 13th


def test_star_step_day_field_is_and_ed() -> None:
    # Vixie: '*/2' starts with '*', so it is unrestricted: odd days AND Mondays.
    # croniter would OR them (every odd day plus every Monday).
    tt = timetable.cron("0 0 */2 * MON")
    got = chain(tt, at(2025, 3, 1), 4)
    assert got == [at(2025, 3, 3), at(2025, 3, 17), at(2025, 3, 31), at(2025, 4, 7)]
    assert croniter("0 0 */2 * MON", at(2025, 3, 1)).get_next(datetime) == at(2025, 3, 3)
    assert croniter("0 0 */2 * MON", at(2025, 3, 3)).get_next(datetime) == at(2025, 3, 5)


def test_only_one_restricted_day_field_must_match() -> None:
    assert timetable.cron("0 0 * * MON").next_after(at(2025, 3, 4)) == at(2025, 3, 10)
    assert timetable.cron("0 0 15 * *").next_after(at(2025, 3, 16)) == at(2025, 4, 15)


def test_other_offsets_are_converted_and_results_are_canonical() -> None:
    tt = timetable.cron("0 30 9 * * *")
    got = tt.next_after(datetime(2025, 3, 1, 15, 0, 0, 123, tzinfo=IST))  # 09:30:00.000123Z
    assert got == at(2025, 3, 2, 9, 30)
    assert got.tzinfo is UTC
    assert got.microsecond == 0


def test_occurrences_are_half_open() -> None:
    tt = timetable.cron("0 * * * *")
    got = list(tt.occurrences(at(2025, 1, 1, 1), at(2025, 1, 1, 4)))
    assert got == [at(2025, 1, 1, 1), at(2025, 1, 1, 2), at(2025, 1, 1, 3)]
    later = list(tt.occurrences(at(2025, 1, 1, 1) + US, at(2025, 1, 1, 4) + US))
    assert later == [*got[1:], at(2025, 1, 1, 4)]
    assert list(tt.occurrences(at(2025, 1, 1, 4), at(2025, 1, 1, 1))) == []
    assert tt.count(at(2025, 1, 1, 4), at(2025, 1, 1, 1)) == 0
    assert tt.latest(at(2025, 1, 1, 4), at(2025, 1, 1, 1), 3) == []


def test_count_latest_contains() -> None:
    tt = timetable.cron("0 30 9 * * MON-FRI")
    start, end = at(2025, 1, 1), at(2026, 1, 1)
    assert tt.count(start, end) == 261  # weekdays in 2025
    assert tt.latest(start, end, 2) == [at(2025, 12, 30, 9, 30), at(2025, 12, 31, 9, 30)]
    assert tt.latest(start, end, 0) == []
    assert len(tt.latest(start, end, 1000)) == 261
    assert tt.contains(at(2025, 3, 3, 9, 30))
    assert tt.contains(datetime(2025, 3, 3, 15, 0, tzinfo=IST))
    assert not tt.contains(at(2025, 3, 3, 9, 30) + US)
    assert not tt.contains(at(2025, 3, 1, 9, 30))  # Saturday
    with pytest.raises(ValueError, match="k must be"):
        tt.latest(start, end, -1)


def test_counting_never_enumerates() -> None:
    # a per-second cron over 1,000 years: 3e10 occurrences, counted by whole days
    tt = timetable.cron("* * * * * *")
    start, end = at(2000, 1, 1), at(3000, 1, 1)
    days = (date(3000, 1, 1) - date(2000, 1, 1)).days
    assert tt.count(start, end) == days * 86_400
    assert tt.count(start + 500_000 * US, end - US) == days * 86_400 - 1
    assert tt.latest(start, end, 2) == [at(2999, 12, 31, 23, 59, 58), at(2999, 12, 31, 23, 59, 59)]


def test_year_9999_limit() -> None:
    with pytest.raises(TimetableError) as info:
        timetable.cron("0 0 29 2 *").next_after(at(9996, 3, 1))
    assert info.value.code == "timestamp_out_of_range"
    with pytest.raises(TimetableError):
        timetable.cron("* * * * * *").next_after(datetime.max.replace(tzinfo=UTC))
    top = datetime.max.replace(tzinfo=UTC)
    tt = timetable.cron("* * * * *")
    assert tt.count(at(9999, 12, 31, 23), top) == 60
    assert tt.latest(at(9999, 12, 31, 23), top, 1) == [at(9999, 12, 31, 23, 59)]
    assert len(list(tt.occurrences(at(9999, 12, 31, 23), top))) == 60
    assert tt.latest(datetime.min.replace(tzinfo=UTC), at(1, 1, 1, 0, 2), 5) == [
        at(1, 1, 1, 0, 0),
        at(1, 1, 1, 0, 1),
    ]


def test_naive_and_non_datetime_inputs() -> None:
    tt = timetable.cron("* * * * *")
    with pytest.raises(ValueError, match="timezone offset is required"):
        tt.next_after(datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        tt.count(datetime(2025, 1, 1), at(2025, 1, 2))
    with pytest.raises(TypeError):
        tt.contains(date(2025, 1, 1))  # type: ignore[arg-type]


def test_canonical() -> None:
    t = at(2025, 1, 1)
    assert canonical(t) is t
    assert canonical(datetime(2025, 1, 1, 5, 30, 0, 7, tzinfo=IST)) == at(2025, 1, 1, 0, 0, 0, 7)
    assert canonical(datetime(2025, 1, 1, 5, 30, tzinfo=IST)).tzinfo is UTC
    with pytest.raises(ValueError):
        canonical(datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="supported range"):
        canonical(datetime.min.replace(tzinfo=IST))


def test_repr_and_equality() -> None:
    assert repr(timetable.cron("0 0 * * *")) == "CronTimetable('0 0 * * *')"
    assert timetable.cron("0 0 * * *") == CronTimetable(timetable.cron("0 0 * * *").fields)
    assert hash(timetable.cron("@daily")) == hash(timetable.cron("@daily").fields)
    assert timetable.cron("0 0 * * *").kind == "cron"


# -- cron: differential tests ------------------------------------------------------

MONTH_NAMES = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
DAY_NAMES = "SUN MON TUE WED THU FRI SAT".split()
#        (low, high, max step, names, value of names[0], chance of '*')
SPECS = {
    "second": (0, 59, 60, (), 0, 0.5),
    "minute": (0, 59, 60, (), 0, 0.4),
    "hour": (0, 23, 24, (), 0, 0.4),
    "dom": (1, 31, 31, (), 1, 0.5),
    "month": (1, 12, 12, MONTH_NAMES, 1, 0.6),
    "dow": (0, 7, 7, DAY_NAMES, 0, 0.5),
}


@st.composite
def field_text(draw: st.DrawFn, kind: str) -> str:
    low, high, max_step, names, base, star = SPECS[kind]
    if draw(st.floats(0, 1)) < star:
        return "*"

    def show(value: int) -> str:
        if 0 <= value - base < len(names) and draw(st.booleans()):
            name = names[value - base]
            return draw(st.sampled_from([name, name.lower(), name.title()]))
        return str(value)

    items = []
    for _ in range(draw(st.integers(1, 3))):
        form = draw(st.sampled_from(["value", "range", "range/step", "start/step", "*/step"]))
        a = draw(st.integers(low, high))
        step = draw(st.integers(1, max_step))
        if form == "start/step":
            items.append(f"{show(a)}/{step}")
        elif form == "*/step":
            items.append(f"*/{step}")
        elif form == "value" or a == high:
            items.append(show(a))
        else:
            # never 'a-a': croniter reads it as the whole field, cronsim reads 'a-a/n' as 'a/n'
            b = draw(st.integers(a + 1, high))
            items.append(f"{show(a)}-{show(b)}" + (f"/{step}" if form == "range/step" else ""))
    return ",".join(items)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    kinds = ["minute", "hour", "dom", "month", "dow"]
    if draw(st.booleans()):
        kinds.insert(0, "second")
    text = " ".join(draw(field_text(kind)) for kind in kinds)
    try:
        timetable.cron(text)
    except TimetableError as error:
        assert error.code == "cron_never_matches", str(error)
        assume(False)
    return text


instants = st.datetimes(
    min_value=datetime(1990, 1, 1),
    max_value=datetime(2150, 1, 1),
    timezones=st.sampled_from([UTC, IST, PST]),
)


def sim(expression: str, t: datetime) -> CronSim:
    """cronsim from ``t`` (its next() is the first occurrence > floor(t)), in UTC."""
    return CronSim(timetable.cron(expression).expression, canonical(t))


def take(it: CronSim, n: int) -> list[datetime]:
    try:
        return [next(it) for _ in range(n)]
    except StopIteration:  # cronsim gives up after 50 years without a match
        reject()


@PROPERTY
@given(expressions(), instants)
def test_next_after_matches_cronsim(expression: str, start: datetime) -> None:
    got = chain(timetable.cron(expression), start, 6)
    assert got == take(sim(expression, start), 6)
    assert all(t.tzinfo is UTC and t.microsecond == 0 for t in got)


@PROPERTY
@given(expressions(), instants, st.data())
def test_window_operations_match_cronsim(
    expression: str, start: datetime, data: st.DataObject
) -> None:
    tt = timetable.cron(expression)
    n = data.draw(st.integers(0, 40), label="n")
    # occurrences >= start: cronsim from start - 1 µs yields those > floor(start - 1 µs)
    occ = take(sim(expression, start - US), n + 1)
    floor = occ[n - 1] if n else start
    span = (occ[n] - floor) // US
    end = floor + data.draw(st.integers(1 if n else 0, span), label="end offset µs") * US
    expected = occ[:n]  # exactly the first n lie in [start, end)
    assert tt.count(start, end) == n
    assert list(tt.occurrences(start, end)) == expected
    k = data.draw(st.integers(0, 12), label="k")
    assert tt.latest(start, end, k) == (expected[-k:] if k else [])
    for o in occ:
        assert tt.contains(o)
        assert not tt.contains(o + US)
        assert tt.contains(o.astimezone(IST))


@PROPERTY
@given(expressions(), instants)
def test_contains_matches_cronsim(expression: str, t: datetime) -> None:
    for candidate in (t, t.replace(microsecond=0), t.replace(microsecond=0, second=0)):
        expected = candidate.microsecond == 0 and take(sim(expression, candidate - S), 1) == [
            canonical(candidate)
        ]
        assert timetable.cron(expression).contains(candidate) == expected


@PROPERTY
@given(expressions(), instants, st.integers(0, 400 * 86_400), st.integers(0, 400 * 86_400))
def test_count_is_additive_over_long_ranges(expression: str, a: datetime, x: int, y: int) -> None:
    tt = timetable.cron(expression)
    b = a + timedelta(seconds=x, microseconds=x % 7 if y else 0)
    c = a + timedelta(seconds=x + y)
    assert tt.count(a, c) == tt.count(a, b) + tt.count(b, c)
    latest = tt.latest(a, c, 3)
    assert latest == tt.latest(latest[0] if latest else a, c, 3)
    if latest:
        assert tt.next_after(latest[-1]) >= c


@PROPERTY
@given(expressions(), instants)
def test_next_after_matches_croniter_where_the_day_rules_agree(
    expression: str, start: datetime
) -> None:
    fields = timetable.cron(expression).fields
    parts = fields.expression.split()
    six = len(parts) == 6
    # Excluded on purpose:
    # * croniter ORs the day fields whenever neither *expands* to '*' ('*/2' counts as
    #   restricted); we follow Vixie cron and OR only when neither *starts* with '*'.
    # * croniter caps 'N/step' in day-of-week at 6 (Saturday); we run it to 7 (Sunday).
    expanded = croniter.expand(fields.expression, second_at_beginning=six)[0]
    croniter_or = expanded[2] != ["*"] and expanded[4] != ["*"]
    assume(croniter_or == (fields.dom_restricted and fields.dow_restricted))
    assume(not re.search(r"(^|,)[A-Z0-9]+/", parts[-1]))
    whole = canonical(start).replace(microsecond=0)
    it = croniter(fields.expression, whole, second_at_beginning=six)
    expected = [it.get_next(datetime) for _ in range(5)]
    assert chain(timetable.cron(expression), start, 5) == expected


# -- interval ----------------------------------------------------------------------

ANCHOR = at(2025, 1, 1)


def test_interval_grid_extends_before_the_anchor() -> None:
    tt = timetable.interval(timedelta(seconds=7), ANCHOR)
    assert tt.next_after(ANCHOR - 10 * S) == ANCHOR - 7 * S
    assert tt.next_after(ANCHOR) == ANCHOR + 7 * S
    assert tt.next_after(ANCHOR - US) == ANCHOR
    assert tt.next_after(ANCHOR + 6 * S + 999_999 * US) == ANCHOR + 7 * S
    assert list(tt.occurrences(ANCHOR - 15 * S, ANCHOR + 8 * S)) == [
        ANCHOR - 14 * S,
        ANCHOR - 7 * S,
        ANCHOR,
        ANCHOR + 7 * S,
    ]
    assert tt.count(ANCHOR - 15 * S, ANCHOR + 8 * S) == 4
    assert tt.latest(ANCHOR - 15 * S, ANCHOR + 8 * S, 2) == [ANCHOR, ANCHOR + 7 * S]
    assert tt.latest(ANCHOR, ANCHOR, 2) == []
    assert tt.contains(ANCHOR - 700 * S)
    assert not tt.contains(ANCHOR - 700 * S + US)
    assert not tt.contains(ANCHOR + S)


def test_interval_anchor_in_another_offset() -> None:
    tt = timetable.interval(timedelta(hours=1), datetime(2025, 1, 1, 5, 45, tzinfo=IST))
    assert tt.anchor == at(2025, 1, 1, 0, 15)
    got = tt.next_after(at(2025, 1, 1, 3))
    assert got == at(2025, 1, 1, 3, 15)
    assert got.tzinfo is UTC
    assert tt.kind == "interval"
    assert tt == timetable.interval(timedelta(seconds=3600), at(2025, 1, 1, 0, 15))
    assert hash(tt) == hash(timetable.interval(timedelta(seconds=3600), at(2025, 1, 1, 0, 15)))


def test_interval_year_9999_limit() -> None:
    tt = timetable.interval(timedelta(days=366), at(9998, 6, 1))
    with pytest.raises(TimetableError) as info:
        tt.next_after(at(9999, 12, 1))
    assert (info.value.field, info.value.code) == ("interval", "timestamp_out_of_range")


@PROPERTY
@given(
    st.integers(1, 31_622_400),
    st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1)),
    instants,
    st.integers(0, 60),
    st.integers(0, 15),
)
def test_interval_against_timedelta_arithmetic(
    every_s: int, anchor: datetime, start: datetime, n: int, k: int
) -> None:
    every = timedelta(seconds=every_s)
    tt = timetable.interval(every, anchor.replace(tzinfo=UTC, microsecond=0))
    a = tt.anchor
    # the first grid point >= start, with timedelta floor division as the oracle
    first = a - ((a - start) // every) * every
    end = start + n * every + (every // 3)
    brute = []
    o = first
    while o < end:
        brute.append(o)
        o += every
    assert list(tt.occurrences(start, end)) == brute
    assert tt.count(start, end) == len(brute)
    assert tt.latest(start, end, k) == (brute[-k:] if k else [])
    assert tt.next_after(start - US) == first
    assert tt.next_after(first) == first + every
    assert tt.contains(first) and not tt.contains(first + US)


GOOD_INTERVALS = [
    (1, timedelta(seconds=1)),
    (60.0, timedelta(seconds=60)),
    (timedelta(days=366), timedelta(days=366)),
    (timedelta(minutes=5), timedelta(seconds=300)),
    (31_622_400, timedelta(days=366)),
]


@pytest.mark.parametrize(("value", "expected"), GOOD_INTERVALS)
def test_valid_intervals(value: object, expected: timedelta) -> None:
    assert timetable.validate_interval(value) == expected


BAD_INTERVALS = [
    (0, "interval_out_of_range", "got 0 s"),
    (-5, "interval_out_of_range", "got -5 s"),
    (timedelta(0), "interval_out_of_range", "got 0 s"),
    (timedelta(seconds=-60), "interval_out_of_range", "got -60 s"),
    (0.5, "interval_not_whole_seconds", "got 0.5 s"),
    (timedelta(milliseconds=1500), "interval_not_whole_seconds", "got 1.5 s"),
    (timedelta(seconds=60, microseconds=1), "interval_not_whole_seconds", "got 60.000001 s"),
    (timedelta(microseconds=-1), "interval_not_whole_seconds", "got -0.000001 s"),
    (float("nan"), "interval_invalid", "got nan"),
    (float("inf"), "interval_out_of_range", "got inf"),
    (float("-inf"), "interval_out_of_range", "got -inf"),
    (1e12, "interval_out_of_range", "got 1,000,000,000,000 s"),
    (10**30, "interval_out_of_range", "got 1,000,000,000,000,000,000,000,000,000,000 s"),
    (31_622_401, "interval_out_of_range", "got 31,622,401 s"),
    (timedelta(days=367), "interval_out_of_range", "got 31,708,800 s"),
    ("60", "interval_invalid", "got str"),
    (None, "interval_invalid", "got NoneType"),
    (True, "interval_invalid", "got bool"),
]


@pytest.mark.parametrize(("value", "code", "fragment"), BAD_INTERVALS)
def test_invalid_intervals(value: object, code: str, fragment: str) -> None:
    with pytest.raises(TimetableError) as info:
        timetable.validate_interval(value)
    assert (info.value.field, info.value.code) == ("interval", code)
    assert str(info.value).startswith("interval: ")
    assert fragment in str(info.value)
    if code != "interval_invalid" or fragment == "got nan":
        assert "must be a whole number of seconds from 1 to 31,622,400" in str(info.value)
    with pytest.raises(TimetableError):
        timetable.interval(value, ANCHOR)  # type: ignore[arg-type]


def test_valid_anchor_is_converted_to_utc() -> None:
    got = timetable.validate_anchor(datetime(2025, 1, 1, 5, 30, tzinfo=IST))
    assert got == ANCHOR
    assert got.tzinfo is UTC


BAD_ANCHORS = [
    (datetime(2025, 1, 1), "anchor_naive", "timezone offset required (UTC)"),
    (date(2025, 1, 1), "anchor_invalid", "got date"),
    ("2025-01-01T00:00:00Z", "anchor_invalid", "got str"),
    (at(2025, 1, 1, 0, 0, 0, 500_000), "anchor_not_whole_second", "whole second"),
    (at(9999, 1, 1), "anchor_out_of_range", "9999-01-01"),
    (datetime.min.replace(tzinfo=IST), "anchor_out_of_range", "0001-01-01"),
]


@pytest.mark.parametrize(("value", "code", "fragment"), BAD_ANCHORS)
def test_invalid_anchors(value: object, code: str, fragment: str) -> None:
    with pytest.raises(TimetableError) as info:
        timetable.validate_anchor(value)
    assert (info.value.field, info.value.code) == ("anchor", code)
    assert str(info.value).startswith("anchor: ")
    assert fragment in str(info.value)
    with pytest.raises(TimetableError):
        timetable.interval(timedelta(seconds=60), value)  # type: ignore[arg-type]
