"""Named SQL statements, loaded once from ``queries.sql``.

The ORM cannot say "claim with SKIP LOCKED and update in one statement", so
the hot paths live in one SQL file with a ``-- name: x`` header per block
(procrastinate's habit). Everything else uses the ORM.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def _load() -> dict[str, str]:
    text = files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


def get(name: str) -> str:
    """The SQL of the block called ``name``."""
    return _load()[name]


def names() -> list[str]:
    return sorted(_load())
