"""Runs: one per occurrence of a schedule (or one-off), the record of what ran."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.db import connections, models, transaction
from django.db.models.functions import Now

from .. import bounds, fields
from ..conf import get_settings
from ..limits import (
    MAX_ATTEMPTS,
)
from ..statuses import (
    CLAIMABLE_STATUSES,
    TERMINAL_STATUSES,
    UNSUCCESSFUL_STATUSES,
    OverlapPolicy,
    RunStatus,
)
from ..tenants import MAX_LENGTH as TENANT_MAX_LENGTH
from .schedules import Schedule


class JobRunQuerySet(models.QuerySet["JobRun"]):
    def claimable(self) -> JobRunQuerySet:
        return self.filter(status__in=CLAIMABLE_STATUSES)

    def running(self) -> JobRunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def terminal(self) -> JobRunQuerySet:
        return self.filter(status__in=TERMINAL_STATUSES)

    def unfinished(self) -> JobRunQuerySet:
        return self.exclude(status__in=TERMINAL_STATUSES)

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[JobRun]:
        """``bulk_create()``, refusing out-of-bounds values first (:mod:`.bounds`), in months
        that exist (each run's month is made if missing: django_pgsched.partitions)."""
        objs = list(objs)
        for obj in objs:
            obj.check_bounds()
        times = [obj.scheduled_for for obj in objs if obj.scheduled_for is not None]
        with transaction.atomic(using=self.db, savepoint=False):
            if times:
                _ensure_months(self.db, times)
            with bounds.refused_as_validation_error():
                return super().bulk_create(objs, *args, **kwargs)


def _ensure_months(alias: str, times: list[datetime]) -> None:
    """The partitions of ``times``' months, made in this transaction if missing."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pgsched_ensure_months(%s::timestamptz[])", [sorted(set(times))])


class JobRun(models.Model):
    """One run of a job: an occurrence of a schedule, or a one-off enqueued run."""

    schedule = models.ForeignKey(
        Schedule,
        null=True,
        blank=True,
        related_name="runs",
        # ON DELETE SET NULL is enforced by the database (see the migration), so
        # deleting a schedule with a long history is one statement, not a loop.
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the unique (schedule_id, scheduled_for) index serves lookups
    )
    schedule_name = models.CharField(max_length=200, null=True, blank=True)
    scheduled_for = fields.TimeField()
    idempotency_key = models.CharField(max_length=200)
    job = models.CharField(max_length=200)
    kwargs = fields.PayloadField(default=dict, db_default={}, blank=True)
    queue = models.CharField(max_length=100)
    status = models.CharField(
        max_length=16,
        choices=RunStatus.choices,
        default=RunStatus.PENDING,
        db_default=RunStatus.PENDING,
    )
    fire_after = fields.TimeField()
    # SmallIntegerField, not Positive...: pgsched_run_attempts_range and
    # pgsched_run_max_attempts_range (their domains' CHECKs) bound both (a second CHECK of
    # the same bound costs every statement that writes a run)
    attempts = models.SmallIntegerField(default=0, db_default=0)
    max_attempts = models.SmallIntegerField()
    timeout = fields.IntervalField()
    claimed_by = models.UUIDField(null=True, blank=True, help_text="Lease token of the claim.")
    worker = models.CharField(
        max_length=200, null=True, blank=True, help_text="Who holds the lease."
    )
    claim_expires_at = fields.TimeField(null=True, blank=True)
    started_at = fields.TimeField(null=True, blank=True)
    finished_at = fields.TimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="", db_default="")
    is_backfill = models.BooleanField(
        default=False, db_default=False, help_text="Created by a backfill, not by the planner."
    )
    overlap = models.CharField(
        max_length=16,
        null=True,
        blank=True,
        choices=OverlapPolicy.choices,
        help_text="Its schedule's overlap policy when it was created; empty: allow.",
    )
    start_by = fields.TimeField(
        null=True,
        blank=True,
        help_text="Its start deadline: not started by then, it ends 'missed' without running.",
    )
    tenant = models.CharField(
        max_length=TENANT_MAX_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="Whose run this is (empty: no tenant); copied from the schedule when planned.",
    )
    created_at = fields.TimeField(db_default=Now(), editable=False)
    # django.tasks (django_pgsched.tasks): a task's priority, its call, its return value
    priority = models.SmallIntegerField(
        default=0,
        db_default=0,
        help_text="-100 to 100: among due runs of a queue, higher priorities are claimed first.",
    )
    task_call = fields.PayloadField(
        null=True,
        blank=True,
        editable=False,
        help_text="For a task enqueued through django.tasks: its positional arguments, "
        "backend alias and run_after.",
    )
    return_value = fields.PayloadField(
        null=True,
        blank=True,
        editable=False,
        help_text="What a task returned (JSON), recorded with its succeeded attempt.",
    )

    objects: ClassVar[JobRunQuerySet] = JobRunQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "pgsched_job_run"
        verbose_name = "run"
        ordering = ("-scheduled_for", "-id")
        permissions = (
            ("retry_jobrun", "Can retry runs"),
            ("cancel_jobrun", "Can cancel runs"),
        )
        constraints = (
            # The hard guard against duplicate fires: one run per occurrence, whoever plans it.
            models.UniqueConstraint(
                fields=("schedule", "scheduled_for"),
                condition=models.Q(schedule__isnull=False),
                name="pgsched_one_run_per_occurrence",
            ),
            # Unique within a tenant and a month (a partitioned table's unique index holds
            # its partition key); across months, the trigger pgsched_run_key_unique
            # (migrations/sql/triggers.sql) keeps a tenant's key to one run: see docs,
            # "Partitions".
            models.UniqueConstraint(
                fields=("idempotency_key", "tenant", "scheduled_for"),
                name="pgsched_run_idempotency_key",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=RunStatus.values), name="pgsched_run_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(overlap__isnull=True)
                | models.Q(overlap__in=(OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE)),
                name="pgsched_run_overlap_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__gte=0, attempts__lte=MAX_ATTEMPTS),
                name="pgsched_run_attempts_range",
            ),
            models.CheckConstraint(
                condition=models.Q(max_attempts__gte=1, max_attempts__lte=MAX_ATTEMPTS),
                name="pgsched_run_max_attempts_range",
            ),
            # a retrying run has an attempt left (else nothing would ever claim or end it)
            models.CheckConstraint(
                condition=models.Q(attempts__lte=models.F("max_attempts"))
                & (~models.Q(status="retrying") | models.Q(attempts__lt=models.F("max_attempts"))),
                name="pgsched_run_attempts_within_max",
            ),
            # a lease exists exactly while the run is running
            models.CheckConstraint(
                condition=(
                    models.Q(
                        status=RunStatus.RUNNING,
                        claimed_by__isnull=False,
                        claim_expires_at__isnull=False,
                    )
                    | (
                        ~models.Q(status=RunStatus.RUNNING)
                        & models.Q(claimed_by__isnull=True, claim_expires_at__isnull=True)
                    )
                ),
                name="pgsched_run_lease_iff_running",
            ),
            models.CheckConstraint(
                condition=~models.Q(status__in=TERMINAL_STATUSES)
                | models.Q(finished_at__isnull=False),
                name="pgsched_run_terminal_has_finished_at",
            ),
            models.CheckConstraint(
                condition=models.Q(priority__gte=-100, priority__lte=100),
                name="pgsched_run_priority_range",
            ),
        )
        indexes = (
            models.Index(
                fields=("fire_after", "id"),
                condition=models.Q(status__in=CLAIMABLE_STATUSES),
                name="pgsched_run_claimable_idx",
            ),
            # The executor's claim order: priority (highest first, hence the negation:
            # one ascending key that a row comparison can start from), then due time.
            # Every run has a priority; jobs' and schedules' runs are 0 unless their
            # job or task says otherwise.
            models.Index(
                models.F("priority") * -1,
                models.F("fire_after"),
                models.F("id"),
                condition=models.Q(status__in=CLAIMABLE_STATUSES),
                name="pgsched_run_claim_order_idx",
            ),
            models.Index(
                fields=("started_at",),
                condition=models.Q(status=RunStatus.RUNNING),
                name="pgsched_run_running_idx",
            ),
            # The admin's run list: its order (-scheduled_for, -id), alone and behind
            # each filter, so a page is an index scan that stops after the page. By
            # status: succeeded runs are dense in the first index, unfinished ones are
            # few (the claimable and running indexes), failed and cancelled ones have
            # this small index (one entry per such run, none for the others).
            models.Index(fields=("scheduled_for", "id"), name="pgsched_run_recent_idx"),
            models.Index(
                fields=("scheduled_for", "id"),
                condition=models.Q(status__in=UNSUCCESSFUL_STATUSES),
                name="pgsched_run_unsuccessful_idx",
            ),
            # The overlap policy (engine/queries.sql executor_pass, and the guard):
            # the runs of schedules that must not overlap, by schedule and finish
            # (unfinished ones have none). Runs of other schedules take no entry.
            models.Index(
                fields=("schedule", "finished_at"),
                condition=models.Q(overlap__isnull=False),
                name="pgsched_run_exclusive_idx",
            ),
            # The runs with an overlap policy or a start deadline, not yet started, in
            # the claim's order: the guarded claim's (executor_guarded_pick, which stops
            # after its limit) and the guard's scan (engine/guard.py, pending only); the
            # others take none.
            models.Index(
                models.F("priority") * -1,
                models.F("fire_after"),
                models.F("id"),
                condition=models.Q(status__in=CLAIMABLE_STATUSES)
                & (models.Q(overlap__isnull=False) | models.Q(start_by__isnull=False)),
                name="pgsched_run_guarded_idx",
            ),
            # By queue: only the queues other than "default" (the dense case, read in
            # order from the first index with a filter); the admin's filter repeats the
            # predicate so the planner can use it.
            models.Index(
                fields=("queue", "scheduled_for", "id"),
                condition=~models.Q(queue="default"),
                name="pgsched_run_by_queue_idx",
            ),
            # By schedule: its occurrences are in the unique (schedule_id,
            # scheduled_for) index; this one holds the runs carrying only its name
            # (run now, retries, and the history of a deleted schedule).
            models.Index(
                fields=("schedule_name", "scheduled_for", "id"),
                condition=models.Q(schedule__isnull=True),
                name="pgsched_run_one_off_idx",
            ),
            # A held tenant's claim (max_running, engine/queries.sql executor_held_pick):
            # its claimable runs in the claim's order, and its running ones counted.
            # Runs without a tenant take no entry.
            models.Index(
                models.F("tenant"),
                models.F("priority") * -1,
                models.F("fire_after"),
                models.F("id"),
                condition=models.Q(status__in=CLAIMABLE_STATUSES) & ~models.Q(tenant=""),
                name="pgsched_run_tenant_due_idx",
            ),
            models.Index(
                fields=("tenant", "claim_expires_at"),
                condition=models.Q(status=RunStatus.RUNNING) & ~models.Q(tenant=""),
                name="pgsched_run_tenant_running_idx",
            ),
            # The history API (django_pgsched.history): one tenant's runs in the
            # order of its pages, so a page of a day is a range read that stops
            # after the page. Runs without a tenant take no entry.
            models.Index(
                fields=("tenant", "scheduled_for", "id"),
                condition=~models.Q(tenant=""),
                name="pgsched_run_tenant_idx",
            ),
        )

    def __str__(self) -> str:
        label = self.schedule_name or self.job
        return f"{label} @ {self.scheduled_for:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, refusing out-of-bounds values first (:mod:`.bounds`)."""
        self.check_bounds()
        if self._state.adding and self.scheduled_for is not None:
            # its month's partition, made in this transaction if missing (a run years
            # ahead, a backfill long ago): see django_pgsched.partitions
            alias = kwargs.get("using") or self._state.db or get_settings().DATABASE_ALIAS
            _ensure_months(alias, [self.scheduled_for])
        with bounds.refused_as_validation_error(self):
            super().save(*args, **kwargs)

    def check_bounds(self) -> None:
        """``ValidationError`` for a time, duration or payload the database would refuse."""
        bounds.check(self, bounds.RUN_TIMES_ALL, bounds.RUN_DURATIONS, bounds.RUN_PAYLOADS)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
