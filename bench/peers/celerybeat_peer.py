"""celery beat with django-celery-beat's ``DatabaseScheduler``, and a broker-side counter.

Run with the ``celerybeat`` venv's Python (celery, django-celery-beat, redis):

- ``setup DSN``: django-celery-beat's migrations in that database;
- ``fill DSN N``: N periodic tasks ``bench-1`` … ``bench-N`` of the task
  ``bench.noop`` on one shared every-minute crontab (UTC), as a user's admin
  would leave them (django-celery-beat's own models, ``bulk_create`` in
  batches, then its change marker);
- ``beat DSN BROKER LOGLEVEL``: one ``celery beat`` (the DatabaseScheduler, the
  settings a new user has: Django's defaults, ``CELERY_TIMEZONE = "UTC"``);
- ``flush DSN BROKER``: empty the broker's Redis database (that one only);
- ``consume DSN BROKER OUT``: pop what beat sent from the broker's ``celery`` list
  (Redis), and write one line per message: the time it was popped
  (``time.time()``) and its ``periodic_task_name`` header. Beat's sends are
  counted there, from the broker, not from beat's log. Stops on SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from urllib.parse import urlsplit

import django
from django.conf import settings

QUEUE = "celery"  # Celery's default queue: a Redis list, LPUSHed by the producer


def configure(dsn: str) -> None:
    url = urlsplit(dsn)
    settings.configure(
        SECRET_KEY="bench",
        USE_TZ=True,
        TIME_ZONE="UTC",
        INSTALLED_APPS=["django.contrib.contenttypes", "django_celery_beat"],
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": url.path.lstrip("/"),
                "USER": url.username or "postgres",
                "HOST": url.hostname,
                "PORT": str(url.port),
            }
        },
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        CELERY_TIMEZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()


def fill(count: int) -> None:
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    every_minute = CrontabSchedule.objects.create(
        minute="*", hour="*", day_of_month="*", month_of_year="*", day_of_week="*", timezone="UTC"
    )
    for start in range(0, count, 5000):
        PeriodicTask.objects.bulk_create(
            PeriodicTask(name=f"bench-{i}", task="bench.noop", crontab=every_minute)
            for i in range(start + 1, min(count, start + 5000) + 1)
        )
    PeriodicTasks.update_changed()


def beat(broker: str, loglevel: str) -> None:
    from celery import Celery

    app = Celery("bench", broker=broker)
    app.conf.update(
        timezone="UTC",
        broker_connection_retry_on_startup=True,
        beat_scheduler="django_celery_beat.schedulers:DatabaseScheduler",
    )
    app.Beat(loglevel=loglevel).run()


def consume(broker: str, out: str) -> None:
    import redis

    client = redis.Redis.from_url(broker)
    stop = False

    def stopping(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, stopping)
    with open(out, "w") as f:
        print("ready", flush=True)
        while not stop:
            batch = client.rpop(QUEUE, 1000)
            if not batch:
                time.sleep(0.002)
                continue
            now = time.time()
            for raw in batch:
                name = json.loads(raw).get("headers", {}).get("periodic_task_name", "?")
                f.write(f"{now:.4f} {name}\n")
        f.flush()


def flush(broker: str) -> None:
    import redis

    redis.Redis.from_url(broker).flushdb()


def main(argv: list[str]) -> int:
    command, dsn, *rest = argv
    if command == "consume":
        consume(rest[0], rest[1])
        return 0
    if command == "flush":
        flush(rest[0])
        return 0
    configure(dsn)
    if command == "setup":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    elif command == "fill":
        fill(int(rest[0]))
    else:
        beat(rest[0], rest[1] if len(rest) > 1 else "INFO")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
