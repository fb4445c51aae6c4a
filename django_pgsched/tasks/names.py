"""How a task is named among the scheduler's jobs: ``task:`` and its module path."""

from __future__ import annotations

PREFIX = "task:"


def job_name(module_path: str) -> str:
    """The registry name of the task defined at ``module_path`` (``task:app.tasks.send``)."""
    return PREFIX + module_path


def module_path(job: str) -> str | None:
    """The task's module path if ``job`` names a task, else ``None``."""
    return job[len(PREFIX) :] if job.startswith(PREFIX) else None
