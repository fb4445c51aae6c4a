"""The loops' sessions: configured once per connection, dropped after a database error."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ...conf import Settings, get_settings
from .identity import worker_id

logger = logging.getLogger(__name__)

_CONFIGURED_ATTR = "_pgsched_session"


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
