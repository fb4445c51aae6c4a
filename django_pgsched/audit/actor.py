"""Who is changing schedules: the session setting ``pgsched.actor`` that the audit trigger reads.

The trigger on ``pgsched_schedule`` takes the actor of a change from
``current_setting('pgsched.actor')``; a change made with nothing set is
recorded as ``"sql"``. The library sets it on every path it owns:

* the admin: ``user:<username>`` for the whole request that changes schedules;
* the settings sync: ``settings sync``;
* the scheduler's loops: ``<loop> <worker id>`` on their own sessions
  (the planner marks broken schedules);
* the ORM (``Schedule.save()``, ``delete()`` and the queryset's ``update()``
  and ``delete()``): ``orm``, but only when nothing else is set.

Your own code can say who it acts for with :func:`actor`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connections

from ..conf import get_settings

SETTING = "pgsched.actor"
ORM = "orm"
SYNC = "settings sync"
MAX_LENGTH = 200


def for_user(username: str) -> str:
    """The actor name of a Django user."""
    return f"user:{username}"


@contextmanager
def actor(name: str, *, using: str | None = None) -> Iterator[None]:
    """Record schedule changes made inside the block as made by ``name``.

    Outside a transaction the setting is the session's, reset on exit; inside
    one it is the transaction's (``set_config(..., true)``), so a rollback
    cannot leave it behind. Nested blocks restore the outer name.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"actor: expected a non-empty name, got {name!r}")
    alias = using or get_settings().DATABASE_ALIAS
    conn = connections[alias]
    local = conn.in_atomic_block
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting(%s, true), set_config(%s, %s, %s)",
            [SETTING, SETTING, name[:MAX_LENGTH], local],
        )
        previous = cursor.fetchone()[0] or ""
    try:
        yield
    finally:
        if conn.connection is not None and not conn.needs_rollback:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config(%s, %s, %s)", [SETTING, previous, conn.in_atomic_block]
                )


@contextmanager
def orm_unless_named(using: str) -> Iterator[None]:
    """Inside a transaction: name the actor ``orm`` for the block, unless one is set already.

    The name is cleared again after the block, so plain SQL later in the same
    transaction is not taken for the ORM's.
    """
    conn = connections[using]
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT set_config(%s, %s, true) WHERE coalesce(current_setting(%s, true), '') = ''",
            [SETTING, ORM, SETTING],
        )
        named = cursor.fetchone() is not None
    yield
    if named and not conn.needs_rollback:
        with conn.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, '', true)", [SETTING])
