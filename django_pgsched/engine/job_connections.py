"""A slot thread's database connections, kept across the jobs it runs.

Django closes a request's connections before and after it when they are
unusable or older than ``CONN_MAX_AGE``; with Django's default of 0 that is a
new connection for every request. A slot thread runs one job after another, so
the same rule opened (and authenticated, and set up) a connection for every
job: at a few hundred short jobs a second that was most of a replica's work,
and a good part of its server's.

:class:`JobConnections` applies Django's rule with one change: a connection is
kept for at least ``PGSCHED["JOB_CONNECTION_MAX_AGE"]`` from when it was opened
(the longer of that and the alias's own ``CONN_MAX_AGE``; ``None`` there keeps
it for ever). It is still closed before the next job when

- an error made it unusable (Django's own check,
  ``close_if_unusable_or_obsolete``),
- the job left autocommit off, or left a transaction open on it (a raw
  ``BEGIN`` never committed): the next job must not inherit it.

``CONN_HEALTH_CHECKS`` is honoured as for a request: the first query of each
job checks a kept connection first. ``JOB_CONNECTION_MAX_AGE = None`` gives
exactly Django's request behaviour (``close_old_connections``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import close_old_connections, connections

logger = logging.getLogger(__name__)


class JobConnections:
    """One per slot thread: call :meth:`tidy` before and after each job."""

    def __init__(self, keep_for: float | None) -> None:
        self.keep_for = keep_for
        # per alias, the connection whose age this object already extended
        self._extended: dict[str, Any] = {}

    def tidy(self) -> None:
        keep_for = self.keep_for
        if keep_for is None:
            close_old_connections()
            return
        for conn in connections.all(initialized_only=True):
            raw = conn.connection
            if raw is None:
                self._extended.pop(conn.alias, None)
                continue
            if self._extended.get(conn.alias) is not raw:
                self._extend(conn, raw, keep_for)
            if _left_in_transaction(conn, raw):
                logger.warning(
                    "a job left a transaction open on database %r; its connection was closed",
                    conn.alias,
                )
                conn.close()
                continue
            conn.close_if_unusable_or_obsolete()

    def _extend(self, conn: Any, raw: Any, keep_for: float) -> None:
        """A connection opened since the last look: keep it ``keep_for`` seconds at least."""
        self._extended[conn.alias] = raw
        max_age = conn.settings_dict.get("CONN_MAX_AGE", 0)
        if max_age is None or conn.close_at is None:
            return  # persistent for ever already
        # Django set close_at = opened + CONN_MAX_AGE when it connected
        conn.close_at = conn.close_at - max_age + max(max_age, keep_for)


def _left_in_transaction(conn: Any, raw: Any) -> bool:
    """Autocommit is on, no atomic block is open, yet the session is inside a transaction."""
    if conn.vendor != "postgresql" or conn.in_atomic_block or not conn.get_autocommit():
        return False
    info = getattr(raw, "info", None)  # psycopg 3
    if info is not None:
        import psycopg

        return bool(info.transaction_status != psycopg.pq.TransactionStatus.IDLE)
    status = getattr(raw, "get_transaction_status", None)  # psycopg2
    if status is None:
        return False
    import psycopg2.extensions  # type: ignore[import-untyped, unused-ignore]

    return bool(status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE)
