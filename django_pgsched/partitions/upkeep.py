"""Months made ahead, by every replica's maintenance loop, without a leader.

Each pass makes sure the current month and ``PGSCHED["PARTITIONS_AHEAD"]``
months after it exist in both tables. A month is made in two short
transactions, each under the month's advisory lock taken with
``pg_try_advisory_lock`` (a replica that finds it taken leaves the month to
whoever holds it: nobody waits, nothing errors):

1. ``pgsched_partition_create``: the month's table, standalone, with the
   partitioned table's columns, CHECKs and indexes (named after them). It locks
   nothing that claims or inserts use.
2. ``pgsched_partition_attach``: ``ATTACH PARTITION``, which takes SHARE UPDATE
   EXCLUSIVE on the partitioned table (claims, inserts and updates go on; the
   runs name their schedule through a trigger, not a foreign key, so no lock on
   ``pgsched_schedule``). It waits at most :data:`ATTACH_LOCK_TIMEOUT` for it: a
   replica that cannot get it by then tries again at its next pass, so no
   planner queues behind it for longer.

Each pass also moves the horizon of the live months (``pgsched_run_horizon``,
:func:`advance_horizon`): where the months that may hold an unfinished run
start, which the executor's passes read from (docs/explanation/partitions.md,
"Where the claim looks").

A replica killed between the steps leaves a standalone, empty table: the next
pass (of any replica) drops it and makes it anew, with the current columns,
then attaches it. Months left "detach pending" by a killed retention are
finished here too (``DETACH PARTITION ... FINALIZE``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import Settings, get_settings
from ..engine import db, failpoints, queries
from . import layout
from .months import TABLES, add_months, known, month_start, partition_name

logger = logging.getLogger(__name__)

ATTACH_LOCK_TIMEOUT = "1s"
# DETACH ... CONCURRENTLY (and FINALIZE) hold only SHARE UPDATE EXCLUSIVE while they wait
# for the transactions that may still read the month: a longer wait queues nobody
DETACH_LOCK_TIMEOUT = "10s"


@dataclass(frozen=True)
class UpkeepResult:
    created: int = 0  # tables made and attached (a month is two)
    repaired: int = 0  # months whose detach was finished
    busy: int = 0  # steps left to another replica, or to the next pass (a lock was taken)
    ahead: int = 0  # whole months ready after the current one
    # where the months that may hold an unfinished run start (pgsched_run_horizon), as
    # this pass left it; None when another session held it (the next pass moves it)
    live_since: datetime | None = None


class Upkeep:
    """Makes the months ahead. ``run_once()`` does one pass."""

    def __init__(self, *, settings: Settings | None = None, using: str | None = None) -> None:
        self.settings = settings or get_settings()
        self.using = using or self.settings.DATABASE_ALIAS
        self.last: UpkeepResult | None = None

    def run_once(self, now: datetime | None = None) -> UpkeepResult:
        created = busy = 0
        with db.session("maintenance", self.using) as conn:
            if now is None:
                now = db.fetch(conn, queries.DATABASE_NOW, {})[0].now
            state, repaired = settled_layout(conn)
            current = month_start(now)
            for k in range(self.settings.PARTITIONS_AHEAD + 1):
                month = add_months(current, k)
                missing = [t for t in TABLES if month not in state.attached[t]]
                if not missing:
                    continue
                if not layout.try_lock(conn, month):
                    busy += 1
                    continue
                try:
                    for table in missing:
                        made = make_month(conn, table, month)
                        created += made is True
                        busy += made is None
                finally:
                    layout.unlock(conn, month)
            if created or busy:
                state = layout.read(conn)  # what this pass, or another replica, made
            known.add(conn.alias, (m for m in state.complete() if m >= current))
            live_since = advance_horizon(conn)
            result = UpkeepResult(created, repaired, busy, state.months_ahead(now), live_since)
        if created:
            logger.info("partitions: %d table(s) of months ahead made", created)
        self.last = result
        return result


def advance_horizon(conn: BaseDatabaseWrapper) -> datetime | None:
    """Move ``pgsched_run_horizon`` to the oldest month holding an unfinished run.

    Never later than the previous month's start; None (left as it is) when another
    session holds its row. The executor's passes read only the months from there on.
    """
    with layout.step(conn, ATTACH_LOCK_TIMEOUT) as cursor:
        cursor.execute("SELECT pgsched_run_horizon_advance()")
        live_since: datetime | None = cursor.fetchone()[0]
        return live_since


def make_month(conn: BaseDatabaseWrapper, table: str, month: datetime) -> bool | None:
    """Create, then attach, ``table``'s ``month`` (the caller holds the month's lock).

    False when another replica had attached it; None when the attach could not get its
    locks in time (the next pass tries again).
    """
    with layout.step(conn, ATTACH_LOCK_TIMEOUT) as cursor:
        cursor.execute("SELECT pgsched_partition_create(%s, %s)", [table, month])
        if not cursor.fetchone()[0]:
            return False  # attached already (by a replica that held the lock just before)
    failpoints.hit("partitions.before_attach")
    try:
        with layout.step(conn, ATTACH_LOCK_TIMEOUT) as cursor:
            cursor.execute("SELECT pgsched_partition_attach(%s, %s)", [table, month])
            return bool(cursor.fetchone()[0])
    except OperationalError as exc:  # lock_timeout: someone held a lock; not an error
        logger.info("partitions: %s waits for its locks: %s", partition_name(table, month), exc)
        return None


def settled_layout(conn: BaseDatabaseWrapper) -> tuple[layout.Layout, int]:
    """The months' layout once the detaches left pending are finished, and how many were
    (read again only when one was)."""
    state = layout.read(conn)
    finished = finalize_detaches(conn, state)
    return (layout.read(conn) if finished else state), finished


def finalize_detaches(conn: BaseDatabaseWrapper, state: layout.Layout) -> int:
    """Finish the detaches a killed replica left pending (``DETACH ... FINALIZE``)."""
    done = 0
    for table in TABLES:
        for month in sorted(state.pending[table]):
            if conn.in_atomic_block:
                continue  # FINALIZE cannot run in a transaction block (a test's)
            if not layout.try_lock(conn, month):
                continue
            old = layout.ddl_lock_timeout(conn, DETACH_LOCK_TIMEOUT)
            try:
                with conn.cursor() as cursor:
                    cursor.execute(
                        f"ALTER TABLE {table} DETACH PARTITION "
                        f"{partition_name(table, month)} FINALIZE"
                    )
                done += 1
                logger.warning(
                    "partitions: finished the detach of %s that a replica left halfway",
                    partition_name(table, month),
                )
            except DatabaseError as exc:
                logger.info("partitions: %s still detaching: %s", partition_name(table, month), exc)
            finally:
                layout.ddl_lock_timeout(conn, old)
                layout.unlock(conn, month)
    return done
