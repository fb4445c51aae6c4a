"""Retention by whole months: detach, then drop (or keep), never a row-by-row DELETE.

A month goes once it ended longer than ``PGSCHED["RETENTION"]`` ago, every run
in it is terminal, and the last of them finished longer than ``RETENTION``
ago. Then, under the month's advisory lock (``pg_try_advisory_lock``: one
replica does it, the others pass):

1. its runs are detached (``DETACH PARTITION ... CONCURRENTLY``: claims and
   inserts go on; it waits for the transactions that might still read them);
2. the detached table is read again, now that nothing can write it: if a run in
   it is not terminal after all (one inserted, or retried into that month, since
   the check), it is attached back and the month waits;
3. its attempts are detached the same way;
4. both tables are dropped, or renamed ``..._detached`` and kept with
   ``PGSCHED["RETENTION_KEEP_DETACHED"] = True`` (for an archive to read and
   drop; the scheduler no longer looks at them).

A month still holding a run that is not terminal (pending, retrying, running:
a run stuck for weeks, or one enqueued with an old time) stays attached, whole:
its runs stay visible and claimable, a warning names the month and how many,
and each pass looks again. Nothing of it is deleted meanwhile.

Each step reads the catalog first, so a replica killed between two steps
leaves a state the next pass finishes: a month whose runs are detached and
attempts not, a month left "detach pending" (finalized by the upkeep), tables
detached and not yet dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import sqlfiles
from ..conf import Settings, get_settings
from ..engine import failpoints
from ..statuses import UNFINISHED_STATUSES
from . import layout
from .months import TABLES, add_months, month_start, partition_name
from .upkeep import ATTACH_LOCK_TIMEOUT, DETACH_LOCK_TIMEOUT, settled_layout

logger = logging.getLogger(__name__)

# a month's table is named per call: {table} is left for it
STATE_SQL = sqlfiles.get("partitions", "month_state").format(
    unfinished=", ".join(f"'{status}'" for status in UNFINISHED_STATUSES), table="{table}"
)


@dataclass
class MonthsResult:
    dropped: list[datetime] = field(default_factory=list)
    kept: list[datetime] = field(default_factory=list)  # detached, kept (RETENTION_KEEP_DETACHED)
    runs: int = 0  # runs in the months that went
    blocked: list[tuple[datetime, int]] = field(default_factory=list)  # (month, unfinished runs)


class MonthRetention:
    """Detaches and drops whole months. ``run_once(conn, now)`` handles the due ones."""

    def __init__(self, *, settings: Settings | None = None, max_months: int = 2) -> None:
        self.settings = settings or get_settings()
        self.max_months = max_months

    def run_once(self, conn: BaseDatabaseWrapper, now: datetime) -> MonthsResult:
        result = MonthsResult()
        retention = self.settings.RETENTION
        if retention is None:
            return result
        cutoff = now - retention
        state, _finished = settled_layout(conn)
        current = month_start(now)
        months = set()
        for table in TABLES:
            months |= state.attached[table] | state.standalone[table]
        due = sorted(m for m in months if m < current and add_months(m, 1) <= cutoff)
        for month in due[: self.max_months]:
            if not layout.try_lock(conn, month):
                continue
            try:
                self._retire(conn, month, cutoff, layout.read(conn), result)
            finally:
                layout.unlock(conn, month)
        return result

    def _retire(
        self,
        conn: BaseDatabaseWrapper,
        month: datetime,
        cutoff: datetime,
        state: layout.Layout,
        result: MonthsResult,
    ) -> None:
        runs = partition_name("pgsched_job_run", month)
        attempts = partition_name("pgsched_attempt", month)
        if month in state.attached["pgsched_job_run"]:
            if not self._finished(conn, runs, month, cutoff, result):
                return
            if not _detach(conn, "pgsched_job_run", runs):
                return
            failpoints.hit("partitions.after_detach")
        if (
            month in state.attached["pgsched_job_run"]
            or month in state.standalone["pgsched_job_run"]
        ):
            # detached now: nothing can write it, so this reading is final
            if not self._finished(conn, runs, month, cutoff, result, detached=True):
                with layout.step(conn, ATTACH_LOCK_TIMEOUT) as cursor:
                    cursor.execute(
                        "SELECT pgsched_partition_attach('pgsched_job_run', %s)", [month]
                    )
                logger.warning(
                    "retention: %s gained an unfinished run while it was detached; attached again",
                    runs,
                )
                return
        if month in state.attached["pgsched_attempt"] and not _detach(
            conn, "pgsched_attempt", attempts
        ):
            return
        failpoints.hit("partitions.before_drop")
        old = layout.ddl_lock_timeout(conn, ATTACH_LOCK_TIMEOUT)
        try:
            with conn.cursor() as cursor, _next_pass_on_lock_timeout(conn, runs):
                if self.settings.RETENTION_KEEP_DETACHED:
                    for name in (runs, attempts):
                        cursor.execute(f"ALTER TABLE IF EXISTS {name} RENAME TO {name}_detached")
                    result.kept.append(month)
                else:
                    cursor.execute(f"DROP TABLE IF EXISTS {runs}, {attempts}")
                    result.dropped.append(month)
        finally:
            layout.ddl_lock_timeout(conn, old)

    def _finished(
        self,
        conn: BaseDatabaseWrapper,
        table: str,
        month: datetime,
        cutoff: datetime,
        result: MonthsResult,
        *,
        detached: bool = False,
    ) -> bool:
        """Whether every run of ``table`` is terminal and finished before ``cutoff``."""
        with conn.cursor() as cursor:
            cursor.execute(STATE_SQL.format(table=table))
            unfinished, last_finish, count = cursor.fetchone()
        if unfinished:
            if not detached:
                logger.warning(
                    "retention: %s ended before the retention cutoff but holds %d unfinished "
                    "run(s); it stays, whole, until they finish",
                    table,
                    unfinished,
                )
            result.blocked.append((month, unfinished))
            return False
        if last_finish is not None and last_finish >= cutoff:
            return False  # finished within RETENTION: kept until that is older
        if detached:
            result.runs += count
        return True


INSUFFICIENT_PRIVILEGE = "42501"


def _detach(conn: BaseDatabaseWrapper, parent: str, name: str) -> bool:
    """``DETACH PARTITION ... CONCURRENTLY`` (a plain DETACH inside a test's transaction).

    False when it did not finish (a lock not had in time, or the wait for older
    transactions cut short): the next pass goes on from where it stopped.
    """
    concurrently = "" if conn.in_atomic_block else " CONCURRENTLY"
    old = layout.ddl_lock_timeout(conn, DETACH_LOCK_TIMEOUT)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {parent} DETACH PARTITION {name}{concurrently}")
    except DatabaseError as exc:
        if conn.in_atomic_block:
            raise
        if getattr(exc.__cause__, "sqlstate", None) == INSUFFICIENT_PRIVILEGE:
            # not a lock or a wait cut short: this role will never detach it
            logger.warning(
                "retention: %s stays: this database role may not detach it (only the "
                "tables' owner may; run the maintenance loop as the owner, see the "
                "database how-to): %s",
                name,
                exc,
            )
            return False
        logger.info("retention: the detach of %s did not finish: %s", name, exc)
        return False
    finally:
        if not conn.in_atomic_block or conn.is_usable():
            layout.ddl_lock_timeout(conn, old)
    return True


@contextmanager
def _next_pass_on_lock_timeout(conn: BaseDatabaseWrapper, name: str) -> Iterator[None]:
    """A lock not had in time is not an error: the tables wait, detached, for the next pass."""
    try:
        yield
    except OperationalError as exc:
        if conn.in_atomic_block:
            raise
        logger.info("retention: %s waits for its locks: %s", name, exc)
