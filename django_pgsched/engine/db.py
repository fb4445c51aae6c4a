"""Database sessions of the scheduler's own loops.

Each loop thread has its own Django connection. Before a pass, :func:`session`
makes sure it is open and configured: ``lock_timeout``,
``statement_timeout`` and ``idle_in_transaction_session_timeout`` (so a frozen
replica cannot hold rows hostage: the server ends its session and releases
its locks) and an ``application_name`` that names the loop. After a database
error the connection is closed and the next pass opens a fresh one, which is
how the loops survive a restarted or unreachable server.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.base import ServerBindingCursor as DjangoServerBindingCursor
from psycopg._queries import PostgresQuery

from ..conf import Settings, get_settings
from . import queries

logger = logging.getLogger(__name__)

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

_CONFIGURED_ATTR = "_pgsched_session"


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_worker_id: str | None = None


def set_worker_id(worker_id: str) -> None:
    """Name this process's scheduler sessions (``application_name``) after its replica.

    The admin's replica page and ``pg_stat_activity`` show live replicas by
    this name; a name longer than PostgreSQL's 63 bytes is cut.
    """
    global _worker_id
    _worker_id = worker_id


def worker_id() -> str:
    return _worker_id or default_worker_id()


def _ms(seconds: float) -> str:
    return f"{max(0, round(seconds * 1000))}ms"


#: Query planner settings of a role's sessions. The executor's claim must read
#: ``pgsched_run_claim_order_idx`` in order and stop at its limit, whatever the
#: statistics say: a generic plan does not know the limit (PostgreSQL assumes
#: a tenth of the rows) nor how many runs are due, and when the statistics
#: show few claimable runs (a history of finished ones, none pending) it may
#: read them all from another index (``pgsched_run_claimable_idx``, or a bitmap
#: of this one) and sort them, which costs a pass every due run: 140 ms a pass
#: with 100,000 due where the ordered scan takes 0.03 ms. Without sorts, the
#: ordered scan is the only plan left (and ``next_due`` reads
#: ``pgsched_run_claimable_idx`` in order up to its first row). A statement
#: that cannot do without a sort (the guard's ``guard_decide``) still sorts,
#: but its estimate carries the disabled sort's cost, which is why the
#: sessions run without JIT (below). tests/integration/test_plans.py checks
#: the claim's plan under these settings.
#:
#: Nor does the executor read a month of runs whole (``enable_seqscan`` off):
#: every one of its statements finds its rows through an index, and a generic
#: plan made while the month was small (the replica started before a burst was
#: planned) joined the claim's update to the month by a sequential scan for
#: each claimed run, which the plan kept once the month held 100,000: 400 ms a
#: pass (``bench/fairness.py``, auto_explain), where the primary key takes 0.1.
ROLE_PLANNER_SETTINGS: dict[str, dict[str, str]] = {
    "executor": {"enable_sort": "off", "enable_seqscan": "off"}
}


def configure(conn: BaseDatabaseWrapper, role: str, settings: Settings | None = None) -> None:
    """Apply the scheduler's session settings to ``conn`` if it is a new connection."""
    settings = settings or get_settings()
    conn.ensure_connection()
    raw = conn.connection
    if getattr(raw, _CONFIGURED_ATTR, None) == role:
        return
    # every role's planner settings, the others' back to the server's (a connection
    # may serve several roles one after the other: testing.run_due)
    planner_settings = {
        name: ROLE_PLANNER_SETTINGS.get(role, {}).get(name)
        for name in sorted({name for names in ROLE_PLANNER_SETTINGS.values() for name in names})
    }
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('lock_timeout', %s, false),"
            " set_config('statement_timeout', %s, false),"
            " set_config('idle_in_transaction_session_timeout', %s, false),"
            " set_config('application_name', %s, false),"
            " set_config('pgsched.actor', %s, false),"  # who, in the schedule audit trail
            " set_config('plan_cache_mode', %s, false),"
            # No JIT: every statement of the scheduler is short, and JIT compiles a
            # statement whose estimated cost passes jit_above_cost at every execution.
            # With enable_sort off (the executor's sessions) any statement that must
            # sort, such as the guard's guard_decide, is estimated above it: each
            # guard pass cost 0.7-1.1 s of JIT compilation and 0.15 ms of execution
            # (bench, 4 replicas, pg_stat_statements' jit_* columns).
            " set_config('jit', 'off', false)"
            + "".join(
                ", set_config(%s, coalesce(%s,"
                " (SELECT reset_val FROM pg_settings WHERE name = %s)), false)"
                for _ in planner_settings
            ),
            [
                _ms(settings.LOCK_TIMEOUT.total_seconds()),
                _ms(settings.STATEMENT_TIMEOUT.total_seconds()),
                _ms(settings.IDLE_IN_TRANSACTION_TIMEOUT.total_seconds()),
                f"pgsched {role} {worker_id()}"[:63],
                f"{role} {worker_id()}"[:200],
                # The named statements are prepared (PREPARED_STATEMENTS): plan them once.
                # Under "auto" PostgreSQL re-planned executor_pass at every execution (its
                # generic plan's estimate never beat the custom plans'), which cost more
                # server CPU than executing it; tests/integration/test_plans.py checks the
                # generic plans use the indexes the custom ones do.
                "force_generic_plan" if settings.PREPARED_STATEMENTS else "auto",
                *(item for name, value in planner_settings.items() for item in (name, value, name)),
            ],
        )
    setattr(raw, _CONFIGURED_ATTR, role)


