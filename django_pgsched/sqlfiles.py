"""Named SQL, one ``queries.sql`` per package (room), each block read by its name.

A room's SQL lives beside its code in ``django_pgsched/<room>/queries.sql``: blocks
headed ``-- name: x`` (procrastinate's habit), the comment lines under a header
saying what the block does. :func:`get` reads one block by its room and name; each
file is read once per process. The engine's hot paths are the ``engine`` room
(:mod:`django_pgsched.engine.queries` names them as typed statements).

A block is read without its full-line ``--`` comments (a ``%`` in one would be
taken for a parameter) and without a trailing ``;``: one statement, run with
psycopg's parameters as written (``%(name)s``, ``%s``, ``%%``).

A header ending in ``verbatim`` (``-- name: x verbatim``) keeps the block as
written from its first line that is not a comment to its last, ``--`` lines and
``;`` included, ending in a newline: DDL run as one script without parameters
(several statements, a function's ``$$`` body), which is never cut.

A block may also be a template (``{name}`` fields, filled in with
:meth:`str.format` by the module that reads it: a table name, a constant) or a
fragment of one; that module says which.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_HEADER = re.compile(r"^-- name: (\w+)( verbatim)?\s*$", re.MULTILINE)


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("--")


def parse(text: str) -> dict[str, str]:
    """The blocks of one file's ``text``, by name."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, verbatim, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in queries:
            raise ValueError(f"two blocks are named {name}")
        if verbatim:
            lines = body.splitlines()
            while lines and (not lines[0].strip() or _is_comment(lines[0])):
                del lines[0]
            while lines and (not lines[-1].strip() or _is_comment(lines[-1])):
                del lines[-1]
            queries[name] = "\n".join(lines) + "\n"
        else:
            lines = [line for line in body.strip().splitlines() if not _is_comment(line)]
            queries[name] = "\n".join(lines).strip().rstrip(";")
    return queries


@cache
def load(room: str) -> dict[str, str]:
    """Every block of ``django_pgsched/<room>/queries.sql``, by name (read once)."""
    text = files(f"{__package__}.{room}").joinpath("queries.sql").read_text(encoding="utf-8")
    return parse(text)


def get(room: str, name: str) -> str:
    """The SQL of the block ``name`` of ``room``'s ``queries.sql``."""
    return load(room)[name]


def names(room: str) -> list[str]:
    return sorted(load(room))
