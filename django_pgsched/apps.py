from __future__ import annotations

from importlib.util import find_spec

from django.apps import AppConfig


class PgSchedConfig(AppConfig):
    name = "django_pgsched"
    label = "pgsched"
    verbose_name = "Scheduler"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import registry, wiring
        from .ops import checks  # noqa: F401  (registers the system checks)

        wiring.plug_shipped()  # the capabilities, into the engine's ports
        registry.autodiscover()
        if find_spec("django.tasks") or find_spec("django_tasks"):
            from .tasks import discovery  # django.tasks (Django 6) or its backport

            discovery.discover()
