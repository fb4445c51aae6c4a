"""Public operations on schedules and runs; the admin and commands call these too."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from . import events, validation
from .bounds import time_error
from .conf import get_settings
from .engine import db, queries
from .limits import MAX_NOTE_CHARS
from .models import JobRun, Schedule, db_now
from .registry import (
    job_defaults,
    require_job,
)
from .statuses import RETRYABLE_STATUSES, RunStatus, ScheduleStatus

#: The statuses :func:`retry_run` accepts.
RETRYABLE = RETRYABLE_STATUSES


def _notify(using: str, payload: str) -> None:
    with connections[using].cursor() as cursor:
        cursor.execute(queries.WAKE_EXECUTORS.sql, {"payload": payload})


def enqueue(
    job_name: str,
    *,
    kwargs: dict[str, Any] | None = None,
    run_at: datetime | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    timeout: Any = None,
    idempotency_key: str | None = None,
    schedule_name: str | None = None,
    note: str = "",
    tenant: str = "",
    using: str | None = None,
) -> JobRun:
    """Create a one-off run of a registered job, due at ``run_at`` (default: now).

    With an ``idempotency_key`` the same tenant already used, that run is
    returned and nothing is created; keys are unique within a tenant, so another
    tenant's run with the same key is neither returned nor in the way. ``tenant``
    says whose run it is (empty: no tenant; see :mod:`django_pgsched.history`).
    Executors are woken when the surrounding transaction commits.
    """
    settings = get_settings()
    alias = using or settings.DATABASE_ALIAS
    spec = require_job(job_name)
    problems = validation.Problems()
    clean_kwargs = validation.job_kwargs(
        problems, spec, kwargs, timeout=timeout, tenant=tenant, settings=settings
    )
    if run_at is not None and (not isinstance(run_at, datetime) or timezone.is_naive(run_at)):
        problems.add(
            "run_at", f"run_at: timezone offset required (schedules are UTC), got {run_at!r}"
        )
    elif run_at is not None and (problem := time_error("run_at", run_at)):
        problems.add("run_at", problem)  # e.g. datetime(1, 1, 1, tzinfo=+05:00): 1 BC in UTC
    validation.run_options(
        problems, {"queue": queue, "max_attempts": max_attempts, "timeout": timeout}
    )
    validation.tenant(problems, tenant)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= 200
    ):
        problems.add("idempotency_key", "idempotency_key: must be a string of 1 to 200 characters")
    problems.raise_any()

    fire_after = run_at.astimezone(UTC) if run_at is not None else db_now(alias)
    defaults = job_defaults(spec, settings)
    run = JobRun(
        schedule=None,
        schedule_name=schedule_name,
        scheduled_for=fire_after.replace(microsecond=0),
        idempotency_key=idempotency_key or f"pgsched:once:{uuid.uuid4()}",
        job=spec.name,
        kwargs=clean_kwargs,
        queue=queue or defaults.queue,
        status=RunStatus.PENDING,
        fire_after=fire_after,
        attempts=0,
        max_attempts=max_attempts or defaults.max_attempts,
        timeout=timeout or defaults.timeout,
        note=note,
        tenant=tenant,
        priority=defaults.priority,
    )
    try:
        with transaction.atomic(using=alias):
            run.save(using=alias, force_insert=True)  # its month is made if missing
            _notify(alias, str(run.pk))
    except IntegrityError:
        if idempotency_key is None:
            raise
        # the tenant's own run with that key: another tenant's is never returned
        return JobRun.objects.using(alias).get(idempotency_key=idempotency_key, tenant=tenant)
    return run


def run_schedule_now(schedule: Schedule, *, note: str = "", using: str | None = None) -> JobRun:
    """A one-off run of ``schedule``'s job with its kwargs, queue, attempts and timeout.

    It is not an occurrence of the schedule (its ``schedule`` is empty and its
    ``schedule_name`` is set), so it never displaces or duplicates one.
    """
    return enqueue(
        schedule.job,
        kwargs=schedule.kwargs,
        queue=schedule.queue,
        max_attempts=schedule.max_attempts,
        timeout=schedule.timeout,
        schedule_name=schedule.name,
        note=note or "run now",
        tenant=schedule.tenant,
        using=using,
    )


def _schedule(schedule: Schedule | str, tenant: str) -> Schedule:
    if isinstance(schedule, Schedule):
        return schedule
    alias = get_settings().DATABASE_ALIAS
    found = Schedule.objects.using(alias).filter(name=schedule, tenant=tenant).first()
    if found is None:
        raise ValidationError(f"schedule: no schedule named {schedule!r} for tenant {tenant!r}")
    return found


def pause(schedule: Schedule | str, *, reason: str = "", tenant: str = "") -> Schedule:
    """Stop firing; runs materialised but not yet started are cancelled (by a trigger).

    ``schedule`` is a schedule or the name of one of ``tenant``'s; ``reason`` is kept
    (``Schedule.pause_reason``) and shown in the admin and the tenant API."""
    s = _schedule(schedule, tenant)
    if not isinstance(reason, str) or len(reason) > MAX_NOTE_CHARS:
        raise ValidationError(
            {"reason": [f"reason: a string of at most {MAX_NOTE_CHARS} characters"]}
        )
    if s.status != ScheduleStatus.PAUSED or s.pause_reason != reason:
        s.status = ScheduleStatus.PAUSED
        s.pause_reason = reason
        s.save(update_fields=["status", "pause_reason", "updated_at"])
    return s


def resume(schedule: Schedule | str, *, tenant: str = "") -> Schedule:
    """Fire again from the next occurrence after now; nothing missed while paused is caught up."""
    s = _schedule(schedule, tenant)
    if s.status != ScheduleStatus.ACTIVE:
        s.status = ScheduleStatus.ACTIVE
        s.last_error = ""
        s.pause_reason = ""
        s.save(update_fields=["status", "last_error", "pause_reason", "updated_at"])
    return s


# -- runs ------------------------------------------------------------------------------


@dataclasses.dataclass
class CancelResult:
    """What :func:`cancel_runs` did, by run id."""

    #: The runs cancelled, in id order.
    cancelled: list[int] = dataclasses.field(default_factory=list)
    #: Of those, the ones that were running: their replicas abandon them at the next renewal.
    interrupted: list[int] = dataclasses.field(default_factory=list)
    #: The runs left alone: finished, or claimed again, since their token was read.
    unchanged: list[int] = dataclasses.field(default_factory=list)


def cancel_runs(
    seen: Sequence[tuple[int, uuid.UUID | None]], *, note: str, using: str | None = None
) -> CancelResult:
    """Cancel runs given as ``(id, lease token seen)``; a running one only if the token holds.

    A pending or retrying run is cancelled if it still is. A running one is
    cancelled only while it still carries the lease token that was read (its
    ``claimed_by``), so a cancel never hits a later attempt; its in-flight
    attempt is recorded as ``cancelled``, and the executor holding it finds
    its lease gone at the next renewal and abandons the job. ``note`` goes on
    each cancelled run (and its attempt). One statement, in one transaction.

    For each run that was running, :data:`~django_pgsched.events.attempt_finished`
    is sent once the transaction commits (``outcome`` and ``status``
    ``"cancelled"``, ``duration`` 0), so the metrics count it.
    """
    result = CancelResult()
    if not seen:
        return result
    alias = using or get_settings().DATABASE_ALIAS
    params: dict[str, Any] = {
        "ids": [pk for pk, _ in seen],
        "tokens": [token for _, token in seen],
        "note": note,
    }
    with transaction.atomic(using=alias):
        rows = db.fetch(connections[alias], queries.CANCEL_RUNS, params)
        for row in rows:
            result.cancelled.append(row.id)
            if row.was == RunStatus.RUNNING:
                result.interrupted.append(row.id)
                finished = partial(
                    events.attempt_finished.send,
                    sender=JobRun,
                    run_id=row.id,
                    job=row.job,
                    queue=row.queue,
                    attempt=row.attempts,
                    outcome=RunStatus.CANCELLED.value,
                    status=RunStatus.CANCELLED.value,
                    duration=0.0,
                    tenant=row.tenant,
                )
                transaction.on_commit(finished, using=alias, robust=True)
    done = set(result.cancelled)
    result.unchanged = [pk for pk, _ in seen if pk not in done]
    return result


def retry_run(run: JobRun, *, note: str = "") -> tuple[JobRun, bool]:
    """A new run of a failed or cancelled ``run``: same job, kwargs, queue, attempts, timeout.

    The original keeps its status and attempts; the new run's note says "retry
    of run N" and it keeps the schedule's name. Its idempotency key derives
    from the original's id, so a run is retried at most once, even when two
    operators click at once: to try again, retry the retry. Returns ``(run,
    created)``.
    """
    if run.status not in RETRYABLE:
        raise ValidationError(
            f"status: run {run.pk} is {run.status}; only failed, cancelled or missed runs can be "
            "retried"
        )
    key = f"pgsched:retry:{run.pk}"
    existing = JobRun.objects.filter(idempotency_key=key, tenant=run.tenant).first()
    if existing is not None:
        return existing, False
    with transaction.atomic(using=get_settings().DATABASE_ALIAS):
        new = enqueue(
            run.job,
            kwargs=run.kwargs,
            queue=run.queue,
            max_attempts=run.max_attempts,
            timeout=run.timeout,
            idempotency_key=key,
            schedule_name=run.schedule_name,
            note=f"retry of run {run.pk}" + (f" {note}" if note else ""),
            tenant=run.tenant,
        )
        if run.task_call is not None or run.priority:  # a django.tasks task's call
            new.refresh_from_db(fields=["created_at"])
            if run.task_call is not None:
                new.task_call = {**run.task_call, "enqueued_at": new.created_at.isoformat()}
            new.priority = run.priority
            new.save(update_fields=["task_call", "priority"])
    return new, True
