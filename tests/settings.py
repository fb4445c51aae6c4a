"""Settings for the test suite: PostgreSQL from DATABASE_URL (conftest starts an
embedded server and sets it when the variable is absent)."""

from __future__ import annotations

import os

import environ

env = environ.Env()

SECRET_KEY = "tests-only-not-secret"
DEBUG = bool(os.environ.get("PGSCHED_FAILPOINTS"))  # check E007: failpoints need DEBUG
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgsched",
    "tests.testapp",
]

# Django's task framework and the backends the suite uses (tests/task_settings.py)
from tests.task_settings import FRAMEWORK_APPS, TASKS, TASKS_FRAMEWORK  # noqa: E402, F401

INSTALLED_APPS += FRAMEWORK_APPS

if not os.environ.get("DATABASE_URL"):
    # No server given: start the embedded one (the ``embedded`` extra). Replica
    # subprocesses inherit the variable and reach the same server.
    from pathlib import Path

    from django_pgsched import embedded

    os.environ["DATABASE_URL"] = embedded.start(
        Path(__file__).parent.parent / ".embedded-pg" / "test"
    )

DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"].setdefault("TEST", {})
if os.environ.get("PGSCHED_TEST_DB_NAME"):
    # subprocess replicas started by the acceptance tests use the test database as-is
    DATABASES["default"]["NAME"] = os.environ["PGSCHED_TEST_DB_NAME"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
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

PGSCHED: dict[str, object] = {}
if os.environ.get("PGSCHED_TEST_OVERRIDES"):
    # replica subprocesses of the acceptance tests get shorter intervals this way
    import json

    PGSCHED.update(json.loads(os.environ["PGSCHED_TEST_OVERRIDES"]))
    # persistent connections for job threads, as a production deployment would configure
    DATABASES["default"]["CONN_MAX_AGE"] = 60

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_pgsched": {
            "handlers": ["console"],
            "level": env.str("PGSCHED_LOG_LEVEL", default="WARNING"),
        }
    },
}
