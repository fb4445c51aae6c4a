"""``manage.py pgsched_cron EXPR``: validate a cron expression and preview its next fire times."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_pgsched.timing import timetable


def aware(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 date and time: {value!r}") from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} needs a UTC offset, e.g. {value}+00:00")
    return parsed.astimezone(UTC)


def count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"must be from 1 to 1000, got {n}")
    return n


class Command(BaseCommand):
    help = (
        "Check a cron expression (5 fields, or 6 with seconds first; UTC) and print its "
        "next fire times."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("expression", help='e.g. "0 30 9 * * MON-FRI" (quote it)')
        parser.add_argument(
            "-n",
            "--count",
            type=count,
            default=5,
            help="how many fire times to show (default: %(default)s)",
        )
        parser.add_argument(
            "--after",
            type=aware,
            default=None,
            help="start from this time (ISO 8601 with offset; default: now)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            lattice = timetable.cron(options["expression"])
        except timetable.TimetableError as exc:
            raise CommandError(str(exc)) from None
        t = options["after"] or datetime.now(UTC)
        self.stdout.write(f"{options['expression']!r} is valid (UTC). Next fire times:")
        for _ in range(options["count"]):
            t = lattice.next_after(t)
            self.stdout.write(f"  {t:%Y-%m-%d %H:%M:%S} UTC  ({t:%a})")
