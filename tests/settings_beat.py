"""The test settings with django-celery-beat installed, for the importer's tests.

``pytest tests/integration/test_import_beat.py --ds=tests.settings_beat`` in an
environment with the ``celery-beat`` dependency group (django-celery-beat 2.9
caps Django below 6.1, so ``.ci/run`` runs these in its Django 5.2 environment).
The test database then has django-celery-beat's own tables, made by its own
migrations.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
CELERY_TIMEZONE = "UTC"
