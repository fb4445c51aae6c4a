"""Runs of several tenants for the history tests, written in one statement."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from django_pgsched.models import Attempt, JobRun


def ensure_months(times: list[datetime]) -> None:
    """The months of ``times`` exist, where runs are partitioned by month (a plain
    ``bulk_create`` or ``INSERT`` does not create a missing month, the library's inserts do)."""
    with connection.cursor() as cursor:
        # the table the name resolves to (private_runs shadows it with a plain temporary one)
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_partitioned_table"
            " WHERE partrelid = 'pgsched_job_run'::regclass)"
        )
        if cursor.fetchone()[0] and times:
            cursor.execute("SELECT pgsched_ensure_months(%s::timestamptz[])", [times])


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
    ensure_months(sorted({r.scheduled_for for r in runs}))
    made = JobRun.objects.bulk_create(runs)
    # where attempts are partitioned in step with their runs, they carry their run's month
    in_step = any(f.name == "run_scheduled_for" for f in Attempt._meta.get_fields())
    Attempt.objects.bulk_create(
        Attempt(
            job_run=run,
            **({"run_scheduled_for": run.scheduled_for} if in_step else {}),
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
