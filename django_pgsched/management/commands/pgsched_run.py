"""``manage.py pgsched_run``: run a job, or a schedule's job, now (a one-off run)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from django_pgsched.api import enqueue, run_schedule_now
from django_pgsched.models import Schedule


def json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--kwargs: not valid JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("--kwargs: expected a JSON object")
    return parsed


class Command(BaseCommand):
    help = "Create a one-off run of a registered job (or of a schedule's job) due now."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--job", help="the registered job name")
        target.add_argument("--schedule", help="run this schedule's job with its kwargs")
        parser.add_argument(
            "--tenant", default="", help="with --schedule: its tenant (names are unique within one)"
        )
        parser.add_argument(
            "--kwargs",
            type=json_object,
            default=None,
            help="keyword arguments as a JSON object (with --job), e.g. '{\"n\": 1}'",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["schedule"]:
                try:
                    schedule = Schedule.objects.get(
                        tenant=options["tenant"], name=options["schedule"]
                    )
                except Schedule.DoesNotExist:
                    owner = f" of tenant {options['tenant']!r}" if options["tenant"] else ""
                    raise CommandError(
                        f"no schedule named {options['schedule']!r}{owner}"
                    ) from None
                run = run_schedule_now(schedule, note="run now (pgsched_run)")
            else:
                run = enqueue(options["job"], kwargs=options["kwargs"], note="pgsched_run")
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        self.stdout.write(f"run {run.pk} of {run.job} is due now (key {run.idempotency_key})")
