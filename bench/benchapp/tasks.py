"""The django.tasks task of the bench (bench/b_tasks.py): a no-op, through PgschedBackend."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # pragma: no cover - Django 5.2 with the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def noop(i: int) -> None:
    return None
