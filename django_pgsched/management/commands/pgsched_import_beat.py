"""``manage.py pgsched_import_beat``: django-celery-beat's periodic tasks as schedules."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from django_pgsched.importers.celery_beat import ImportResult, import_beat


def task_to_job(value: str) -> tuple[str, str]:
    task, sep, job = value.partition("=")
    if not sep or not task.strip() or not job.strip():
        raise argparse.ArgumentTypeError(f"--job: expected TASK=JOB, got {value!r}")
    return task.strip(), job.strip()


class Command(BaseCommand):
    help = (
        "Import django-celery-beat's periodic tasks as schedules: idempotent; "
        "reports each task that cannot be mapped, with the reason."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would change, write nothing"
        )
        parser.add_argument(
            "--job",
            dest="jobs",
            action="append",
            type=task_to_job,
            default=[],
            metavar="TASK=JOB",
            help="run the Celery task TASK as the registered job JOB (repeatable; "
            "default: the job named like the task)",
        )
        parser.add_argument(
            "--prefix", default="", help="put this before each schedule's name (default: none)"
        )
        parser.add_argument(
            "--paused",
            action="store_true",
            help="create every new schedule paused (while celery beat still runs the tasks)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = import_beat(
                jobs=dict(options["jobs"]),
                prefix=options["prefix"],
                paused=options["paused"],
                dry_run=options["dry_run"],
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write("\n".join(report(result)))


def report(result: ImportResult) -> list[str]:
    would = "would be " if result.dry_run else ""
    lines = ["dry run: nothing was written"] if result.dry_run else []
    for label, names in (
        ("created", result.created),
        ("updated", [f"{n} ({', '.join(f)})" for n, f in result.updated.items()]),
        ("unchanged", result.unchanged),
    ):
        if names:
            verb = "" if label == "unchanged" else would
            lines.append(f"{len(names)} {verb}{label}: {', '.join(names)}")
    if result.created_active:
        lines.append(
            f"{len(result.created_active)} {would}created active: while celery beat still "
            "runs these tasks, both fire them (see --paused)"
        )
    if result.unmapped:
        lines.append(f"{len(result.unmapped)} not mapped:")
        lines += [f"  {name}: {reason}" for name, reason in result.unmapped.items()]
    if result.notes:
        lines.append("imported without:")
        lines += [f"  {name}: {'; '.join(notes)}" for name, notes in result.notes.items()]
    if result.stale:
        lines.append(
            f"{len(result.stale)} imported before, no longer in celery beat (left as they are): "
            + ", ".join(result.stale)
        )
    if len(lines) == int(result.dry_run):
        lines.append("celery beat has no periodic tasks")
    return lines
