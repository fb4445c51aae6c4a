"""Every named statement's output columns are exactly its record's fields, in order.

Each block of ``queries.sql`` is prepared on the server (libpq's prepare and
describe, through psycopg's public ``pq`` layer: nothing runs) and the columns the
server says it returns are compared with the fields of the record ``rows.py`` reads
it into. A ``Command`` returns no columns. A statement whose columns drift from its
record (a column renamed, added, dropped, or moved) fails here, by name, before any
code path reaches it.

The other rooms' statements (each package's ``queries.sql``, read by
:mod:`django_pgsched.sqlfiles`) have no records: each is prepared the same way, as
its module runs it, so that one naming a column or a function the schema lacks fails
here too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_pgsched import sqlfiles
from django_pgsched.admin import schedule_columns
from django_pgsched.broker import publisher, schema
from django_pgsched.delivery import breaker
from django_pgsched.engine import queries, stranded
from django_pgsched.ledger import backfill, stalls, timeline
from django_pgsched.ops import checks, metrics
from django_pgsched.partitions import layout, retention

PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]|%%|%[sbt]")


def server_sql(sql: str) -> str:
    """``%(name)s`` (or ``b``, ``t``) as ``$n``, one number per name; ``%s`` as the next
    number; ``%%`` as ``%``."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        name = match.group(1) or f"%s {len(numbers)}"  # each %s a parameter of its own
        return f"${numbers.setdefault(name, len(numbers) + 1)}"

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
    # or filled in first (queries.TEMPLATES), and prepared below as it runs
    named = [s.name for s in queries.STATEMENTS] + list(queries.TEMPLATES)
    assert sorted(named) == queries.names()


#: The statements of the rooms' files, as their modules run them (templates filled in;
#: a month's table named). The outbox's DDL (verbatim scripts of several statements)
#: cannot be prepared: ``test_broker_claims.py`` runs it.
ROOM_STATEMENTS = {
    "partitions.month_layout": layout.LAYOUT_SQL,
    "partitions.month_state": retention.STATE_SQL.format(table="pgsched_job_run"),
    "admin.recent_runs": schedule_columns.RECENT_RUNS_SQL,
    "ops.backlog": metrics.BACKLOG_SQL,
    "ops.tenant_running": metrics.TENANT_RUNNING_SQL,
    "ops.tenant_due": metrics.TENANT_DUE_SQL,
    "ops.tenant_paused": metrics.TENANT_PAUSED_SQL,
    "ops.audit_coverage": checks.AUDIT_COVERAGE_SQL,
    "delivery.admit": breaker.ADMIT_SQL,
    "delivery.failure": breaker.FAILURE_SQL,
    "delivery.hold": breaker.HOLD_SQL,
    "delivery.success": breaker.SUCCESS_SQL,
    "engine.stranded_runs": stranded.STRANDED_SQL,
    "ledger.timeline_state": timeline.STATE_SQL,
    "ledger.timeline_runs": timeline.RUNS_SQL,
    "ledger.timeline_ranges": timeline.RANGES_SQL,
    "ledger.backfill_unplanned": backfill.UNPLANNED_SQL,
    "ledger.backfill_existing": backfill.EXISTING_SQL,
    "ledger.backfill_existing_count": backfill.EXISTING_COUNT_SQL,
    "ledger.backfill_ensure_months": backfill.ENSURE_MONTHS_SQL,
    "ledger.backfill_insert": backfill.INSERT_SQL,
    "ledger.backfill_ranges": backfill.RANGES_SQL,
    "ledger.stall_candidates": stalls.CANDIDATES_SQL,
    "broker.outbox_take": publisher.TAKE,
    "broker.outbox_next_due": publisher.NEXT_DUE,
    "broker.outbox_delete": publisher.DELETE,
    "broker.outbox_lag": publisher.LAG,
    "broker.outbox_state": schema.STATE,
}
ROOM_SCRIPTS = [schema.TABLE, schema.FUNCTION, schema.TRIGGERS]
#: The parameters whose type the server cannot infer from the statement, cast to the
#: type psycopg sends them with (a timedelta as an interval)
ROOM_TYPES = {
    "delivery.admit": {"park": "interval"},
    "ledger.stall_candidates": {"grace": "interval", "lookahead": "interval", "slack": "interval"},
}


@pytest.mark.parametrize("name", ROOM_STATEMENTS)
def test_a_rooms_statement_is_prepared(db, name):
    sql = ROOM_STATEMENTS[name]
    for parameter, type_ in ROOM_TYPES.get(name, {}).items():
        sql = sql.replace(f"%({parameter})s", f"%({parameter})s::{type_}")
    described_columns(sql)


def test_every_block_of_the_rooms_is_prepared_or_run_as_a_script():
    # each block's text, but for its template fields, is in a statement prepared above
    # (a fragment in the statements it is filled into), or is one of the scripts
    texts = [*ROOM_STATEMENTS.values(), *ROOM_SCRIPTS]
    run_as_statements = {s.name for s in queries.STATEMENTS}
    for path in sorted(Path(sqlfiles.__file__).parent.glob("*/queries.sql")):
        room = path.parent.name
        for name, sql in sqlfiles.load(room).items():
            if room == "engine" and name in run_as_statements:
                continue
            pieces = [p.strip() for p in re.split(r"\{\w+\}", sql) if p.strip()]
            assert all(any(p in text for text in texts) for p in pieces), f"{room}.{name}"
