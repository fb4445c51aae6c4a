"""``TASKS`` for the test suite and the bench (both install ``tests.testapp``).

The framework is django.tasks on Django 6 and the django-tasks backport on
5.2 (extra ``tasks``); ``None`` when neither is installed. ``default`` is
``PgschedBackend``; ``immediate`` is the framework's ``ImmediateBackend`` (the
conformance suite's control); ``dummy`` and ``table`` stand for backends that
are not ours (``table`` keeps its queue in our database, as django-tasks-db does).
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any


def _framework() -> str | None:
    if find_spec("django.tasks") is not None:
        return "django.tasks"
    if find_spec("django_tasks") is not None:
        return "django_tasks"
    return None


TASKS_FRAMEWORK = _framework()
TASK_QUEUES = ["default", "emails", "reports"]
TASKS: dict[str, Any] = (
    {
        "default": {"BACKEND": "django_pgsched.tasks.PgschedBackend", "QUEUES": TASK_QUEUES},
        "immediate": {
            "BACKEND": f"{TASKS_FRAMEWORK}.backends.immediate.ImmediateBackend",
            "QUEUES": TASK_QUEUES,
        },
        "dummy": {"BACKEND": f"{TASKS_FRAMEWORK}.backends.dummy.DummyBackend"},
        "table": {"BACKEND": "tests.testapp.backends.TableBackend"},
    }
    if TASKS_FRAMEWORK
    else {}
)
# the backport is an app of its own
FRAMEWORK_APPS = ["django_tasks"] if TASKS_FRAMEWORK == "django_tasks" else []
