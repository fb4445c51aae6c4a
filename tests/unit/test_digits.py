"""Integers read from input: ASCII digits only, bounded before int() sees them."""

from __future__ import annotations

import pytest

from django_pgsched.digits import ascii_int, ascii_int_capped


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("0042", 42),
        ("100", 100),
        ("101", None),  # above high
        ("²", None),  # "²".isdigit() is true, int("²") raises
        ("١٢", None),  # Arabic-Indic digits: int() reads them as 12
        ("１２", None),  # fullwidth digits
        ("9" * 5000, None),  # int() refuses 4,300 digits or more
        ("0" * 5000 + "5", 5),
        ("", None),
        (" 5", None),
        ("+5", None),
        ("-5", None),
        ("5.0", None),
    ],
)
def test_ascii_int(text, expected):
    assert ascii_int(text, high=100) == expected


def test_ascii_int_low_bound():
    assert ascii_int("0", low=1, high=10) is None
    assert ascii_int("1", low=1, high=10) == 1


def test_ascii_int_capped():
    assert ascii_int_capped("12", cap=10) == 10
    assert ascii_int_capped("9" * 5000, cap=10**9) == 10**9
    assert ascii_int_capped("7", cap=10) == 7
    assert ascii_int_capped("²", cap=10) is None
