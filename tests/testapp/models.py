from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class Witness(models.Model):
    """One row per job execution that reached its end (written by the test jobs)."""

    run_id = models.BigIntegerField()
    attempt = models.PositiveSmallIntegerField()
    idempotency_key = models.CharField(max_length=200)
    schedule_name = models.CharField(max_length=200, null=True)
    scheduled_for = models.DateTimeField()
    worker = models.CharField(max_length=200)
    label = models.CharField(max_length=100, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(db_default=Now())

    class Meta:
        indexes = [models.Index(fields=["run_id"])]

    def __str__(self) -> str:
        return f"run {self.run_id} attempt {self.attempt} by {self.worker}"


class Ledger(models.Model):
    """The fault suite's delivery ledger: a row when a job starts and one when it ends.

    Times come from the database clock (``clock_timestamp()``), so replicas with
    skewed clocks still give comparable intervals; the "start" row commits at
    once, so a job killed mid-flight leaves a start without an end.
    """

    run_id = models.BigIntegerField()
    attempt = models.PositiveSmallIntegerField()
    idempotency_key = models.CharField(max_length=200)
    worker = models.CharField(max_length=200)
    phase = models.CharField(max_length=8)  # "start" or "end"
    pid = models.IntegerField()
    at = models.DateTimeField(db_default=models.Func(function="clock_timestamp"))

    class Meta:
        indexes = [models.Index(fields=["run_id"])]

    def __str__(self) -> str:
        return f"run {self.run_id} attempt {self.attempt} {self.phase} by {self.worker}"
