"""A transaction in pipeline mode: its statements sent together, two round trips."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import transaction as django_transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import queries
from .statements import R, ServerBindingCursor, _by_name, execute, fetch


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


class _Ran:
    """The rows of a statement :class:`InDjangoTransaction` ran as it was sent."""

    def __init__(self, found: list[Any]) -> None:
        self.found = found


class InDjangoTransaction(Pipelined):
    """:class:`Pipelined`'s interface inside a transaction of Django's (a test's, or
    one made where pipeline mode is not available): each statement runs as it is
    sent, through :func:`~.statements.fetch` (so query logs and
    ``assertNumQueries`` see it), and Django's atomic block commits."""

    def __init__(self, conn: BaseDatabaseWrapper) -> None:
        super().__init__(conn, None)

    def fetch(self, statement: queries.Statement[R], params: Mapping[str, Any]) -> list[R]:
        return fetch(self.conn, statement, params)

    def send(
        self, statement: queries.Statement[Any] | queries.Command, params: Mapping[str, Any]
    ) -> Any:
        if isinstance(statement, queries.Statement):
            return _Ran(fetch(self.conn, statement, params))
        execute(self.conn, statement, params)
        return _Ran([])

    def commit(self) -> None:
        self.committed = True  # at the end of the atomic block


@contextmanager
def one_transaction(conn: BaseDatabaseWrapper) -> Iterator[Pipelined]:
    """One transaction: in pipeline mode when ``conn`` can (:func:`can_pipeline`, two
    round trips), else an atomic block of Django's; the same interface in both."""
    if can_pipeline(conn):
        with transaction_in_two_round_trips(conn) as pipelined:
            yield pipelined
        return
    with django_transaction.atomic(using=conn.alias), conn.wrap_database_errors:
        yield InDjangoTransaction(conn)


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
    if isinstance(raw_cursor, _Ran):
        return raw_cursor.found
    try:
        return list(raw_cursor.fetchall()) if raw_cursor.description else []
    finally:
        raw_cursor.close()
