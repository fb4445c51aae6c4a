"""A claimed payload's bounds are checked in Python, as its column's domain checks them.

The claim statement no longer checks every claimed run's payloads
(``pgsched_json_ok``: two ``jsonb_path_exists`` each); ``claiming.payload_beyond_bounds``
does, on the claimed text. These cases hold it to the database's own function.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_pgsched.engine.claiming import payload_beyond_bounds


def nested(levels: int, inner: str = "1") -> str:
    """``inner`` under ``levels`` arrays: it sits at level ``levels`` (the root is level 0)."""
    return "[" * levels + inner + "]" * levels


def keyed(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


BIG = "1" + "0" * 4300  # 10^4300: the first magnitude out of bounds

CASES = [
    "{}",
    '{"n": 1}',
    nested(99),
    nested(100),
    nested(101),
    nested(99, "[]"),  # an empty array at level 99
    nested(100, "[]"),  # ... at level 100
    keyed(99),
    keyed(100),
    '{"x": ' + nested(98) + "}",
    '{"x": ' + nested(99) + "}",
    '{"x": 1' + "0" * 400 + ".5}",  # about 1e400: beyond a float, within the bound
    '{"x": ' + BIG[:-1] + ".5}",  # just under 10^4300
    '{"x": ' + BIG + ".5}",  # over it
    '{"x": -' + BIG + ".5}",
    '{"x": [' + "1e308, " * 40 + "2]}",
    '{"s": "' + "[" * 300 + '"}',  # brackets inside a string are not nesting
]


@pytest.mark.parametrize("text", CASES, ids=range(len(CASES)))
def test_it_refuses_exactly_what_the_database_function_refuses(db, text):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pgsched_json_ok(%s::jsonb), %s::jsonb::text", [text, text])
        ok, stored = cursor.fetchone()
    decoded = json.loads(stored)  # as the claim hands it over: the column as text
    assert payload_beyond_bounds(stored, decoded) is (not ok), (text[:60], ok)


def test_a_short_payload_is_never_walked():
    class Boom(dict):  # walking it would fail
        def values(self):  # type: ignore[override]
            raise AssertionError("walked")

    assert payload_beyond_bounds('{"a": 1}', Boom(a=1)) is False
