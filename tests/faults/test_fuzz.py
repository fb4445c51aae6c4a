"""Hypothesis fuzzing of the two parsers that take hostile text.

- ``timetable.cron`` never raises anything but ``TimetableError`` and never
  hangs: accepted expressions also answer ``next_after`` and ``count`` quickly.
- ``payload.validate_kwargs`` accepts exactly what round-trips through
  PostgreSQL's ``jsonb`` (checked against the private server), apart from its
  documented caps (keyword-argument keys, size, depth, key count).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.core.exceptions import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pgsched.payload import validate_kwargs
from django_pgsched.timing import timetable

from .cluster import Cluster

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

TOKENS = ["*", "*/5", "0", "59", "60", "1-5", "5-1", "MON", "FRI-SUN", "JAN", "?", "L", "W", "#",
          "R", "H", "@daily", "@reboot", "CRON_TZ=UTC", "0-99999999", "*/0", ",", "-", "/",
          "\u0663", "\u00a0", "\t", "\x00", "30", "2", "31", "FEB", "7", "8", "0/15"]  # fmt: skip
CAPS = {"payload_key", "payload_too_large", "payload_depth", "payload_too_many_keys"}
FUZZ = settings(
    max_examples=400,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

cron_text = st.one_of(
    st.lists(st.sampled_from(TOKENS), min_size=0, max_size=8).map(" ".join),
    st.text(max_size=60),
    st.lists(
        st.one_of(st.sampled_from(TOKENS), st.integers(-5, 100).map(str)), min_size=5, max_size=6
    ).map(" ".join),
)


@FUZZ
@given(cron_text, st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1)))
def test_cron_only_raises_timetable_error_and_answers_quickly(text: str, at: datetime) -> None:
    began = time.monotonic()
    try:
        table = timetable.cron(text)
    except timetable.TimetableError as error:
        assert error.field == "cron" and str(error).startswith("cron: ")
        return
    t = at.replace(tzinfo=UTC)
    following = table.next_after(t)
    assert following > t and following.microsecond == 0 and table.contains(following)
    # count() adds up over adjacent spans, holds the next occurrence, none between
    end = t + timedelta(days=366)
    if following < end:
        assert table.count(t, end) == table.count(t, following) + table.count(following, end)
        at_t = int(t.microsecond == 0 and table.contains(t))  # [t, following) holds t itself
        assert table.count(t, following) == at_t and table.count(following, end) >= 1
    assert time.monotonic() - began < 1.5, text


scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, -(2**63) - 1, 10**40]),  # 10**5000: test_bad_input
    # |x| < 2**53: larger floats come back from jsonb as other ints (test_bad_input pins it)
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not abs(x) >= 2**53),
    st.text(max_size=8),
    st.sampled_from(["\x00", "a\x00", "\ud800", "x\udfffy", "\u2028", "é", "\\u0000"]),
)
json_like = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
identifier = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
payload = st.dictionaries(st.one_of(identifier, st.text(max_size=4)), json_like, max_size=5)


def through_jsonb(conn: psycopg.Connection[Any], value: Any) -> tuple[bool, Any]:
    """(stored, read back) for ``value`` sent as JSON text to a jsonb cast."""
    try:
        text = json.dumps(value)
    except (ValueError, TypeError):
        return False, None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT %s::jsonb", [text])
            return True, cur.fetchone()[0]
    except psycopg.Error:
        return False, None


def test_payload_validation_accepts_exactly_what_jsonb_round_trips(cluster: Cluster) -> None:
    with cluster.connect() as conn:

        @FUZZ
        @given(payload)
        def check(value: dict[str, Any]) -> None:
            stored, back = through_jsonb(conn, value)
            try:
                accepted = validate_kwargs(value, max_bytes=65536, max_depth=32)
            except ValidationError as error:
                if error.code not in CAPS:
                    assert not stored or back != json.loads(json.dumps(value)), (error, value)
                return
            assert stored, f"accepted but PostgreSQL refused it: {value!r}"
            assert back == json.loads(json.dumps(accepted)), value

        check()
