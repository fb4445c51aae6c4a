"""Maintenance that every replica runs, divided between replicas with SKIP LOCKED.

- :class:`Reaper`: ``running`` runs whose lease expired (their replica crashed,
  froze or lost the database) go back to ``retrying`` — or ``failed`` at their
  last attempt — with a ``lost`` attempt row.
- :class:`Retention`: months of runs (and their attempts) that ended more
  than ``PGSCHED['RETENTION']`` ago, all their runs terminal and finished
  before then, are detached and dropped whole (django_pgsched.partitions.
  retention); then the history beside them (the schedule audit trail and the
  ledger's ranges of occurrences that did not run) is deleted in bounded
  batches.

Neither is a scheduled job of the system itself, so neither can stall behind
the work it is meant to recover.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import events
from ..conf import Settings, get_settings
from ..statuses import RunStatus
from . import db, failpoints, queries
from .db import refused_for_a_row
from .policies import retry_delay
from .ports import PORTS
from .rows import ReapCandidate, ReapedRun

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapResult:
    candidates: int = 0
    retried: int = 0
    failed: int = 0


class Reaper:
    """Recovers expired leases. ``run_once()`` handles one batch."""

    def __init__(self, *, settings: Settings | None = None, using: str | None = None) -> None:
        self.settings = settings or get_settings()
        self.using = using or self.settings.DATABASE_ALIAS

    def candidates(self, now: datetime | None = None) -> list[ReapCandidate]:
        """Step 1: (run id, lease token, attempts) of runs that look expired. A plain read."""
        with db.session("maintenance", self.using) as conn:
            return db.fetch(
                conn, queries.REAPER_CANDIDATES, {"now": now, "batch": self.settings.REAPER_BATCH}
            )

    def reap(self, candidates: list[ReapCandidate], now: datetime | None = None) -> ReapResult:
        """Step 2: recover the candidates that are still running under the token seen in step 1."""
        if not candidates:
            return ReapResult()
        s = self.settings
        delays = [
            retry_delay(
                c.attempts,
                base=s.RETRY_BACKOFF_BASE,
                cap=s.RETRY_BACKOFF_MAX,
                jitter=random.random(),
            )
            for c in candidates
        ]
        with db.session("maintenance", self.using) as conn:
            try:
                with transaction.atomic(using=self.using):  # a savepoint inside a test's
                    rows = self._reap(conn, now, candidates, delays)
            except DatabaseError as exc:
                if not refused_for_a_row(exc):
                    raise  # the connection, the server, a timeout: the next round retries
                logger.warning("reaping a batch failed; reaping it one run at a time: %s", exc)
                rows = []
                for candidate, delay in zip(candidates, delays, strict=True):
                    try:
                        with transaction.atomic(using=self.using):
                            rows += self._reap(conn, now, [candidate], [delay])
                    except DatabaseError as exc_one:
                        if not refused_for_a_row(exc_one):
                            raise
                        logger.error("run %s cannot be reaped: %s", candidate.id, exc_one)
            if any(row.status == RunStatus.RETRYING for row in rows):
                db.fetch(conn, queries.WAKE_EXECUTORS, {"payload": "reaper"})
        if rows:
            logger.warning("recovered %d run(s) whose lease expired", len(rows))
            events.leases_reaped.send(
                sender=type(self),
                runs=[(row.id, row.status, row.job, row.queue) for row in rows],
                tenants={row.id: row.tenant for row in rows},
            )
        failed = sum(1 for row in rows if row.status == RunStatus.FAILED)
        return ReapResult(candidates=len(candidates), retried=len(rows) - failed, failed=failed)

    def _reap(
        self,
        conn: BaseDatabaseWrapper,
        now: datetime | None,
        candidates: list[ReapCandidate],
        delays: list[float],
    ) -> list[ReapedRun]:
        return db.fetch(
            conn,
            queries.REAPER_REAP,
            {
                "now": now,
                "ids": [c.id for c in candidates],
                "tokens": [c.claimed_by for c in candidates],
                "delays": delays,
            },
        )

    def run_once(self, now: datetime | None = None) -> ReapResult:
        candidates = self.candidates(now)
        if candidates:
            failpoints.hit("reaper.between_steps")
        return self.reap(candidates, now)


@dataclass(frozen=True)
class RetentionResult:
    deleted: int = 0  # runs (in the months that went)
    batches: int = 0  # of runs (0: runs go by whole months now)
    history: int = 0  # rows of the schedule audit trail and the ledger
    months: int = 0  # months detached (dropped or kept)
    blocked: int = 0  # months past the cutoff kept because a run in them is not terminal


# The history kept beside the runs, deleted at the same age (one named statement each).
HISTORY_STATEMENTS = (queries.RETENTION_DELETE_CHANGES, queries.RETENTION_DELETE_RANGES)


@dataclass(frozen=True)
class _NoMonths:
    runs: int = 0
    dropped: tuple[()] = ()
    kept: tuple[()] = ()
    blocked: tuple[()] = ()


_NO_MONTHS = _NoMonths()


class Retention:
    """Drops old months of runs, and deletes old history in batches. ``run_once()``: one round.

    A month goes once it ended before the cutoff and all its runs are terminal
    and finished before it (the month retention plugged in at ``engine/ports.py``).
    """

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        using: str | None = None,
        max_batches: int = 10,
        time_budget: float = 5.0,
    ) -> None:
        self.settings = settings or get_settings()
        self.using = using or self.settings.DATABASE_ALIAS
        self.max_batches = max_batches
        self.time_budget = time_budget
        # whole months of runs (engine/ports.py; django_pgsched.partitions.retention)
        factory = PORTS.month_retention
        self.months = factory(self.settings) if factory is not None else None

    def run_once(self, now: datetime | None = None) -> RetentionResult:
        retention = self.settings.RETENTION
        if retention is None:
            return RetentionResult()
        batches = 0
        started = time.monotonic()
        with db.session("maintenance", self.using) as conn:
            if now is None:
                now = db.fetch(conn, queries.DATABASE_NOW, {})[0].now
            cutoff = now - retention
            failpoints.hit("retention.before_delete")
            months = (  # runs and attempts: whole months
                self.months.run_once(conn, now) if self.months is not None else _NO_MONTHS
            )
            deleted = months.runs
            history = 0
            spent = batches  # the history's budget of batches
            for statement in HISTORY_STATEMENTS:
                while spent < self.max_batches and time.monotonic() - started < self.time_budget:
                    count = db.execute(
                        conn, statement, {"cutoff": cutoff, "batch": self.settings.RETENTION_BATCH}
                    )
                    spent += 1
                    history += count
                    if count < self.settings.RETENTION_BATCH:
                        break
        if history:
            logger.info("retention deleted %d row(s) of history from before %s", history, cutoff)
        if deleted:
            logger.info(
                "retention deleted %d run(s) scheduled and finished before %s", deleted, cutoff
            )
            events.runs_pruned.send(sender=type(self), deleted=deleted)
        return RetentionResult(
            deleted=deleted,
            batches=batches,
            history=history,
            months=len(months.dropped) + len(months.kept),
            blocked=len(months.blocked),
        )
