"""django-tasks-db (``db_worker``): ``setup DSN``, ``fill DSN N``, ``work DSN`` (one worker),
``produce DSN N THREADS OUT`` (enqueue N tasks from THREADS threads, timed; bench/b_tasks.py).

Django is configured in code; the no-op task lives in ``dtdb_tasks``, which the
worker imports by its dotted path as any project's worker would.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import django
from django.conf import settings


def configure(dsn: str) -> None:
    url = urlsplit(dsn)
    settings.configure(
        SECRET_KEY="bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "django_tasks_db"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.path.lstrip("/"),
                "USER": url.username or "postgres",
                "HOST": url.hostname,
                "PORT": str(url.port),
                # persistent connections, as the bench's replicas have (the worker
                # calls close_old_connections() around every task)
                "CONN_MAX_AGE": 60,
            }
        },
        TASKS={"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        LOGGING_CONFIG=None,
    )
    django.setup()


def main(argv: list[str]) -> int:
    command, dsn, *rest = argv
    configure(dsn)
    from django.core.management import call_command
    from django.db import transaction

    from bench.peers.dtdb_tasks import noop

    if command == "setup":
        call_command("migrate", verbosity=0)
    elif command == "produce":
        import json

        from bench.producers import produce

        count, threads, out = rest
        with open(out, "w") as f:
            json.dump(produce(noop.enqueue, int(count), int(threads)), f)
    elif command == "fill":
        with transaction.atomic():
            for i in range(int(rest[0])):
                noop.enqueue(i)
    else:
        call_command("db_worker", "--no-startup-delay", verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
