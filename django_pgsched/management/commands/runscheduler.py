"""``manage.py runscheduler``: run the planner, executor and maintenance loops."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from django.core import checks
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from django_pgsched.conf import get_settings
from django_pgsched.engine.backoff import Backoff
from django_pgsched.engine.runner import LOOPS, Runner
from django_pgsched.ops.sync import sync_schedules
from django_pgsched.ops.zones import recheck_zoned_schedules

logger = logging.getLogger("django_pgsched")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def port(value: str) -> int:
    number = positive_int(value)
    if number > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {number}")
    return number


def loop_names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = sorted(set(names) - set(LOOPS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown loop(s) {', '.join(unknown) or repr(value)}; choose from {', '.join(LOOPS)}"
        )
    return names


def queue_names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected one or more queue names, separated by commas")
    return names


class Command(BaseCommand):
    help = "Run the scheduler in this process: planner, executor and maintenance loops."
    requires_migrations_checks = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            help="executor slots: jobs running at once (default: PGSCHED['CONCURRENCY'])",
        )
        parser.add_argument(
            "--loops",
            type=loop_names,
            default=list(LOOPS),
            help="comma-separated loops to run (default: %(default)s)",
        )
        parser.add_argument(
            "--queues",
            type=queue_names,
            default=None,
            help="comma-separated queues the executor serves (default: all)",
        )
        parser.add_argument(
            "--worker-id", default=None, help="a readable name for this replica (default: host:pid)"
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            help="serve Prometheus metrics, /healthz and /readyz on this port",
        )
        parser.add_argument(
            "--no-sync", action="store_true", help="do not upsert PGSCHED['SCHEDULES'] at start"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # the checks that need the database (PostgreSQL 14+) run here, against the scheduler's
        self.check(tags=[checks.Tags.database], databases=[get_settings().DATABASE_ALIAS])
        if not logger.handlers and not logging.getLogger().handlers:
            logging.basicConfig(
                level=logging.DEBUG if options["verbosity"] > 2 else logging.INFO,
                format="%(asctime)s %(levelname)s %(name)s %(message)s",
                stream=sys.stderr,
            )
        runner = Runner(
            loops=options["loops"],
            concurrency=options["concurrency"],
            queues=options["queues"],
            worker_id=options["worker_id"],
        )
        if not options["no_sync"]:
            self._sync(runner)
        if "planner" in runner.loops:
            self._recheck_zones()
        if options["metrics_port"]:
            from django_pgsched.ops.metrics import serve

            serve(options["metrics_port"], runner)
        runner.run()

    def _recheck_zones(self) -> None:
        """New tz rules take effect at a restart: fix next fire times they moved."""
        try:
            result = recheck_zoned_schedules()
        except DatabaseError as exc:  # the planner works without it; the next start retries
            logger.warning("cannot re-check zoned schedules (%s)", exc)
            return
        if result.retimed:
            logger.info("tz rules moved %d schedule(s)", len(result.retimed))

    def _sync(self, runner: Runner) -> None:
        backoff = Backoff()
        while not runner.stopping.is_set():
            try:
                result = sync_schedules()
            except DatabaseError as exc:
                logger.warning("cannot sync PGSCHED['SCHEDULES'] yet (%s); retrying", exc)
                time.sleep(backoff.next())
                continue
            except Exception as exc:
                raise CommandError(f"PGSCHED['SCHEDULES']: {exc}") from exc
            if result.created or result.updated or result.deleted:
                logger.info(
                    "schedules from settings: %d created, %d updated, %d deleted",
                    len(result.created),
                    len(result.updated),
                    len(result.deleted),
                )
            return
