"""``manage.py pgsched_backfill``: the runs of a schedule's past occurrences that have none."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from django_pgsched.audit import actor
from django_pgsched.bounds import time_error
from django_pgsched.ledger.backfill import BackfillRefused, backfill_occurrences


def instant(value: str) -> datetime:
    """An ISO 8601 time; without an offset it is read as UTC (schedules are UTC)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 time (for example 2026-11-23T00:00:00Z)"
        ) from None
    parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
    problem = time_error("time", parsed)
    if problem:  # year 1 BC or year 10000 once in UTC
        raise argparse.ArgumentTypeError(f"{value!r}: {problem}")
    return parsed


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


class Command(BaseCommand):
    help = (
        "Create the runs of a schedule's occurrences in [--start, --end) that have none yet "
        "(marked is_backfill, due now). Idempotent; refuses more than --limit."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("schedule", help="the schedule's name")
        parser.add_argument("--start", type=instant, required=True, help="first instant (ISO 8601)")
        parser.add_argument(
            "--end", type=instant, required=True, help="end instant, excluded (ISO 8601)"
        )
        parser.add_argument(
            "--limit",
            type=positive,
            default=None,
            help="refuse to create more runs than this (default PGSCHED['BACKFILL_LIMIT'])",
        )
        parser.add_argument(
            "--queue", default=None, help="the runs' queue (default: the schedule's)"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="say how many runs it would create; create none"
        )
        parser.add_argument(
            "--tenant", default="", help="the schedule's tenant (names are unique within one)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with actor("command pgsched_backfill"):
                result = backfill_occurrences(
                    options["schedule"],
                    options["start"],
                    options["end"],
                    limit=options["limit"],
                    tenant=options["tenant"],
                    queue=options["queue"],
                    dry_run=options["dry_run"],
                    note="backfill (pgsched_backfill)",
                )
        except BackfillRefused as exc:
            raise CommandError(str(exc)) from None
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        verb = "would create" if options["dry_run"] else "created"
        self.stdout.write(
            f"{result.schedule}: {verb} {result.created} run(s); {result.already} of the "
            f"{result.occurrences} occurrence(s) before {result.horizon.isoformat()} "
            "had one already"
        )
        if result.horizon < options["end"]:
            self.stdout.write(
                f"occurrences from {result.horizon.isoformat()} on are not due or not yet "
                "decided by the planner: left to it"
            )