@contextmanager
def session(role: str, using: str | None = None) -> Iterator[BaseDatabaseWrapper]:
    """This thread's configured connection; closed again if the pass hits a database error."""
    alias = using or get_settings().DATABASE_ALIAS
    conn = connections[alias]
    try:
        configure(conn, role)
        yield conn
    except (OperationalError, InterfaceError):
        discard(conn)
        raise
    except DatabaseError:
        if not conn.in_atomic_block and conn.connection is not None and not conn.is_usable():
            discard(conn)
        raise


# SQLSTATE classes of a statement refused for what it holds, where one row may be at
# fault: data, integrity, triggers, routines, PL/pgSQL's RAISE, program limits. Not the
# connection, timeouts, deadlocks or the server going away (those the runner retries).
ROW_FAULTS = frozenset({"09", "22", "23", "27", "38", "39", "42", "44", "54", "P0"})


def refused_for_a_row(exc: DatabaseError) -> bool:
    """Whether ``exc`` refused a statement for what a row holds (retry it row by row)."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
    return sqlstate[:2] in ROW_FAULTS


def discard(conn: BaseDatabaseWrapper) -> None:
    """Drop a connection that may be broken; the next pass reconnects."""
    try:
        if conn.in_atomic_block:
            return  # the atomic block's exit rolls back; closing inside it is not allowed
        conn.close()
    except Exception:  # pragma: no cover - closing a dead socket may fail in odd ways
        logger.debug("closing a broken connection failed", exc_info=True)
        conn.connection = None


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
    (names and order); its rows are then built positionally, which is the same.
    """
    if getattr(record, "_fields", None) is not None and record in _checked:
        return _checked[record]

    def factory(cur: Any) -> Callable[[Sequence[Any]], Any]:
        names = [column.name for column in cur.description or ()]
        expected = getattr(record, "_fields", None)
        if expected is not None:
            if tuple(names) != tuple(expected):
                raise TypeError(
                    f"{record.__name__}: the statement returns columns {names}, "
                    f"the record expects {list(expected)}"
                )
            make: Callable[[Sequence[Any]], Any] = record._make  # type: ignore[attr-defined]
            _checked[record] = lambda cur: make
            return make

        def by_keyword(values: Sequence[Any]) -> Any:
            return record(**dict(zip(names, values, strict=True)))

        return by_keyword

    return factory


_checked: dict[Any, Any] = {}


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


def can_pipeline(conn: BaseDatabaseWrapper) -> bool:
    """Whether ``conn`` can send several statements before reading their results.

    Only outside a transaction of Django's (in autocommit, the statements sent
    until the pipeline's sync form one implicit transaction) and with a libpq
    that has pipeline mode.
    """
    return (
        conn.connection is not None
        and not conn.in_atomic_block
        and conn.get_autocommit()
        and psycopg.Pipeline.is_supported()
    )


