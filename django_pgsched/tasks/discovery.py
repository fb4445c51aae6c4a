"""Which django.tasks tasks the scheduler knows: those defined by installed apps' modules.

When Django starts (``PgSchedConfig.ready()``), each installed app's ``tasks``
module is imported, the framework's convention (as ``jobs`` modules are for
``@job``), and every loaded module of an installed app is read for the
``Task`` objects it defines at module level. Each becomes a job of the
registry named ``task:<module path>``: the executor claims its runs, the
planner fires schedules of it, the admin lists it beside the jobs.

That list is the only way from a stored name to code. A run or a schedule
naming a module path that is not in it is refused (its run fails "not
registered here", as an unknown job's does); nothing is imported from a name
read from the database. Every process builds the same list the same way, so
:class:`~django_pgsched.tasks.PgschedBackend` refuses to enqueue a task that
the list lacks: a worker would never find it.
"""

from __future__ import annotations

import logging
import sys
from functools import partial
from types import ModuleType
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.module_loading import autodiscover_modules

from ..registry import JobSpec, get_job, register, validate_job_name
from . import index
from .compat import Task
from .names import job_name

logger = logging.getLogger(__name__)


def _defined_in(module: ModuleType) -> list[Task[..., Any]]:
    """The tasks ``module`` defines at module level, one per function."""
    found: dict[int, Task[..., Any]] = {}
    for value in list(vars(module).values()):
        # type(), not isinstance(): a lazy object's __class__ would evaluate it
        if issubclass(type(value), Task) and value.func.__module__ == module.__name__:
            # several module-level Tasks may share a function (``.using()`` variants):
            # the one named after the function is the decorated one
            named = vars(module).get(value.func.__name__)
            decorated = issubclass(type(named), Task) and named.func is value.func  # type: ignore[union-attr]
            found[id(value.func)] = named if decorated else value  # type: ignore[assignment]
    return list(found.values())


def _add(task: Task[..., Any]) -> None:
    from . import execution

    path = task.module_path
    name = job_name(path)
    try:
        validate_job_name(name)
    except ValidationError:
        logger.warning("task %s: its module path is too long to name a job; skipped", path)
        return
    existing = get_job(name)
    if existing is not None and existing.runner is None:
        raise ImproperlyConfigured(f"job name {name!r} is taken by a @job; rename that job")
    index.add(path, task)
    register(
        JobSpec(
            name=name,
            func=task.func,
            takes_context=task.takes_context,
            runner=partial(execution.run_claim, path),
            **_run_defaults(task),
        )
    )


def _run_defaults(task: Task[..., Any]) -> dict[str, Any]:
    """What a schedule's run of ``task`` gets by default.

    When the task's backend is ours: the task's queue, and the backend's OPTIONS.
    When it is another backend, the run only hands the task over, on the
    scheduler's default queue (the task's queue is the other backend's).
    """
    from .backend import PgschedBackend
    from .compat import task_backends

    try:
        backend = task_backends[task.backend]
    except Exception:  # a backend that cannot be built: the run fails when it forwards
        return {}
    if isinstance(backend, PgschedBackend):
        options = backend.run_options
        return {
            "queue": task.queue_name,
            "max_attempts": options.MAX_ATTEMPTS,
            "timeout": options.TIMEOUT,
            "priority": task.priority,
        }
    return {}


def discover() -> None:
    """Import each installed app's ``tasks`` module, then register the tasks apps define."""
    autodiscover_modules("tasks")
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or apps.get_containing_app_config(name) is None:
            continue
        for task in _defined_in(module):
            _add(task)


get_task = index.get_task
all_tasks = index.all_tasks
