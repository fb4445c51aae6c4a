"""A task backend that is not ours and keeps its queue in our database (as django-tasks-db does).

``enqueue()`` writes a ``Witness`` row through Django's default connection, so
a hand-over from a schedule's run is one transaction with the run's record of it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .models import Witness

try:  # django.tasks on Django 6, the backport on 5.2
    from django.tasks import TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
except ImportError:  # pragma: no cover
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import TaskResult, TaskResultStatus  # type: ignore[no-redef]


class TableBackend(BaseTaskBackend):
    calls: list[dict[str, Any]] = []  # every enqueue() call in this process, kept or rolled back

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        self.calls.append(dict(kwargs))
        now = datetime.now(UTC)
        row = Witness.objects.create(
            run_id=0,
            attempt=0,
            idempotency_key=kwargs.get("idempotency_key", ""),
            scheduled_for=now,
            worker="table",
            label=task.name,
            started_at=now,
        )
        return TaskResult(
            task=task,
            id=str(row.pk),
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
