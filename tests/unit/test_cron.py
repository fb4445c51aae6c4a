"""Parsing and validation of cron expressions (django_pgsched.timing.cron). No database."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pgsched.timing import timetable
from django_pgsched.timing.cron import CronFields, parse
from django_pgsched.timing.timetable import TimetableError

ALL_SECONDS = frozenset(range(60))
ALL_HOURS = frozenset(range(24))
ALL_DOM = frozenset(range(1, 32))
ALL_MONTHS = frozenset(range(1, 13))
ALL_DOW = frozenset(range(7))

PROPERTY = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


# -- accepted expressions ----------------------------------------------------------


def test_six_fields_are_seconds_first() -> None:
    f = parse("0 30 9 * * MON-FRI")
    assert f == CronFields(
        expression="0 30 9 * * MON-FRI",
        seconds=frozenset({0}),
        minutes=frozenset({30}),
        hours=frozenset({9}),
        days_of_month=ALL_DOM,
        months=ALL_MONTHS,
        days_of_week=frozenset({1, 2, 3, 4, 5}),
        dom_restricted=False,
        dow_restricted=True,
    )


def test_six_field_hourly_is_not_every_second_of_one_minute() -> None:
    # croniter's default (seconds LAST) would read this as every second of 00:05
    f = parse("0 5 * * * *")
    assert (f.seconds, f.minutes, f.hours) == (frozenset({0}), frozenset({5}), ALL_HOURS)


def test_five_fields_fire_at_second_zero() -> None:
    f = parse("*/15 * * * *")
    assert f.seconds == {0}
    assert f.minutes == {0, 15, 30, 45}
    assert f.hours == ALL_HOURS


@pytest.mark.parametrize(
    ("expression", "attribute", "expected"),
    [
        ("10-40/5 * * * *", "minutes", set(range(10, 41, 5))),
        ("5/15 * * * *", "minutes", {5, 20, 35, 50}),
        ("59/15 * * * *", "minutes", {59}),
        ("5-5 * * * *", "minutes", {5}),  # croniter alone would read 'a-a' as every minute
        ("5-5/10 * * * *", "minutes", {5}),
        ("1,2,3,10-12 * * * *", "minutes", {1, 2, 3, 10, 11, 12}),
        ("0 */6 * * *", "hours", {0, 6, 12, 18}),
        ("0 0 */10 * *", "days_of_month", {1, 11, 21, 31}),
        ("0 0 1 JAN,mar-May *", "months", {1, 3, 4, 5}),
        ("0 0 1 12/5 *", "months", {12}),
        ("0 0 1 */4 *", "months", {1, 5, 9}),
        ("0 0 * * mon-FRI", "days_of_week", {1, 2, 3, 4, 5}),
        ("0 0 * * 7", "days_of_week", {0}),
        ("0 0 * * SUN", "days_of_week", {0}),
        ("0 0 * * 0,7", "days_of_week", {0}),
        ("0 0 * * 5-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * FRI-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * 0-7", "days_of_week", ALL_DOW),
        ("0 0 * * */2", "days_of_week", {0, 2, 4, 6}),
        ("0 0 * * 1/2", "days_of_week", {1, 3, 5, 0}),  # N/step runs to 7 (Sunday)
        ("0 0 * * 7/2", "days_of_week", {0}),
        ("0 0 * * 1-7/3", "days_of_week", {1, 4, 0}),
        ("*/20 0 0 * * *", "seconds", {0, 20, 40}),
        ("0-59 0 0 * * *", "seconds", ALL_SECONDS),
    ],
)
def test_field_values(expression: str, attribute: str, expected: set[int]) -> None:
    assert getattr(parse(expression), attribute) == expected


@pytest.mark.parametrize(
    ("expression", "dom", "dow"),
    [
        ("0 0 * * *", False, False),
        ("0 0 13 * *", True, False),
        ("0 0 * * FRI", False, True),
        ("0 0 13 * FRI", True, True),
        ("0 0 1-31 * MON", True, True),
        ("0 0 */2 * MON", False, True),  # Vixie: a field starting with '*' is unrestricted
        ("0 0 1 * */1", True, False),
    ],
)
def test_restricted_flags_follow_vixie(expression: str, dom: bool, dow: bool) -> None:
    f = parse(expression)
    assert (f.dom_restricted, f.dow_restricted) == (dom, dow)


@pytest.mark.parametrize(
    ("nickname", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_nicknames(nickname: str, equivalent: str) -> None:
    f = parse(nickname)
    assert f.expression == nickname.lower()
    assert f == dataclasses.replace(parse(equivalent), expression=nickname.lower())


def test_expression_is_normalised() -> None:
    # runs of spaces and surrounding spaces are collapsed; names are upper-cased
    assert parse("  0  30   9 * *  mon-fri ").expression == "0 30 9 * * MON-FRI"
    assert parse("0 0 1 jan *").expression == "0 0 1 JAN *"


def test_29_february_is_valid() -> None:
    assert parse("0 0 29 2 *").days_of_month == {29}


def test_impossible_day_is_fine_when_day_of_week_is_or_ed() -> None:
    # both day fields restricted: the 30th of February OR any Monday in February
    assert parse("0 0 30 2 MON").months == {2}


def test_cron_factory_caches_and_checks_type() -> None:
    assert timetable.cron("0 0 * * *") is timetable.cron("0 0 * * *")
    with pytest.raises(TimetableError) as info:
        timetable.cron(5)  # type: ignore[arg-type]
    assert (info.value.field, info.value.code) == ("cron", "cron_invalid_type")


# -- croniter's expansion of our canonical text equals the plain meaning ---------------

FIELDS = [  # (index in a 6-field expression, low, high, max step, plain-set folding)
    (0, 0, 59, 60),
    (1, 0, 59, 60),
    (2, 0, 23, 24),
    (3, 1, 31, 31),
    (4, 1, 12, 12),
    (5, 0, 7, 7),
]
ATTRIBUTES = ["seconds", "minutes", "hours", "days_of_month", "months", "days_of_week"]


@st.composite
def field_items(draw: st.DrawFn) -> tuple[int, str, set[int]]:
    """A field index, a list of items for it and the plain set it denotes."""
    index, low, high, max_step = draw(st.sampled_from(FIELDS))
    texts, values = [], set()
    for _ in range(draw(st.integers(1, 3))):
        a = draw(st.integers(low, high))
        b = draw(st.integers(a, high))
        step = draw(st.integers(1, max_step))
        form = draw(st.sampled_from(["value", "range", "range/step", "start/step", "*/step"]))
        if form == "value":
            texts.append(str(a))
            values.add(a)
        elif form == "range":
            texts.append(f"{a}-{b}")
            values.update(range(a, b + 1))
        elif form == "range/step":
            texts.append(f"{a}-{b}/{step}")
            values.update(range(a, b + 1, step))
        elif form == "start/step":
            texts.append(f"{a}/{step}")
            values.update(range(a, high + 1, step))
        else:
            texts.append(f"*/{step}")
            values.update(range(low, high + 1, step))
    if index == 5:
        values = {v % 7 for v in values}
    return index, ",".join(texts), values


@PROPERTY
@given(field_items())
def test_expansion_matches_plain_semantics(case: tuple[int, str, set[int]]) -> None:
    index, text, expected = case
    parts = ["0", "0", "0", "1", "*", "*"]
    if index == 3:
        parts[4] = "1"  # January has 31 days, so no day-of-month value is impossible
    parts[index] = text
    assert getattr(parse(" ".join(parts)), ATTRIBUTES[index]) == expected


# -- rejected expressions --------------------------------------------------------------

BAD = [
    # (expression, code, text the message must contain)
    ("", "cron_empty", "empty"),
    ("   ", "cron_empty", "empty"),
    ("x" * 129, "cron_too_long", "129 characters"),
    ("* * * *", "cron_field_count", "got 4"),
    ("* * * * * * *", "cron_field_count", "got 7"),
    ("0 0 0 1 1 * 2030", "cron_field_count", "year field"),
    ("* * * * * * * *", "cron_field_count", "got 8"),
    ("\u0663 * * * *", "cron_invalid_character", "U+0663 at position 1"),
    ("\uff13 * * * *", "cron_invalid_character", "U+FF13 at position 1"),
    ("*\u00a0* * * *", "cron_invalid_character", "U+00A0 at position 2"),
    ("*\u200b * * * *", "cron_invalid_character", "U+200B at position 2"),
    ("*\t* * * *", "cron_invalid_character", "U+0009 at position 2"),
    ("* * * * *\n* * * * *", "cron_invalid_character", "U+000A at position 10"),
    ("* * * * *\x00", "cron_invalid_character", "U+0000 at position 10"),
    ("* * * * 1.5", "cron_invalid_character", "'.' (U+002E) at position 10"),
    ("60 * * * *", "cron_out_of_range", "minute value 60 out of range 0\u201359"),
    ("* 24 * * *", "cron_out_of_range", "hour value 24 out of range 0\u201323"),
    ("* * 0 * *", "cron_out_of_range", "day-of-month value 0 out of range 1\u201331"),
    ("* * 32 * *", "cron_out_of_range", "day-of-month value 32"),
    ("* * * 13 *", "cron_out_of_range", "month value 13 out of range 1\u201312"),
    ("* * * 0 *", "cron_out_of_range", "month value 0"),
    ("* * * * 8", "cron_out_of_range", "day-of-week value 8 out of range 0\u20137"),
    ("-1 * * * *", "cron_out_of_range", "minute value -1"),
    ("60 * * * * *", "cron_out_of_range", "second value 60"),
    ("0 0 1 1 * 2030", "cron_out_of_range", "year field is not supported"),
    ("0-99999999 * * * *", "cron_out_of_range", "minute value 99999999"),
    ("99999999/1 * * * *", "cron_out_of_range", "minute value 99999999"),
    ("9" * 120 + " * * * *", "cron_out_of_range", "minute value 999"),
    ("*/99999999 * * * *", "cron_bad_step", "minute step 99999999"),
    ("*/0 * * * *", "cron_bad_step", "minute step 0"),
    ("*/-5 * * * *", "cron_bad_step", "minute step -5"),
    ("5/0 * * * *", "cron_bad_step", "minute step 0"),
    ("1-5/ * * * *", "cron_bad_step", "step (missing)"),
    ("* * * * */8", "cron_bad_step", "day-of-week step 8"),
    ("30-10 * * * *", "cron_reversed_range", "range start 30 > end 10 (wrap-around"),
    ("0 0 * * FRI-SUN", "cron_reversed_range", "FRI-7"),
    ("0 0 * NOV-FEB *", "cron_reversed_range", "range start NOV > end FEB"),
    ("0 0 30 2 *", "cron_never_matches", "cron: day 30 never occurs in February"),
    ("0 0 31 4 *", "cron_never_matches", "day 31 never occurs in April"),
    (
        "0 0 31 2,4,6,9,11 *",
        "cron_never_matches",
        "day 31 never occurs in February, April, June, September or November",
    ),
    ("0 0 30,31 FEB *", "cron_never_matches", "days 30 and 31 never occur in February"),
    ("0 0 0 30 2 *", "cron_never_matches", "day 30 never occurs in February"),
    ("0 0 30 2 */2", "cron_never_matches", "February"),  # '*/2' is unrestricted: AND
    ("R * * * *", "cron_random_not_supported", "'R'"),
    ("H * * * *", "cron_random_not_supported", "'H'"),
    ("H(0-29) * * * *", "cron_random_not_supported", "'H(0-29)'"),
    ("H/15 * * * *", "cron_random_not_supported", "differ between replicas"),
    ("0 h * * *", "cron_random_not_supported", "hour field"),
    ("CRON_TZ=America/New_York 30 1 * * *", "cron_timezone_not_supported", "America/New_York"),
    ("TZ=Europe/London 0 9 * * *", "cron_timezone_not_supported", "timezone field"),
    ("tz=UTC 0 9 * * *", "cron_timezone_not_supported", "tz=UTC"),
    ("0 0 ? * MON", "cron_unsupported_token", "'?'"),
    ("0 0 L * *", "cron_unsupported_token", "'L'"),
    ("0 0 15W * *", "cron_unsupported_token", "'15W'"),
    ("0 0 W * *", "cron_unsupported_token", "'W'"),
    ("0 0 LW * *", "cron_unsupported_token", "'LW'"),
    ("0 0 L-3 * *", "cron_unsupported_token", "'L'"),
    ("0 0 * * 5L", "cron_unsupported_token", "'5L'"),
    ("0 0 * * MON#2", "cron_unsupported_token", "'#'"),
    ("0 10 * * ? *", "cron_unsupported_token", "'?'"),  # AWS: minutes hours dom month dow year
    ("@reboot", "cron_unsupported_token", "'@reboot'"),
    ("@every 5s", "cron_unsupported_token", "'@every'"),
    ("@fortnightly", "cron_unknown_name", "'@fortnightly'"),
    ("@daily 5", "cron_syntax", "on its own"),
    ("* * * FOO *", "cron_unknown_name", "unknown month name 'FOO'"),
    ("* * * * SUNDAY", "cron_unknown_name", "unknown day-of-week name 'SUNDAY'"),
    ("* * * * JAN", "cron_unknown_name", "day-of-week name 'JAN'"),
    ("MON * * * *", "cron_unknown_name", "names are not allowed in the minute field"),
    ("1,,2 * * * *", "cron_syntax", "minute field '1,,2'"),
    ("1-2-3 * * * *", "cron_syntax", "'1-2-3'"),
    ("*/5/2 * * * *", "cron_syntax", "'*/5/2'"),
    ("5X * * * *", "cron_syntax", "minute value '5X'"),
    ("** * * * *", "cron_syntax", "'**'"),
    ("(5) * * * *", "cron_syntax", "'(5)'"),
    ("5@ * * * *", "cron_syntax", "'5@'"),
]


@pytest.mark.parametrize(("expression", "code", "fragment"), BAD)
def test_rejected(expression: str, code: str, fragment: str) -> None:
    with pytest.raises(TimetableError) as info:
        timetable.cron(expression)
    error = info.value
    assert (error.field, error.code) == ("cron", code), str(error)
    assert str(error).startswith("cron: ")
    assert fragment in str(error)


def test_field_count_message() -> None:
    with pytest.raises(TimetableError) as info:
        parse("* * * *")
    assert str(info.value) == (
        "cron: expected 5 fields (minute hour day-of-month month day-of-week) or 6 fields "
        "(second minute hour day-of-month month day-of-week), got 4"
    )


def test_out_of_range_message() -> None:
    with pytest.raises(TimetableError) as info:
        parse("60 * * * *")
    assert str(info.value) == "cron: minute value 60 out of range 0\u201359"


def test_reversed_range_message() -> None:
    with pytest.raises(TimetableError) as info:
        parse("30-10 * * * *")
    assert str(info.value) == (
        "cron: minute range start 30 > end 10 (wrap-around ranges are not supported)"
    )


def test_length_limit_is_inclusive() -> None:
    padded = "0" * 120 + " * * * *"  # 128 characters: accepted (leading zeros)
    assert len(padded) == timetable.MAX_CRON_LENGTH
    assert parse(padded).minutes == {0}


@PROPERTY
@given(st.text(max_size=40))
def test_arbitrary_text_is_rejected_cleanly_or_accepted(text: str) -> None:
    try:
        f = parse(text)
    except TimetableError as error:
        assert error.field == "cron"
        assert str(error).startswith("cron: ")
    else:
        assert f.seconds and f.minutes and f.hours and f.months
        assert f.days_of_month and f.days_of_week
