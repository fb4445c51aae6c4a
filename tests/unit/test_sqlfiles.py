"""The rooms' named SQL: how a block is read, and that each one is read by its room's code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_pgsched
from django_pgsched import sqlfiles
from django_pgsched.engine import queries

PACKAGE = Path(django_pgsched.__file__).parent
ROOMS = sorted(path.parent.name for path in PACKAGE.glob("*/queries.sql"))


def test_the_rooms_with_a_file():
    assert ROOMS == ["admin", "broker", "delivery", "engine", "ledger", "ops", "partitions"]


def test_a_block_is_read_without_its_comment_lines_and_its_last_semicolon():
    text = """-- the file's own comment
-- name: one
-- what it does: 100% of it
SELECT 1
  -- between its lines
  FROM t WHERE a LIKE '%%x'  -- at a line's end: kept
 ORDER BY 1;


-- name: two
SELECT 2;
"""
    assert sqlfiles.parse(text) == {
        "one": "SELECT 1\n  FROM t WHERE a LIKE '%%x'  -- at a line's end: kept\n ORDER BY 1",
        "two": "SELECT 2",
    }


def test_a_verbatim_block_keeps_its_comment_lines_and_semicolons():
    text = """-- name: ddl verbatim
-- what it does (not kept)

CREATE TABLE t (a int);
CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    -- kept: the function's source
    RETURN 1;
END
$$;

-- a comment after it (not kept)


-- name: next
SELECT 1;
"""
    assert sqlfiles.parse(text)["ddl"] == (
        "CREATE TABLE t (a int);\n"
        "CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "    -- kept: the function's source\n"
        "    RETURN 1;\n"
        "END\n"
        "$$;\n"
    )


def test_two_blocks_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two blocks are named one"):
        sqlfiles.parse("-- name: one\nSELECT 1;\n-- name: one\nSELECT 2;\n")


def test_the_engine_reads_its_file_as_every_room_does():
    assert queries.names() == sqlfiles.names("engine")
    assert {name: queries.get(name) for name in queries.names()} == sqlfiles.load("engine")


@pytest.mark.parametrize("room", ROOMS)
def test_every_block_of_a_room_is_read_by_its_code(room):
    # by its name, as a string literal of the room's Python (a block nobody reads is
    # dead SQL; a name read that no block has fails at import)
    code = "\n".join(path.read_text() for path in sorted((PACKAGE / room).rglob("*.py")))
    literals = set(re.findall(r"\"(\w+)\"", code))
    unread = [name for name in sqlfiles.names(room) if name not in literals]
    assert not unread, f"blocks of {room}/queries.sql that no code reads: {unread}"
