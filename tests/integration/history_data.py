"""Runs of several tenants for the history tests, written in one statement."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django_pgsched.models import Attempt, JobRun


def history_run(
    tenant: str,
    scheduled_for: datetime,
    *,
    schedule: str | None = "report",
    status: str = "succeeded",
    **fields: Any,
) -> JobRun:
    """An unsaved run of ``tenant`` in a consistent state for ``status`` (the CHECKs hold)."""
    values: dict[str, Any] = {
        "schedule_name": schedule,
        "scheduled_for": scheduled_for,
        "idempotency_key": f"test:{uuid.uuid4()}",
        "job": "tests.noop",
        "kwargs": {"secret": "kwargs are never served"},
        "queue": "default",
        "status": status,
        "fire_after": scheduled_for,
        "attempts": 0 if status == "pending" else 1,
        "max_attempts": 3,
        "timeout": timedelta(seconds=30),
        "tenant": tenant,
        "worker": "host-1",
    }
    if status in ("succeeded", "failed", "cancelled", "missed"):
        values["finished_at"] = scheduled_for + timedelta(seconds=1)
    if status != "pending":
        values["started_at"] = scheduled_for
    values.update(fields)
    return JobRun(**values)


def make(runs: list[JobRun]) -> list[JobRun]:
    made = JobRun.objects.bulk_create(runs)
    Attempt.objects.bulk_create(
        Attempt(
            job_run=run,
            number=1,
            status="failed" if run.status == "failed" else "succeeded",
            started_at=run.scheduled_for,
            finished_at=run.scheduled_for + timedelta(seconds=1),
            worker="host-1",
            error="boom" if run.status == "failed" else "",
        )
        for run in made
        if run.status in ("succeeded", "failed")
    )
    return made
