"""Running a task's run on an executor slot: sync or async, with its context and signals.

The executor calls :func:`run_claim` (the registry entry's ``runner``) on a slot
thread with the claim it holds a lease on. A run enqueued through a
:class:`~django_pgsched.tasks.PgschedBackend`, or a schedule's run of a task
whose backend is one, runs here; a schedule's run of a task whose backend is
another is handed to that backend (:mod:`django_pgsched.tasks.forwarding`).

Async tasks: each attempt gets an event loop of its own, through asgiref's
``async_to_sync`` (what ``Task.call()`` does), and the slot thread serves the
coroutine's thread-sensitive ``sync_to_async`` calls, which is where Django runs
the ORM from async code. So each task's queries go through its slot's own
connection, as a sync task's do, and two tasks never share a transaction. (With
one loop shared by every slot, all of them would funnel their ORM calls through
a single thread and connection.) The coroutine runs as an ``asyncio`` task that
is cancelled (``CancelledError`` inside it) once the run's context says stop:
the timeout passed, the lease was lost, the run was cancelled, the replica is
shutting down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from ..context import RunContext
from . import forwarding, index, results
from .arguments import dump_return_value
from .compat import TaskResult, TaskResultStatus, task_backends, task_finished, task_started
from .context import PgschedTaskContext

if TYPE_CHECKING:
    from ..engine.claims import Claim
    from .compat import Task

logger = logging.getLogger(__name__)

CANCEL_POLL = 0.05  # seconds between looks at an async task's context


def run_claim(module_path: str, claim: Claim) -> str | None:
    """Run the task of ``claim``; return the JSON text of its return value."""
    task = index.get_task(module_path)
    if task is None:  # pragma: no cover - the registry entry exists only for known tasks
        raise LookupError(f"task {module_path!r} is not defined here")
    call = claim.task_call
    alias = call["backend"] if call else task.backend
    backend = task_backends[alias]
    from .backend import PgschedBackend

    if call is None and not isinstance(backend, PgschedBackend):
        return forwarding.forward(task, alias, claim)
    args: list[Any] = call.get("args", []) if call else []
    if task.takes_context:
        result = results.load(claim.run_id)
        args = [PgschedTaskContext(task_result=result, run=claim.context), *args]
    else:
        result = _light_result(task, claim, alias, call)
    sender = type(backend)
    task_started.send(sender=sender, task_result=result)
    try:
        value = _call(task.func, args, claim.kwargs, claim.context)
        text = dump_return_value(value)
    except BaseException:
        if claim.attempt >= claim.max_attempts:  # the last attempt: the task has finished
            _finished(sender, result, TaskResultStatus.FAILED)
        raise
    _finished(sender, result, TaskResultStatus.SUCCESSFUL)
    return text


def _call(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], context: RunContext
) -> Any:
    if iscoroutinefunction(func):
        return async_to_sync(_supervised)(func, args, kwargs, context)
    return func(*args, **kwargs)


async def _supervised(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], context: RunContext
) -> Any:
    """Await ``func(*args, **kwargs)``; cancel it once the run's context says stop."""
    job = asyncio.ensure_future(func(*args, **kwargs))
    while True:
        done, _ = await asyncio.wait({job}, timeout=CANCEL_POLL)
        if done:
            return job.result()
        if context.is_cancelled():
            job.cancel()
            try:
                return await job  # a coroutine may catch CancelledError and return
            except asyncio.CancelledError:
                raise asyncio.CancelledError(f"stopped: {context.cancel_reason}") from None


def _finished(sender: type, result: TaskResult[..., Any], status: TaskResultStatus) -> None:
    object.__setattr__(result, "status", status)
    task_finished.send(sender=sender, task_result=result)


def _light_result(
    task: Task[..., Any], claim: Claim, alias: str, call: dict[str, Any] | None
) -> TaskResult[..., Any]:
    """The run as the claim knows it, without a query (for the framework's signals).

    For a run enqueued through the backend, ``enqueued_at`` is the one stored
    with its call; for a schedule's run, the occurrence's time. Earlier
    attempts' workers are not known here (their entries are empty).
    """
    enqueued = call.get("enqueued_at") if call else None
    return TaskResult(
        task=results.task_of_claim(task, claim, alias, call),
        id=str(claim.run_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=datetime.fromisoformat(enqueued) if enqueued else claim.scheduled_for,
        started_at=claim.started_at if claim.attempt == 1 else None,
        last_attempted_at=claim.started_at,
        finished_at=None,
        args=call.get("args", []) if call else [],
        kwargs=claim.kwargs,
        backend=alias,
        errors=[],
        worker_ids=[""] * (claim.attempt - 1) + [claim.context.worker],
    )
