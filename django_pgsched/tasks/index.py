"""The tasks installed apps define, by module path (filled by :mod:`.discovery`).

Below the backend, the execution and the discovery, which all read it.
"""

from __future__ import annotations

from typing import Any

from .compat import Task

_tasks: dict[str, Task[..., Any]] = {}


def add(path: str, task: Task[..., Any]) -> None:
    _tasks[path] = task


def get_task(module_path: str) -> Task[..., Any] | None:
    """The task defined at ``module_path``, if an installed app defines it."""
    return _tasks.get(module_path)


def all_tasks() -> dict[str, Task[..., Any]]:
    return dict(_tasks)
