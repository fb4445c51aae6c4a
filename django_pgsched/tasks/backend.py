"""``PgschedBackend``: django.tasks' backend whose tasks run as the scheduler's runs.

``TASKS = {"default": {"BACKEND": "django_pgsched.tasks.PgschedBackend"}}``.
``enqueue()`` writes one run (``pgsched_job_run``) in one statement and wakes
the executors once it is committed (:mod:`.wakeup`); the executors of
``manage.py runscheduler`` claim it under a lease, run it, retry it, and record
its attempts; ``get_result()`` reads it back as a ``TaskResult``.

The feature flags:

* ``supports_defer``: ``run_after`` is the run's ``fire_after``;
* ``supports_async_task``: coroutine functions run on the executor's slots
  (an event loop per attempt; :mod:`django_pgsched.tasks.execution`);
* ``supports_get_result``: results live in the run history, readable from any
  process until retention deletes them;
* ``supports_priority``: the executor claims due runs highest priority first
  (``pgsched_run_claim_order_idx``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC
from typing import Any, ParamSpec, TypeVar

from django.apps import apps
from django.core import checks
from django.core.exceptions import ValidationError
from django.db import connections, transaction

from ..bounds import time_error
from ..conf import get_settings
from ..engine import queries, rows
from ..registry import validate_job_name, validate_queue
from . import index, results, wakeup
from .arguments import clean_call
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultStatus,
    task_enqueued,
)
from .names import job_name
from .options import Options, parse

P = ParamSpec("P")
R = TypeVar("R")


class PgschedBackend(BaseTaskBackend):
    """Runs django.tasks' tasks with the scheduler's leases, retries and history."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        try:
            self.run_options: Options = parse(alias, self.options)
        except ValueError as exc:
            raise InvalidTaskBackend(str(exc)) from None

    # -- enqueue -----------------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        try:
            validate_queue(task.queue_name)
            validate_job_name(job_name(task.module_path))
        except ValidationError as exc:
            raise InvalidTask(exc.messages[0]) from None

    def enqueue(self, task: Task[P, R], args: Any, kwargs: Any) -> TaskResult[P, R]:
        """Write the task's run; it is visible to workers when the transaction commits."""
        self.validate_task(task)
        known = index.get_task(task.module_path)
        if known is None or known.func is not task.func:
            raise InvalidTask(
                f"{task.module_path} is not a task the scheduler's workers can find: define it "
                "with @task at module level in an installed app's tasks module (or a module "
                "that module imports), so that every process registers it at startup"
            )
        args, kwargs = clean_call(args, kwargs)
        settings = get_settings()
        alias = settings.DATABASE_ALIAS
        if task.run_after is not None and (problem := time_error("run_after", task.run_after)):
            raise InvalidTask(problem)  # year 1 BC or year 10000 once in UTC: no run can hold it
        run_after = task.run_after.astimezone(UTC) if task.run_after is not None else None
        call = {
            "args": args,
            "backend": self.alias,
            "run_after": run_after.isoformat() if run_after else None,
            "priority": task.priority,
        }
        params: dict[str, Any] = {
            "job": job_name(task.module_path),
            "kwargs": json.dumps(kwargs, ensure_ascii=False),
            "call": json.dumps(call, ensure_ascii=False),
            "queue": task.queue_name,
            "priority": task.priority,
            "run_after": run_after,
            "max_attempts": self.run_options.MAX_ATTEMPTS or settings.DEFAULT_MAX_ATTEMPTS,
            "timeout": self.run_options.TIMEOUT or settings.DEFAULT_TIMEOUT,
        }
        # Django's own cursor (client-side binding, no prepared statement): this is the
        # caller's connection, not one of the scheduler's
        with connections[alias].cursor() as cursor:
            if run_after is not None:  # a month the maintenance loop may not have made yet
                cursor.execute(
                    "SELECT pgsched_ensure_months(ARRAY[%s]::timestamptz[])", [run_after]
                )
            cursor.execute(queries.TASK_ENQUEUE.sql, params)
            names = [column.name for column in cursor.description]
            row = rows.TaskEnqueued(**dict(zip(names, cursor.fetchone(), strict=True)))
        result: TaskResult[P, R] = TaskResult(
            task=task,
            id=str(row.id),
            status=TaskResultStatus.READY,
            enqueued_at=row.created_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        def enqueued() -> None:
            task_enqueued.send(sender=type(self), task_result=result)

        # the executors' wake-up and the signal say the run exists: both once it is
        # committed (at once in autocommit)
        wakeup.after_commit(alias, row.id)
        transaction.on_commit(enqueued, using=alias, robust=True)
        return result

    # -- results -----------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        return results.load(result_id)

    # -- checks ------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:  # type: ignore[override]
        yield from super().check(**kwargs)
        if not apps.is_installed("django_pgsched"):
            yield checks.Error(
                f"TASKS[{self.alias!r}] uses PgschedBackend, but django_pgsched is not installed",
                hint="Add 'django_pgsched' to INSTALLED_APPS.",
                id="pgsched.E020",
            )
        for queue in sorted(self.queues):
            try:
                validate_queue(queue)
            except ValidationError as exc:
                yield checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES']: {exc.messages[0]}", id="pgsched.E021"
                )
