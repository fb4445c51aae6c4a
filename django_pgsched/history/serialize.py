"""A run and its attempts as JSON (the fields the OpenAPI description documents).

Only what a tenant may see of its own runs: never the job's kwargs (they may
hold credentials, e.g. ``pgsched.http``'s headers), the lease, the worker or
the attempts' evidence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import Attempt, JobRun

#: The columns a list page reads (``QuerySet.only``).
RUN_FIELDS = (
    "id",
    "schedule_name",
    "tenant",
    "job",
    "queue",
    "scheduled_for",
    "status",
    "attempts",
    "max_attempts",
    "started_at",
    "finished_at",
    "is_backfill",
)


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def run_json(run: JobRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "schedule": run.schedule_name,
        "tenant": run.tenant,
        "job": run.job,
        "queue": run.queue,
        "scheduled_for": _time(run.scheduled_for),
        "status": run.status,
        "attempts": run.attempts,
        "max_attempts": run.max_attempts,
        "started_at": _time(run.started_at),
        "finished_at": _time(run.finished_at),
        "is_backfill": run.is_backfill,
    }


TRACEBACK = "Traceback (most recent call last):"


def tenant_error(error: str) -> str:
    """An attempt's error as a tenant reads it: a job's traceback (file paths, source
    lines) becomes its last line, the exception itself; the whole traceback stays for
    operators (the admin, the staff view of this API)."""
    if TRACEBACK not in error:
        return error
    lines = [line for line in error.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def attempt_json(attempt: Attempt, *, staff: bool = False) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "status": attempt.status,
        "started_at": _time(attempt.started_at),
        "finished_at": _time(attempt.finished_at),
        "error": attempt.error if staff else tenant_error(attempt.error),
        "error_class": attempt.error_class,
    }
