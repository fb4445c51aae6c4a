"""The executors' wake-up after ``enqueue()``: one ``NOTIFY pgsched_wait`` once committed.

The run's INSERT does not notify: PostgreSQL holds its notify lock (one per
cluster) from the notifying transaction's pre-commit until its commit record
is flushed, so enqueues that notify commit one at a time, each with a WAL
flush of its own, where plain INSERTs share one (group commit). The wake-up is
sent instead as a statement of its own after the commit (Django's
``on_commit``, at once in autocommit): it writes no WAL and holds that lock for
microseconds, it is sent only when the run is visible, and a transaction that
rolls back sends none.

The ids enqueued on a connection are gathered until the next wake-up, so a
transaction that enqueues many tasks sends one ``NOTIFY`` at its commit.
Notifications remain a latency optimisation (:mod:`django_pgsched.engine.notifications`):
a wake-up lost with the client's connection costs at most
``PGSCHED["EXECUTOR_POLL_INTERVAL"]``.
"""

from __future__ import annotations

from django.db import connections, transaction

from ..engine import queries

#: ids named in one payload (the rest are woken by the same notification)
PAYLOAD_IDS = 50
_PENDING = "_pgsched_task_wakeup"


def after_commit(alias: str, run_id: int) -> None:
    """Wake the executors for ``run_id`` once the transaction open on ``alias`` commits."""
    connection = connections[alias]
    pending: list[int] | None = getattr(connection, _PENDING, None)
    if pending is None:
        pending = []
        setattr(connection, _PENDING, pending)
    pending.append(run_id)
    transaction.on_commit(lambda: _send(alias), using=alias, robust=True)


def _send(alias: str) -> None:
    """Send one notification for the ids gathered so far; nothing if an earlier hook sent it.

    A hook whose savepoint rolled back is dropped by Django, but its id stays
    gathered: the next wake-up names it too, which wakes nobody in vain.
    """
    connection = connections[alias]
    pending: list[int] = getattr(connection, _PENDING, [])
    if not pending:
        return
    ids, pending[:] = pending[:PAYLOAD_IDS], []
    with connection.cursor() as cursor:
        cursor.execute(queries.WAKE_EXECUTORS.sql, {"payload": ",".join(str(i) for i in ids)})