class Pipelined:
    """One transaction's statements in pipeline mode (:func:`transaction_in_two_round_trips`)."""

    def __init__(self, conn: BaseDatabaseWrapper, pipeline: Any) -> None:
        self.conn = conn
        self.pipeline = pipeline
        self.committed = False

    def fetch(self, statement: queries.Statement[R], params: Mapping[str, Any]) -> list[R]:
        """Run ``statement`` (with whatever is queued) and read its rows: one round trip.

        It ends with a sync, so the server reports the transaction idle while
        the caller works on the rows: ``idle_in_transaction_session_timeout``
        then ends the session of a replica that froze here, releasing its
        locks. (After a mere flush the server would wait without a timeout.)
        """
        cursor = self.send(statement, params)
        self.pipeline.sync()
        return rows(cursor)

    def send(
        self, statement: queries.Statement[Any] | queries.Command, params: Mapping[str, Any]
    ) -> Any:
        """Queue ``statement``; read its rows with :func:`rows` after :meth:`commit`."""
        raw = self.conn.connection
        cursor: Any
        if isinstance(statement, queries.Statement):
            cursor = ServerBindingCursor(raw, row_factory=_by_name(statement.row))  # type: ignore[call-arg]
        else:
            cursor = ServerBindingCursor(raw)  # type: ignore[call-arg]
        cursor.execute(statement.sql, params)
        return cursor

    def commit(self) -> None:
        """Send what is queued and the ``COMMIT`` together, and wait: one round trip."""
        self.conn.connection.execute("COMMIT")
        self.pipeline.sync()
        self.committed = True


@contextmanager
def transaction_in_two_round_trips(conn: BaseDatabaseWrapper) -> Iterator[Pipelined]:
    """A transaction whose statements travel in pipeline mode (see :func:`can_pipeline`).

    The first :meth:`Pipelined.fetch` carries the ``BEGIN``;
    :meth:`Pipelined.commit` sends the statements queued with
    :meth:`Pipelined.send` with the ``COMMIT``. An exception inside the block
    (a failed statement, a failpoint) rolls the transaction back; a killed
    process never sent its ``COMMIT``, and a frozen one is ended by the
    server's idle-in-transaction timeout.

    The transaction is explicit because psycopg ends a pipeline with a sync
    even when the block raised, and a sync would commit an implicit one.
    """
    raw = conn.connection
    with conn.wrap_database_errors, raw.pipeline() as pipeline:
        raw.execute("BEGIN")
        pipelined = Pipelined(conn, pipeline)
        try:
            yield pipelined
        except BaseException:
            if not pipelined.committed:
                raw.execute("ROLLBACK")  # the pipeline's exit sends it with its sync
            raise
        if not pipelined.committed:
            raw.execute("ROLLBACK")


def rows(raw_cursor: Any) -> list[Any]:
    """The rows of a statement queued with :func:`send` (after the pipeline's sync)."""
    try:
        return list(raw_cursor.fetchall()) if raw_cursor.description else []
    finally:
        raw_cursor.close()


def execute(conn: BaseDatabaseWrapper, command: queries.Command, params: Mapping[str, Any]) -> int:
    """Run ``command`` (no rows); the number of rows it changed."""
    with cursor(conn) as cur:
        cur.execute(command.sql, params)
        return int(cur.rowcount)


class SessionPool:
    """Scheduler sessions for work done on job threads (``RunContext.ensure_lease()``).

    Not the job's own connection, which may be inside the job's transaction (a
    fenced renewal there would not be committed, nor seen, until the job's
    transaction is): separate connections, configured like a loop's session
    (``application_name`` ``pgsched <role> <worker id>``, the timeouts), in
    autocommit, kept idle between uses. At most as many as uses at once; closed
    when the pool is garbage-collected, or by :meth:`close`.
    """

    def __init__(self, using: str, role: str) -> None:
        self.using = using
        self.role = role
        self._idle: list[BaseDatabaseWrapper] = []
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._idle)

    @contextmanager
    def session(self) -> Iterator[BaseDatabaseWrapper]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = connections.create_connection(self.using)
            conn.inc_thread_sharing()  # used by one thread at a time, not always the same
        try:
            configure(conn, self.role)
            yield conn
        except (OperationalError, InterfaceError):
            discard(conn)
            raise
        with self._lock:
            self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            _close_all(self._idle)


def _close_all(idle: list[BaseDatabaseWrapper]) -> None:
    while idle:
        conn = idle.pop()
        try:
            conn.close()
        except Exception:  # pragma: no cover - closing a dead socket may fail in odd ways
            logger.debug("closing a pooled session failed", exc_info=True)
