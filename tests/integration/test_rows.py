"""Every named statement's output columns are exactly its record's fields, in order.

Each block of ``queries.sql`` is prepared on the server (libpq's prepare and
describe, through psycopg's public ``pq`` layer: nothing runs) and the columns the
server says it returns are compared with the fields of the record ``rows.py`` reads
it into. A ``Command`` returns no columns. A statement whose columns drift from its
record (a column renamed, added, dropped, or moved) fails here, by name, before any
code path reaches it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from django.db import connection

from django_pgsched.engine import queries

PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]|%%")


def server_sql(sql: str) -> str:
    """``%(name)s`` (or ``b``, ``t``) as ``$n``, one number per name; ``%%`` as ``%``."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return PLACEHOLDER.sub(number, sql)


def fields_of(record: type[Any]) -> list[str]:
    if dataclasses.is_dataclass(record):
        return [f.name for f in dataclasses.fields(record)]
    return list(record._fields)


def described_columns(sql: str) -> list[str]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    name = b"pgsched_rows_check"
    result = pgconn.prepare(name, server_sql(sql).encode())
    assert result.error_message == b"", result.error_message.decode()
    try:
        described = pgconn.describe_prepared(name)
        assert described.error_message == b"", described.error_message.decode()
        return [described.fname(i).decode() for i in range(described.nfields)]
    finally:
        pgconn.exec_(b"DEALLOCATE " + name)


@pytest.mark.parametrize("statement", queries.STATEMENTS, ids=lambda s: s.name)
def test_a_statements_columns_are_its_records_fields(db, statement):
    columns = described_columns(statement.sql)
    if isinstance(statement, queries.Command):
        assert columns == [], f"{statement.name} is a Command but returns {columns}"
    else:
        assert columns == fields_of(statement.row), (
            f"{statement.name} returns {columns}, {statement.row.__name__} reads "
            f"{fields_of(statement.row)}"
        )


def test_every_named_block_is_run_as_a_statement_or_a_command():
    assert sorted(s.name for s in queries.STATEMENTS) == queries.names()
