"""django.tasks' tasks the test suite enqueues (discovered like ``jobs``: an app's ``tasks``).

Their backend is ``default`` (``PgschedBackend`` in tests/settings.py); the
conformance suite runs them on the framework's ``ImmediateBackend`` too, with
``.using(backend="immediate")``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async

from .models import Witness

try:  # django.tasks on Django 6, the backport on 5.2
    from django.tasks import TaskContext, task
except ImportError:  # pragma: no cover
    from django_tasks import task  # type: ignore[no-redef]
    from django_tasks.base import TaskContext  # type: ignore[no-redef]

SEEN: list[dict[str, Any]] = []  # in-process record (inline executor, ImmediateBackend)


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def noop() -> None:
    return None


@task
def fail(message: str = "boom") -> None:
    raise ValueError(message)


@task
def returns_datetime() -> datetime:
    return datetime.now(UTC)


@task(takes_context=True)
def with_context(context: TaskContext, label: str = "") -> dict[str, Any]:
    result = context.task_result
    SEEN.append({"context": context, "label": label})
    return {
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "attempts": result.attempts,
        "label": label,
    }


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int = 2) -> int:
    if context.attempt < succeed_on:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
async def async_witness(label: str) -> dict[str, Any]:
    """The ORM from a coroutine: Django runs it on the slot's own thread and connection."""

    def write() -> dict[str, Any]:
        row = Witness.objects.create(
            run_id=0,
            attempt=1,
            idempotency_key="",
            scheduled_for=datetime.now(UTC),
            worker=threading.current_thread().name,
            label=label,
            started_at=datetime.now(UTC),
        )
        return {"witness": row.pk, "orm_thread": threading.get_ident()}

    return await sync_to_async(write)()


@task
async def async_forever() -> None:
    await asyncio.sleep(3600)


@task(queue_name="emails", priority=0)
def send_email(to: str) -> str:
    return f"sent to {to}"


@task(priority=7)
def urgent() -> str:
    return "urgent"


@task(takes_context=True)
def witness(context: TaskContext, label: str = "", seconds: float = 0.0) -> str:
    """Work ``seconds``, then write one Witness row (an execution that reached its end)."""
    started = datetime.now(UTC)
    time.sleep(seconds)
    Witness.objects.create(
        run_id=int(context.task_result.id),
        attempt=context.attempt,
        idempotency_key=getattr(context, "idempotency_key", ""),
        scheduled_for=context.task_result.enqueued_at or datetime.now(UTC),
        worker=context.task_result.worker_ids[-1] if context.task_result.worker_ids else "",
        label=label,
        started_at=started,
    )
    return label


# -- tasks of other backends (schedules hand each occurrence to them) -----------------------


@task(backend="dummy")
def dummy_report(idempotency_key: str = "", day: str = "") -> None:
    return None


@task(backend="immediate")
def immediate_report(idempotency_key: str = "", day: str = "") -> str:
    SEEN.append({"task": "immediate_report", "key": idempotency_key, "day": day})
    return idempotency_key


@task(backend="table")
def table_report(idempotency_key: str = "", day: str = "") -> None:
    return None


@task(backend="immediate", queue_name="reports")
def immediate_no_key(day: str = "") -> str:
    SEEN.append({"task": "immediate_no_key", "day": day})
    return day
