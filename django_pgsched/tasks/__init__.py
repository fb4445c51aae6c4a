"""django.tasks with the scheduler's guarantees, and schedules of django.tasks' tasks.

``TASKS = {"default": {"BACKEND": "django_pgsched.tasks.PgschedBackend"}}`` runs
every task enqueued through the framework as one of the scheduler's runs: claimed
under a lease by ``manage.py runscheduler``, retried, recorded attempt by
attempt. A schedule may name a task (``"task:<module path>"``) whichever backend
it uses. See the how-to "Use django.tasks with django-pgsched".
"""

from __future__ import annotations

from .backend import PgschedBackend
from .context import PgschedTaskContext

__all__ = ["PgschedBackend", "PgschedTaskContext"]
