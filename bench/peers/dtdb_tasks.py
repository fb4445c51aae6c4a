"""The no-op task of the django-tasks-db driver (imported once Django is configured)."""

from __future__ import annotations

from django.tasks import task


@task()
def noop(i: int) -> None:
    return None
