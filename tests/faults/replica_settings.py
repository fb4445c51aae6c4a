"""Settings of the fault suite's replicas: the test settings without the admin.

A replica needs the engine and the test jobs, not the admin; leaving it out
keeps the replicas' start-up short and independent of admin changes.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [app for app in _APPS if app != "django.contrib.admin"]
ROOT_URLCONF = "tests.faults.replica_urls"
