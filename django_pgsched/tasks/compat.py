"""The one module that imports Django's task framework.

Django 6 ships it as ``django.tasks``; on Django 5.2 the ``django-tasks``
backport provides the same API as ``django_tasks`` (``pip install
"django-pgsched[tasks]"``). Everything else in this package imports from here,
so there is one code path for both.
"""

from __future__ import annotations

try:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # pragma: no cover - Django 5.2 with the backport
    try:
        from django_tasks import (  # type: ignore[import-not-found,unused-ignore]
            exceptions as _backport_exceptions,
        )
        from django_tasks import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            task_backends,
        )
        from django_tasks.backends.base import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            BaseTaskBackend,
        )
        from django_tasks.base import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            DEFAULT_TASK_BACKEND_ALIAS,
            DEFAULT_TASK_QUEUE_NAME,
            TASK_MAX_PRIORITY,
            TASK_MIN_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )

        # django-tasks 0.12.0 names these InvalidTaskError and InvalidTaskBackendError;
        # later versions use Django's names
        _task = getattr(_backport_exceptions, "InvalidTask", None)
        _backend = getattr(_backport_exceptions, "InvalidTaskBackend", None)
        InvalidTask = _task or _backport_exceptions.InvalidTaskError  # type: ignore[misc]
        InvalidTaskBackend = _backend or _backport_exceptions.InvalidTaskBackendError  # type: ignore[misc]
        from django_tasks.signals import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            task_enqueued,
            task_finished,
            task_started,
        )
        from django_tasks.utils import (  # type: ignore[no-redef,import-not-found,unused-ignore]
            normalize_json,
        )

        FRAMEWORK = "django_tasks"
    except ImportError as exc:
        raise ImportError(
            "django_pgsched.tasks needs Django's task framework: Django 6 (django.tasks), or on "
            'Django 5.2 the django-tasks backport (pip install "django-pgsched[tasks]")'
        ) from exc

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
