"""Runs nobody can execute: a job no live replica registers.

**Registration, without writes.** The executor loop's session of each replica
holds one shared advisory lock per job it registers (key ``(JOB_KEY,
hashtext(job))``), or, when it serves only some queues (``--queues``), one per
(job, queue) it serves (key ``(QUEUE_KEY, hashtext(job || chr(31) || queue))``).
PostgreSQL lists them in ``pg_locks`` and drops them with the session, so a
replica that stops, crashes or loses its connection stops registering at once,
and nothing is written to keep the list. :data:`RUNNABLE` is the SQL test "some
live replica could run this run" used by the backlog gauge and this module.

**Stranded runs.** A pending run that has never started, fell due more than
``PGSCHED["STRANDED_GRACE"]`` (10 minutes) ago, and whose (job, queue) no live
replica registers, is stranded. Nothing is decided while no replica registers
anything at all (every executor down or restarting: that is an outage, not a
missing job).

**Coalescing** (the maintenance loop, :meth:`Stranded.run_once`). For a (job,
queue) that this replica has seen stranded in every pass for at least the grace,
each schedule keeps its newest stranded run and the older ones are cancelled
(note ``stranded: no live replica runs <job> in queue <queue>; kept run <id>``):
a schedule whose job is gone leaves one pending run, not one per occurrence.
When a replica registers the job again, that run executes (like misfire policy
``latest``) and the schedule carries on. One-off runs (no schedule) are not
coalesced; the gauges count them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import Settings, get_settings
from ..registry import all_jobs
from . import db, queries

logger = logging.getLogger(__name__)

JOB_KEY = 1885827841  # advisory lock classid: a job, every queue
QUEUE_KEY = 1885827842  # a (job, queue) pair
SEPARATOR = chr(31)
_REGISTERED_ATTR = "_pgsched_registered"

# The live registrations (a CTE) and the test for a run r (job, queue): queries.sql
HELD = queries.get("stranded_held").format(job_key=JOB_KEY, queue_key=QUEUE_KEY)
RUNNABLE = queries.get("stranded_runnable").format(job_key=JOB_KEY, queue_key=QUEUE_KEY)

STRANDED_SQL = queries.get("stranded_runs").format(held=HELD, runnable=RUNNABLE)

COALESCE_SQL = queries.STRANDED_COALESCE.sql


def lock_keys(jobs: Iterable[str], queues: Sequence[str] | None) -> list[tuple[int, str]]:
    """The (namespace, text to hash) of each advisory lock a replica holds."""
    if not queues:
        return [(JOB_KEY, job) for job in sorted(jobs)]
    return [(QUEUE_KEY, f"{job}{SEPARATOR}{q}") for job in sorted(jobs) for q in sorted(queues)]


def register(conn: BaseDatabaseWrapper, queues: Sequence[str] | None) -> bool:
    """Hold this replica's registrations on ``conn``'s session; False if it already does."""
    conn.ensure_connection()
    raw = conn.connection
    if getattr(raw, _REGISTERED_ATTR, False):
        return False
    keys = lock_keys(all_jobs(), queues)
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_lock_shared(k.ns, hashtext(k.text)))"
            "  FROM unnest(%s::int[], %s::text[]) AS k(ns, text)",
            [[ns for ns, _ in keys], [text for _, text in keys]],
        )
    setattr(raw, _REGISTERED_ATTR, True)
    return True


@dataclass(frozen=True)
class StrandedGroup:
    job: str
    queue: str
    runs: int
    schedules: int


def stranded(
    *, now: datetime | None = None, using: str | None = None, settings: Settings | None = None
) -> list[StrandedGroup]:
    """Stranded runs by (job, queue): due for longer than the grace, runnable by no live replica."""
    s = settings or get_settings()
    with connections[using or s.DATABASE_ALIAS].cursor() as cursor:
        cursor.execute(STRANDED_SQL, {"now": now, "grace": s.STRANDED_GRACE.total_seconds()})
        return [StrandedGroup(*row) for row in cursor.fetchall()]


@dataclass
class StrandedResult:
    groups: list[StrandedGroup] = field(default_factory=list)
    cancelled: int = 0


class Stranded:
    """The maintenance loop's pass: coalesce the runs of jobs no live replica runs."""

    def __init__(self, *, settings: Settings | None = None, clock: Any = time.monotonic) -> None:
        self.settings = settings or get_settings()
        self.clock = clock
        self.first_seen: dict[tuple[str, str], float] = {}  # (job, queue) -> first pass seen

    def run_once(self, now: datetime | None = None) -> StrandedResult:
        grace = self.settings.STRANDED_GRACE
        with db.session("maintenance", self.settings.DATABASE_ALIAS) as conn:
            groups = stranded(now=now, using=conn.alias, settings=self.settings)
            seen_now = self.clock()
            current = {(g.job, g.queue) for g in groups}
            self.first_seen = {k: v for k, v in self.first_seen.items() if k in current}
            result = StrandedResult(groups)
            for group in groups:
                key = (group.job, group.queue)
                first = self.first_seen.setdefault(key, seen_now)
                if seen_now - first < grace.total_seconds() or group.runs <= group.schedules:
                    continue  # not yet seen for the whole grace; or one run each already
                with conn.cursor() as cursor:
                    cursor.execute(
                        COALESCE_SQL,
                        {
                            "job": group.job,
                            "queue": group.queue,
                            "now": now,
                            "grace": grace.total_seconds(),
                        },
                    )
                    result.cancelled += cursor.rowcount
                logger.warning(
                    "no live replica runs job %s in queue %s: %d stranded run(s) of %d "
                    "schedule(s) coalesced (one kept per schedule)",
                    group.job,
                    group.queue,
                    group.runs,
                    group.schedules,
                )
        return result
