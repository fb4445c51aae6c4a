"""A run, as django.tasks sees it: a ``TaskResult`` with the status mapped from the run's.

| run status | ``TaskResultStatus`` |
| --- | --- |
| ``pending``, ``retrying`` | ``READY`` (enqueued, or ready to be executed again) |
| ``running`` | ``RUNNING`` |
| ``succeeded`` | ``SUCCESSFUL`` |
| ``failed``, ``cancelled``, any other end | ``FAILED`` |

``errors`` has one ``TaskError`` per attempt that did not succeed, in order:
the exception's class and its traceback, or for an attempt the scheduler
ended, a class of :mod:`django_pgsched.tasks.exceptions` and the reason.
``worker_ids`` has one entry per attempt (the one in flight included), so
``attempts`` and ``TaskContext.attempt`` count claims as the run's ``attempts``
column does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from ..conf import get_settings
from ..models import Attempt, JobRun, RunStatus
from . import exceptions, index
from .compat import Task, TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus
from .names import PREFIX, module_path

STATUS = {
    RunStatus.PENDING: TaskResultStatus.READY,
    RunStatus.RETRYING: TaskResultStatus.READY,
    RunStatus.RUNNING: TaskResultStatus.RUNNING,
    RunStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
}
ENDED_BY_SCHEDULER = {
    "timed_out": exceptions.AttemptTimedOut,
    "lost": exceptions.AttemptLost,
    "cancelled": exceptions.RunCancelled,
}
MAX_ID = 2**63 - 1


def status_of(run_status: str) -> TaskResultStatus:
    return STATUS.get(run_status, TaskResultStatus.FAILED)  # type: ignore[call-overload,no-any-return]


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def errors_of(run: JobRun, attempts: Sequence[Attempt]) -> list[TaskError]:
    errors = []
    for attempt in attempts:
        if attempt.status != "failed" and attempt.status not in ENDED_BY_SCHEDULER:
            continue  # succeeded, or deferred (not an error)
        cls = ENDED_BY_SCHEDULER.get(attempt.status)
        path = _path(cls) if cls is not None else attempt.error_class or "builtins.Exception"
        errors.append(TaskError(exception_class_path=path, traceback=attempt.error))
    if status_of(run.status) == TaskResultStatus.FAILED and not errors:
        cls = (
            exceptions.RunCancelled
            if run.status == RunStatus.CANCELLED
            else exceptions.RunNotStarted
        )
        reason = run.note or f"the run ended {run.status} before an attempt started"
        errors.append(TaskError(exception_class_path=_path(cls), traceback=reason))
    return errors


def rebuild(task: Task[..., Any], **changes: Any) -> Task[..., Any]:
    """``task`` with ``changes``, without validating it again (it was, when it was enqueued)."""
    new = object.__new__(type(task))
    for f in fields(task):
        object.__setattr__(new, f.name, changes.get(f.name, getattr(task, f.name)))
    return new


def task_of(run: JobRun, task: Task[..., Any], call: dict[str, Any] | None) -> Task[..., Any]:
    run_after = call.get("run_after") if call else None
    return rebuild(
        task,
        priority=run.priority,
        queue_name=run.queue,
        backend=call["backend"] if call else task.backend,
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def task_of_claim(
    task: Task[..., Any], claim: Any, alias: str, call: dict[str, Any] | None
) -> Task[..., Any]:
    """The task of a claimed run, from what the claim carries (no query)."""
    run_after = call.get("run_after") if call else None
    return rebuild(
        task,
        priority=call.get("priority", task.priority) if call else task.priority,
        queue_name=claim.queue,
        backend=alias,
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def to_result(run: JobRun, attempts: Sequence[Attempt]) -> TaskResult[..., Any]:
    path = module_path(run.job)
    task = index.get_task(path) if path else None
    if task is None:
        raise TaskResultDoesNotExist(
            f"run {run.pk} is of {run.job!r}, which is not a task this code defines"
        )
    call = run.task_call
    workers = [a.worker for a in attempts]
    if run.status == RunStatus.RUNNING:
        workers.append(run.worker or "")
    starts = [a.started_at for a in attempts if a.started_at is not None]
    if run.started_at is not None:
        starts.append(run.started_at)
    result: TaskResult[..., Any] = TaskResult(
        task=task_of(run, task, call),
        id=str(run.pk),
        status=status_of(run.status),
        enqueued_at=run.created_at,
        started_at=min(starts) if starts else None,
        last_attempted_at=max(starts) if starts else None,
        finished_at=run.finished_at,
        args=call.get("args", []) if call else [],
        kwargs=run.kwargs,
        backend=call["backend"] if call else task.backend,
        errors=errors_of(run, attempts),
        worker_ids=workers,
    )
    if run.status == RunStatus.SUCCEEDED:
        object.__setattr__(result, "_return_value", run.return_value)
    return result


def parse_id(result_id: object) -> int:
    text = str(result_id)
    if not text.isascii() or not text.isdigit() or not 0 < int(text) <= MAX_ID:
        raise TaskResultDoesNotExist(result_id)
    return int(text)


def load(result_id: object, using: str | None = None) -> TaskResult[..., Any]:
    """The result of the task run ``result_id``, or ``TaskResultDoesNotExist``."""
    alias = using or get_settings().DATABASE_ALIAS
    pk = parse_id(result_id)
    run = JobRun.objects.using(alias).filter(pk=pk, job__startswith=PREFIX).first()
    if run is None:
        raise TaskResultDoesNotExist(result_id)
    attempts = list(Attempt.objects.using(alias).filter(job_run_id=pk).order_by("number"))
    return to_result(run, attempts)
