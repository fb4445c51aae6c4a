"""Minimal Django settings for building the docs: autodoc imports the package, and the
docs check reads the models. Nothing here opens a database connection."""

from __future__ import annotations

SECRET_KEY = "docs-only-not-a-secret"  # noqa: S105
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_pgsched"]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "pgsched_docs"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
