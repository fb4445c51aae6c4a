"""``manage.py runscheduler``: run the planner, executor and maintenance loops."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from django.core import checks
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections

from django_pgsched.conf import get_settings
from django_pgsched.engine import db
from django_pgsched.engine.backoff import Backoff
from django_pgsched.engine.runner import LOOPS, Runner, handle_signals
from django_pgsched.ops.sync import sync_schedules
from django_pgsched.ops.zones import recheck_zoned_schedules

logger = logging.getLogger("django_pgsched")

# what a database that is down or restarting raises: waited for, never fatal
CONNECTION_ERRORS = (OperationalError, InterfaceError)


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
    # the migrations check needs the database: _wait_for_database runs it once it answers
    requires_migrations_checks = False

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
            "--metrics-host",
            default="127.0.0.1",
            help="the address the metrics server listens on (default: %(default)s; "
            "0.0.0.0 for every interface, as in a container)",
        )
        parser.add_argument(
            "--no-sync", action="store_true", help="do not upsert PGSCHED['SCHEDULES'] at start"
        )

    def handle(self, *args: Any, **options: Any) -> None:
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
        if options["metrics_port"]:  # first: /readyz says "no" while the database is away
            from django_pgsched.ops.metrics import serve

            try:
                serve(options["metrics_port"], runner, host=options["metrics_host"])
            except OSError as exc:
                raise CommandError(
                    f"--metrics-host {options['metrics_host']} --metrics-port "
                    f"{options['metrics_port']}: {exc}"
                ) from exc
        with handle_signals(runner.request_stop):
            self._wait_for_database(runner)
            if not options["no_sync"] and not runner.stopping.is_set():
                self._sync(runner)
        if runner.stopping.is_set():
            return
        if "planner" in runner.loops:
            self._recheck_zones()
        runner.run()

    def _wait_for_database(self, runner: Runner) -> None:
        """The checks that need the database, and the migrations check, once it answers.

        A database that cannot be reached (``OperationalError``, ``InterfaceError``) is
        waited for with backoff; any other failure, or a failed check, ends the command.
        """
        alias = get_settings().DATABASE_ALIAS
        backoff = Backoff()
        runner.state.waiting_for = "database"
        try:
            while not runner.stopping.is_set():
                try:
                    # PostgreSQL 14+, the occurrence index, the audit trigger
                    self.check(tags=[checks.Tags.database], databases=[alias])
                    self.check_migrations()
                    return
                except CONNECTION_ERRORS as exc:
                    wait = backoff.next()
                    logger.warning(
                        "the database is unreachable (%s); retrying in %.1fs",
                        _first_line(exc),
                        wait,
                    )
                    for name in {alias, DEFAULT_DB_ALIAS}:
                        db.discard(connections[name])
                    runner.stopping.wait(wait)
        finally:
            runner.state.waiting_for = ""
            runner.state.started = time.monotonic()  # the loops' health counts from here

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
        """Upsert PGSCHED['SCHEDULES']: connection errors are retried, anything else ends it."""
        backoff = Backoff()
        while not runner.stopping.is_set():
            try:
                result = sync_schedules()
            except CONNECTION_ERRORS as exc:
                wait = backoff.next()
                logger.warning(
                    "cannot sync PGSCHED['SCHEDULES'] yet (%s); retrying in %.1fs",
                    _first_line(exc),
                    wait,
                )
                db.discard(connections[get_settings().DATABASE_ALIAS])
                runner.stopping.wait(wait)
                continue
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages)) from None
            except Exception as exc:
                raise CommandError(f"PGSCHED['SCHEDULES']: {_first_line(exc)}") from exc
            if result.created or result.updated or result.deleted:
                logger.info(
                    "schedules from settings: %d created, %d updated, %d deleted",
                    len(result.created),
                    len(result.updated),
                    len(result.deleted),
                )
            return


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
