"""Schedules, their runs, and the attempts of each run.

The database enforces what matters (see the migration for the CHECKs and
triggers that Django's ``Meta`` cannot express): one run per occurrence,
exactly one of cron / interval, attempt numbers within 1..MAX_ATTEMPTS, whole-second
occurrence times, and the lease columns consistent with the run's status.
Validation in :meth:`Schedule.clean` gives readable messages first; the
constraints are the backstop for raw SQL and ``QuerySet.update()``.
"""

from __future__ import annotations

from ..statuses import (
    CLAIMABLE_STATUSES,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    AttemptStatus,
    DstFold,
    DstGap,
    MisfirePolicy,
    OverlapPolicy,
    RunStatus,
    ScheduleStatus,
)
from .attempts import Attempt
from .clock import db_now
from .replicas import Replica
from .runs import JobRun
from .schedules import DEFINITION_FIELDS, GRID_FIELDS, Schedule

# named by the migration's model state (the callable defaults of two of Schedule's fields)
from .schedules import _default_catch_up_limit as _default_catch_up_limit
from .schedules import _default_policy as _default_policy

__all__ = [
    "CLAIMABLE_STATUSES",
    "DEFINITION_FIELDS",
    "GRID_FIELDS",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "Attempt",
    "AttemptStatus",
    "Breaker",
    "BreakerState",
    "ChangeAction",
    "DstFold",
    "DstGap",
    "JobRun",
    "MisfirePolicy",
    "OverlapPolicy",
    "Replica",
    "RunStatus",
    "Schedule",
    "ScheduleChange",
    "ScheduleStatus",
    "SkippedRange",
    "Tenant",
    "db_now",
]

# Models of the capabilities' rooms, imported here so that Django registers them.
from ..audit.models import ChangeAction, ScheduleChange
from ..delivery.models import Breaker, BreakerState
from ..ledger.models import SkippedRange
from ..tenants.models import Tenant
