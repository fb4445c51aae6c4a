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

from .identity import default_worker_id, set_worker_id, worker_id
from .pipeline import (
    InDjangoTransaction,
    Pipelined,
    can_pipeline,
    one_transaction,
    rows,
    transaction_in_two_round_trips,
)
from .sessions import (
    ROLE_PLANNER_SETTINGS,
    SessionPool,
    configure,
    discard,
    refused_for_a_row,
    session,
)
from .statements import ServerBindingCursor, cursor, execute, fetch

__all__ = [
    "ROLE_PLANNER_SETTINGS",
    "InDjangoTransaction",
    "Pipelined",
    "ServerBindingCursor",
    "SessionPool",
    "can_pipeline",
    "configure",
    "cursor",
    "default_worker_id",
    "discard",
    "execute",
    "fetch",
    "one_transaction",
    "refused_for_a_row",
    "rows",
    "session",
    "set_worker_id",
    "transaction_in_two_round_trips",
    "worker_id",
]
