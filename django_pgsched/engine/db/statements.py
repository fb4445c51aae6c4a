"""The named statements run: a server-binding cursor, rows read by column name.

Each named block of ``queries.sql`` runs through :func:`fetch` (its rows) or
:func:`execute` (its row count).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor as DjangoServerBindingCursor
from psycopg._queries import PostgresQuery

from ...conf import get_settings
from .. import queries

# What psycopg's conversion of a query's text yields (query, formats, order, parts), when
# its query objects hold these (every psycopg 3 so far); else each text is parsed each time.
_CONVERTED_ATTRS = ("query", "_want_formats", "_order", "_parts")
_CACHEABLE = set(_CONVERTED_ATTRS) <= set(getattr(PostgresQuery, "__slots__", ()))
_converted: dict[str, tuple[Any, ...]] = {}
_MAX_CONVERTED = 256  # the named statements are a few dozen texts


class _NamedStatementQuery(PostgresQuery):
    """psycopg's conversion of a query, with the text of each named statement parsed once.

    psycopg parses a query's text for its placeholders at every execution when
    the text is longer than 4 KiB (it caches only shorter ones), and
    ``executor_pass`` is longer: parsing it was a tenth of the executor's CPU
    per pass. The named statements are a fixed set of texts, so their parsed
    form is kept here, as psycopg keeps a short query's; the parameters are
    still dumped at every execution.
    """

    def convert(self, query: Any, vars: Any) -> None:
        if not _CACHEABLE or vars is None or not isinstance(query, str):
            super().convert(query, vars)
            return
        done = _converted.get(query)
        if done is None:
            super().convert(query, vars)
            if len(_converted) < _MAX_CONVERTED:
                _converted[query] = tuple(getattr(self, name) for name in _CONVERTED_ATTRS)
            return
        for name, value in zip(_CONVERTED_ATTRS, done, strict=True):
            setattr(self, name, value)
        self.dump(vars)


class ServerBindingCursor(DjangoServerBindingCursor):
    """Django's server-binding cursor; the text of each named statement is parsed once."""

    _query_cls = _NamedStatementQuery


R = TypeVar("R")


def cursor(conn: BaseDatabaseWrapper, row: Callable[..., Any] | None = None) -> Any:
    """A cursor for the named statements: server-side parameters, prepared after first use.

    Django's own cursors bind parameters on the client (the query text carries
    the values), which for the planner's and executor's array parameters costs
    more than the statements themselves. This is a psycopg server-binding
    cursor wrapped the way Django wraps its own, so query logging, execute
    wrappers and ``assertNumQueries`` still see every statement. With ``row``,
    each row is built as ``row(**columns)``, by column name.
    """
    conn.ensure_connection()
    with conn.wrap_database_errors:
        raw = conn.connection
        if get_settings().PREPARED_STATEMENTS:
            raw.prepare_threshold = 1
        if row is None:
            raw_cursor = ServerBindingCursor(raw)  # type: ignore[call-arg]
        else:
            raw_cursor = ServerBindingCursor(raw, row_factory=_by_name(row))  # type: ignore[call-arg]
        conn.validate_thread_sharing()
        if conn.queries_logged:
            return conn.make_debug_cursor(raw_cursor)  # type: ignore[arg-type]
        return conn.make_cursor(raw_cursor)  # type: ignore[arg-type]


def _by_name(record: Callable[..., Any]) -> Any:
    """A psycopg row factory: each row becomes ``record(**{column: value})``.

    For a ``NamedTuple`` record the columns are checked against its fields once
    (names and order); its rows are then built positionally, which is the same, and
    no later execution builds the cursor's description again.
    """

    def factory(cur: Any) -> Callable[[Sequence[Any]], Any]:
        made = _made.get(record)
        if made is not None:  # checked already
            return made
        names = [column.name for column in cur.description or ()]
        expected = getattr(record, "_fields", None)
        if expected is not None:
            if tuple(names) != tuple(expected):
                raise TypeError(
                    f"{record.__name__}: the statement returns columns {names}, "
                    f"the record expects {list(expected)}"
                )
            make: Callable[[Sequence[Any]], Any] = record._make  # type: ignore[attr-defined]
            _made[record] = make
            return make

        def by_keyword(values: Sequence[Any]) -> Any:
            return record(**dict(zip(names, values, strict=True)))

        return by_keyword

    return factory


_made: dict[Any, Callable[[Sequence[Any]], Any]] = {}  # a NamedTuple record's, once checked


def fetch(
    conn: BaseDatabaseWrapper, statement: queries.Statement[R], params: Mapping[str, Any]
) -> list[R]:
    """Run ``statement``; its rows, each read by column name into ``statement.row``.

    When nothing observes the connection's queries (no query log, no execute
    wrapper: production), the psycopg cursor is used without Django's wrapper
    around it; database errors are still Django's.
    """
    if conn.queries_logged or conn.execute_wrappers or conn.connection is None:
        with cursor(conn, statement.row) as cur:
            cur.execute(statement.sql, params)
            return list(cur.fetchall())
    conn.validate_no_broken_transaction()
    conn.validate_thread_sharing()
    with conn.wrap_database_errors:
        raw = conn.connection
        if get_settings().PREPARED_STATEMENTS:
            raw.prepare_threshold = 1
        raw_cursor = _statement_cursor(raw, statement.row)
        raw_cursor.execute(statement.sql, params)
        return list(raw_cursor.fetchall())


_CURSORS_ATTR = "_pgsched_cursors"


def _statement_cursor(raw: Any, row: Callable[..., Any]) -> Any:
    """The psycopg cursor :func:`fetch` runs the statements read into ``row`` on.

    One per connection and record: a new cursor per statement built its
    adapters and looked up the dumpers of every parameter and the loaders of
    every column again; this one keeps them (a fifth of the client's CPU per
    ``executor_pass``). It holds its last statement's rows until the next.
    """
    cursors: dict[Any, Any] | None = getattr(raw, _CURSORS_ATTR, None)
    if cursors is None:
        cursors = {}
        setattr(raw, _CURSORS_ATTR, cursors)
    raw_cursor = cursors.get(row)
    if raw_cursor is None or raw_cursor.closed:
        raw_cursor = ServerBindingCursor(raw, row_factory=_by_name(row))  # type: ignore[call-arg]
        cursors[row] = raw_cursor
    return raw_cursor


def execute(conn: BaseDatabaseWrapper, command: queries.Command, params: Mapping[str, Any]) -> int:
    """Run ``command`` (no rows); the number of rows it changed."""
    with cursor(conn) as cur:
        cur.execute(command.sql, params)
        return int(cur.rowcount)
