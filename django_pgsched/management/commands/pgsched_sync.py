"""``manage.py pgsched_sync``: upsert the schedules declared in ``PGSCHED['SCHEDULES']``."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from django_pgsched.ops.sync import sync_schedules


class Command(BaseCommand):
    help = "Create, update and prune the schedules declared in PGSCHED['SCHEDULES']."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--no-prune",
            action="store_true",
            help="keep schedules that were declared in settings but no longer are",
        )
        parser.add_argument("--dry-run", action="store_true", help="report, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = sync_schedules(prune=not options["no_prune"], dry_run=options["dry_run"])
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        verb = "would be" if options["dry_run"] else ""
        for label, names in (
            ("created", result.created),
            ("updated", result.updated),
            ("deleted", result.deleted),
            ("unchanged", result.unchanged),
        ):
            if names:
                self.stdout.write(
                    f"{len(names)} {verb} {label}: {', '.join(names)}".replace("  ", " ")
                )
        if not any((result.created, result.updated, result.deleted, result.unchanged)):
            self.stdout.write("no schedules are declared in PGSCHED['SCHEDULES']")
