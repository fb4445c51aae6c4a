"""Settings of the example project, read from the environment with django-environ.

DATABASE_URL (required; demo.py starts an embedded PostgreSQL if you have none),
DEBUG, SECRET_KEY, ALLOWED_HOSTS.
"""

from __future__ import annotations

from datetime import timedelta

import environ

env = environ.Env(DEBUG=(bool, True), ALLOWED_HOSTS=(list, ["*"]))

SECRET_KEY = env.str("SECRET_KEY", default="example-only-not-a-secret")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgsched",
    "demoapp",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example.urls"
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
WSGI_APPLICATION = "example.wsgi.application"
DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = 60  # job threads reuse their connection
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"

PGSCHED = {
    "CONCURRENCY": 4,
    "SHUTDOWN_GRACE": timedelta(seconds=10),
    # declared in code: upserted when runscheduler starts (edit here, restart, done)
    "SCHEDULES": {
        "heartbeat": {"job": "demo.heartbeat", "cron": "*/5 * * * * *", "misfire_policy": "skip"},
        "slow-report": {
            "job": "demo.slow_report",
            "cron": "0 * * * * *",
            "kwargs": {"seconds": 3},
            "misfire_policy": "latest",
        },
        "flaky-sync": {
            "job": "demo.flaky_sync",
            "interval": 20,
            "max_attempts": 3,
            "misfire_policy": "catch_up",
            "catch_up_limit": 3,
        },
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_pgsched": {"handlers": ["console"], "level": "INFO"},
        "demoapp": {"handlers": ["console"], "level": "INFO"},
    },
}
