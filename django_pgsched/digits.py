"""Integers read from what a request, a form or a remote server sent.

``str.isdigit()`` is true of ``"²"`` and of every script's digits, which ``int()``
refuses or reads as another number, and ``int()`` refuses 4,300 digits or more: both
were a 500 (or a failed attempt with a traceback) wherever input was parsed that way.
Every number parsed from input goes through here: ASCII digits only, bounded before
``int()`` is called.
"""

from __future__ import annotations


def ascii_int(text: str, *, low: int = 0, high: int) -> int | None:
    """The integer ``text`` spells in ASCII digits (no sign, no spaces), if within
    ``low..high``; ``None`` otherwise."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    significant = text.lstrip("0") or "0"
    if len(significant) > len(str(high)):
        return None
    value = int(significant)
    return value if low <= value <= high else None


def ascii_int_capped(text: str, *, cap: int) -> int | None:
    """The integer ``text`` spells in ASCII digits, at most ``cap`` (a longer or larger
    number reads as ``cap``); ``None`` when it is not ASCII digits."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    significant = text.lstrip("0") or "0"
    if len(significant) > len(str(cap)):
        return cap
    return min(int(significant), cap)
