from __future__ import annotations

from django.apps import AppConfig


class DemoAppConfig(AppConfig):
    name = "demoapp"
    verbose_name = "Demo jobs"
