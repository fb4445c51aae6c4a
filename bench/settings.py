"""Django settings of the bench's replicas and probes (``DJANGO_SETTINGS_MODULE=bench.settings``).

The database comes from ``PGSCHED_BENCH_DSN`` (the private cluster's URL, set
by the harness). Replicas run without ``django.contrib.admin``, as in the
fault suite; ``PGSCHED_BENCH_ADMIN=1`` adds it for the admin benchmark.
``PGSCHED_BENCH_OVERRIDES`` (JSON) overrides ``PGSCHED`` keys, to measure a
proposed setting against the default in the same run.
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

_url = urlsplit(os.environ.get("PGSCHED_BENCH_DSN", "postgresql://postgres@127.0.0.1/bench"))

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ADMIN = os.environ.get("PGSCHED_BENCH_ADMIN") == "1"
INSTALLED_APPS = [
    *(["django.contrib.admin"] if ADMIN else []),
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_pgsched",
    "tests.testapp",
    "bench.benchapp",
]
# django.tasks: PgschedBackend as "default" (bench/b_tasks.py), and the backends the test
# app's tasks name
from tests.task_settings import FRAMEWORK_APPS, TASKS, TASKS_FRAMEWORK  # noqa: E402, F401

INSTALLED_APPS += FRAMEWORK_APPS
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/") or "bench",
        "USER": _url.username or "postgres",
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
        # PGSCHED_BENCH_CONN_MAX_AGE: Django's default (0) or another value, for
        # bench.conn_race; otherwise 60, as the bench's replicas always had
        "CONN_MAX_AGE": int(os.environ.get("PGSCHED_BENCH_CONN_MAX_AGE", "60")),
    }
}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "bench.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
PGSCHED: dict[str, object] = json.loads(os.environ.get("PGSCHED_BENCH_OVERRIDES") or "{}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_pgsched": {"handlers": ["console"], "level": "WARNING"}},
}
