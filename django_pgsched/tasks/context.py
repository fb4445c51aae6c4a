"""The context a task defined with ``takes_context=True`` receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..context import RunContext
from .compat import TaskContext

if TYPE_CHECKING:
    _Context = TaskContext[..., Any]
else:  # Django's TaskContext is not generic at run time (the stubs' and the backport's are)
    _Context = TaskContext


@dataclass(frozen=True, slots=True, kw_only=True)
class PgschedTaskContext(_Context):  # type: ignore[misc]  # the stubs miss frozen=True
    """django.tasks' ``TaskContext``, and what the scheduler knows about the run.

    ``task_result`` and ``attempt`` are the framework's. ``idempotency_key`` is
    the same for every attempt of the run (execution is at-least-once: use it
    to drop repeats); ``is_cancelled()`` turns true once the task should stop
    (the lease was lost, the timeout passed, the run was cancelled, or the
    replica is shutting down).
    """

    run: RunContext = field(repr=False)

    @property
    def idempotency_key(self) -> str:
        return self.run.idempotency_key

    @property
    def scheduled_for(self) -> datetime:
        return self.run.scheduled_for

    @property
    def schedule_name(self) -> str | None:
        return self.run.schedule_name

    def is_cancelled(self) -> bool:
        return self.run.is_cancelled()
