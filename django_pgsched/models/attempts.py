"""Attempts: one per delivery of a run, written with its outcome."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from .. import fields
from ..limits import (
    MAX_ATTEMPTS,
)
from ..statuses import (
    AttemptStatus,
)
from .runs import JobRun


class AttemptQuerySet(models.QuerySet["Attempt"]):
    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Attempt]:
        """``bulk_create()``; each attempt goes to its run's month (``run_scheduled_for``)."""
        objs = list(objs)
        for obj in objs:
            obj.fill_run_scheduled_for()
        return super().bulk_create(objs, *args, **kwargs)


class Attempt(models.Model):
    """One delivery of a run: numbered 1..8, written with the run's outcome."""

    job_run = models.ForeignKey(
        JobRun,
        on_delete=models.DO_NOTHING,  # ON DELETE CASCADE in the database (migration)
        db_constraint=False,
        db_index=False,  # the unique (job_run_id, number) index serves lookups
    )
    run_scheduled_for = fields.TimeField(
        editable=False,
        help_text="Its run's scheduled_for: the partition key, so that a month's attempts "
        "detach with its runs.",
    )
    number = models.PositiveSmallIntegerField()
    status = models.CharField(max_length=16, choices=AttemptStatus.choices)
    started_at = fields.TimeField(null=True, blank=True)
    finished_at = fields.TimeField()
    worker = models.CharField(max_length=200, blank=True, default="", db_default="")
    error = models.TextField(blank=True, default="", db_default="")
    detail = fields.PayloadField(
        null=True,
        blank=True,
        help_text="What the job recorded about this attempt (an HTTP delivery's evidence).",
    )
    error_class = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        help_text="The class of the exception the attempt raised (module.QualifiedName).",
    )

    objects: ClassVar[AttemptQuerySet] = AttemptQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "pgsched_attempt"
        ordering = ("job_run_id", "number")
        constraints = (
            models.UniqueConstraint(
                fields=("job_run", "number", "run_scheduled_for"), name="pgsched_attempt_once"
            ),
            models.CheckConstraint(
                condition=models.Q(number__gte=1, number__lte=MAX_ATTEMPTS),
                name="pgsched_attempt_number_range",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=AttemptStatus.values),
                name="pgsched_attempt_status_valid",
            ),
        )

    def __str__(self) -> str:
        return f"attempt {self.number} of run {self.job_run_id}: {self.status}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.fill_run_scheduled_for()
        super().save(*args, **kwargs)

    def fill_run_scheduled_for(self) -> None:
        """Its run's ``scheduled_for``, if unset: the month (partition) it goes to."""
        if getattr(self, "run_scheduled_for", None) is None and self.job_run_id is not None:
            self.run_scheduled_for = self.job_run.scheduled_for
