"""Named SQL statements, loaded once from ``queries.sql``.

The ORM cannot say "claim with SKIP LOCKED and update in one statement", so
the hot paths live in one SQL file with a ``-- name: x`` header per block
(procrastinate's habit; every room of the package keeps its SQL the same way,
read by :mod:`django_pgsched.sqlfiles`). Everything else uses the ORM. Each
block is run as a :class:`Statement` (its rows read into a typed record of
``rows.py`` by column name) or a :class:`Command` (no rows), with
``db.fetch()`` / ``db.execute()``; or it is one of :data:`TEMPLATES`, which
``stranded.py`` fills in and runs itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Generic, TypeVar

from .. import sqlfiles
from . import rows


@cache
def _load() -> dict[str, str]:
    return dict(sqlfiles.load("engine"))


def get(name: str) -> str:
    """The SQL of the block called ``name``."""
    return _load()[name]


def names() -> list[str]:
    return sorted(_load())


R = TypeVar("R")


@dataclass(frozen=True)
class Statement(Generic[R]):
    """A named block of ``queries.sql`` and the record each of its rows is read into."""

    name: str
    row: type[R]

    @property
    def sql(self) -> str:
        return get(self.name)


@dataclass(frozen=True)
class Command:
    """A named block of ``queries.sql`` that returns no rows (its row count only)."""

    name: str

    @property
    def sql(self) -> str:
        return get(self.name)


PLANNER_CLAIM = Statement("planner_claim", rows.DueSchedule)
PLANNER_APPLY = Statement("planner_apply", rows.Applied)
PLANNER_MARK_BROKEN = Command("planner_mark_broken")
PLANNER_STALE_MONTHS = Statement("planner_stale_months", rows.StaleMonth)
ENSURE_MONTHS = Statement("ensure_months", rows.EnsuredMonths)
EXECUTOR_PASS = Statement("executor_pass", rows.PassRow)
# executor_pass claiming the ids a claim source named (a claim transport: engine/ports.py)
EXECUTOR_PASS_BY_ID = Statement("executor_pass_by_id", rows.PassRow)
# the runs with an overlap policy or a start deadline, then EXECUTOR_PASS_BY_ID
EXECUTOR_GUARDED_PICK = Statement("executor_guarded_pick", rows.GuardedRun)
# a held tenant's (max_running) claim: its lock, then its picks, then EXECUTOR_PASS_BY_ID
HELD_TENANTS_EXIST = Statement("held_tenants_exist", rows.HeldTenantsExist)
EXECUTOR_HELD_LOCK = Statement("executor_held_lock", rows.HeldTenant)
EXECUTOR_HELD_PICK = Statement("executor_held_pick", rows.HeldRun)
# the fair claim (a contended pass shares its claim by tenant weight), then EXECUTOR_PASS_BY_ID
TENANTED_RUNS_EXIST = Statement("tenanted_runs_exist", rows.TenantedRunsExist)
EXECUTOR_FAIR_PICK = Statement("executor_fair_pick", rows.FairPick)
EXECUTOR_DEFER = Statement("executor_defer", rows.Deferred)
GUARD_DECIDE = Statement("guard_decide", rows.GuardDecision)
GUARD_APPLY = Statement("guard_apply", rows.GuardApplied)
EXECUTOR_CHECK = Statement("executor_check", rows.Checked)
EXECUTOR_RENEW = Statement("executor_renew", rows.Renewed)
EXECUTOR_FAIL_MINIMAL = Statement("executor_fail_minimal", rows.Failed)
EXECUTOR_RELEASE = Statement("executor_release", rows.Released)
REAPER_CANDIDATES = Statement("reaper_candidates", rows.ReapCandidate)
REAPER_REAP = Statement("reaper_reap", rows.ReapedRun)
RETENTION_DELETE_CHANGES = Command("retention_delete_changes")
RETENTION_DELETE_RANGES = Command("retention_delete_ranges")
CANCEL_RUNS = Statement("cancel_runs", rows.CancelledRun)
TASK_ENQUEUE = Statement("task_enqueue", rows.TaskEnqueued)
WAKE_EXECUTORS = Statement("wake_executors", rows.Notified)
DATABASE_NOW = Statement("database_now", rows.DatabaseNow)
# engine/stranded.py: a stranded (job, queue)'s older runs cancelled, one kept per schedule
STRANDED_COALESCE = Command("stranded_coalesce")

#: Every named block, as the engine runs it.
STATEMENTS: tuple[Statement[Any] | Command, ...] = (
    PLANNER_CLAIM,
    PLANNER_APPLY,
    PLANNER_MARK_BROKEN,
    PLANNER_STALE_MONTHS,
    ENSURE_MONTHS,
    EXECUTOR_PASS,
    EXECUTOR_PASS_BY_ID,
    EXECUTOR_GUARDED_PICK,
    HELD_TENANTS_EXIST,
    EXECUTOR_HELD_LOCK,
    EXECUTOR_HELD_PICK,
    TENANTED_RUNS_EXIST,
    EXECUTOR_FAIR_PICK,
    EXECUTOR_DEFER,
    GUARD_DECIDE,
    GUARD_APPLY,
    EXECUTOR_CHECK,
    EXECUTOR_RENEW,
    EXECUTOR_FAIL_MINIMAL,
    EXECUTOR_RELEASE,
    REAPER_CANDIDATES,
    REAPER_REAP,
    RETENTION_DELETE_CHANGES,
    RETENTION_DELETE_RANGES,
    CANCEL_RUNS,
    TASK_ENQUEUE,
    WAKE_EXECUTORS,
    DATABASE_NOW,
    STRANDED_COALESCE,
)

#: The named blocks filled in with :meth:`str.format` before they run, so neither a
#: Statement nor a Command: engine/stranded.py's (its advisory locks' classes; the CTE
#: and the test they make, which the backlog gauge of ops/metrics.py reads too).
TEMPLATES: tuple[str, ...] = ("stranded_held", "stranded_runnable", "stranded_runs")
