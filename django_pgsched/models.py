"""Schedules, their runs, and the attempts of each run.

The database enforces what matters (see the migration for the CHECKs and
triggers that Django's ``Meta`` cannot express): one run per occurrence,
exactly one of cron / interval, attempt numbers within 1..MAX_ATTEMPTS, whole-second
occurrence times, and the lease columns consistent with the run's status.
Validation in :meth:`Schedule.clean` gives readable messages first; the
constraints are the backstop for raw SQL and ``QuerySet.update()``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import connections, models, transaction
from django.db.models.functions import Now

from . import bounds, fields
from .audit.actor import orm_unless_named
from .conf import Settings, get_settings
from .limits import (
    MAX_ATTEMPTS,
    MAX_CATCH_UP_LIMIT,
    MAX_MISFIRE_GRACE,
    MAX_START_DEADLINE,
    MIN_START_DEADLINE,
)
from .payload import validate_kwargs
from .registry import require_job, validate_max_attempts, validate_queue, validate_timeout
from .statuses import (
    CLAIMABLE_STATUSES,
    TERMINAL_STATUSES,
    UNFINISHED_STATUSES,
    UNSUCCESSFUL_STATUSES,
    AttemptStatus,
    DstFold,
    DstGap,
    MisfirePolicy,
    OverlapPolicy,
    RunStatus,
    ScheduleStatus,
)
from .tenants import MAX_LENGTH as TENANT_MAX_LENGTH
from .tenants import limits as tenant_limits
from .tenants import quotas, validate_tenant
from .timing import jitter as jitters
from .timing import timetable, zoned, zones

__all__ = [
    "CLAIMABLE_STATUSES",
    "TERMINAL_STATUSES",
    "UNFINISHED_STATUSES",
    "Attempt",
    "AttemptStatus",
    "Breaker",
    "BreakerState",
    "ChangeAction",
    "DstFold",
    "DstGap",
    "JobRun",
    "MisfirePolicy",
    "OverlapPolicy",
    "Replica",
    "RunStatus",
    "Schedule",
    "ScheduleChange",
    "ScheduleStatus",
    "SkippedRange",
    "Tenant",
    "db_now",
]

# the columns that define a schedule's timetable of occurrences
LATTICE_FIELDS = ("cron", "interval", "anchor", "timezone", "dst_gap", "dst_fold")
# what a user defines (in the admin, or in PGSCHED["SCHEDULES"] besides the name)
DEFINITION_FIELDS = (
    "job",
    "kwargs",
    "cron",
    "interval",
    "anchor",
    "timezone",
    "dst_gap",
    "dst_fold",
    "jitter",
    "misfire_policy",
    "catch_up_limit",
    "misfire_grace",
    "overlap",
    "start_deadline",
    "max_attempts",
    "timeout",
    "queue",
    "tenant",
)


def _default_policy() -> str:
    return get_settings().DEFAULT_MISFIRE_POLICY


def _default_catch_up_limit() -> int:
    return get_settings().DEFAULT_CATCH_UP_LIMIT


def db_now(using: str | None = None) -> datetime:
    """The database's clock (``statement_timestamp()``): the one time authority."""
    alias = using or get_settings().DATABASE_ALIAS
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        value: datetime = cursor.fetchone()[0]
    return value


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    def active(self) -> ScheduleQuerySet:
        return self.filter(status=ScheduleStatus.ACTIVE)

    # The audit trail names the ORM as the actor of changes no one else claimed.

    def update(self, **kwargs: Any) -> int:
        with transaction.atomic(using=self.db, savepoint=False), orm_unless_named(self.db):
            return super().update(**kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        with transaction.atomic(using=self.db, savepoint=False), orm_unless_named(self.db):
            return super().delete()

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Schedule]:
        """``bulk_create()``, refusing out-of-bounds values first (:mod:`.bounds`)."""
        objs = list(objs)
        for obj in objs:
            obj.check_bounds()
        with bounds.refused_as_validation_error():
            return super().bulk_create(objs, *args, **kwargs)


class Schedule(models.Model):
    """A cron or interval schedule that fires a registered job."""

    name = models.CharField(
        max_length=200,
        help_text="Unique within its tenant (constraint pgsched_schedule_tenant_name).",
    )
    job = models.CharField(max_length=200, help_text="Name of a registered @job.")
    kwargs = fields.PayloadField(
        default=dict, db_default={}, blank=True, help_text="Keyword arguments (JSON object)."
    )
    cron = models.CharField(
        max_length=timetable.MAX_CRON_LENGTH,
        null=True,
        blank=True,
        help_text="5 fields (min hour dom month dow) or 6 with seconds first, read in the zone.",
    )
    interval = fields.IntervalField(
        null=True, blank=True, help_text="Fire every this many whole seconds (instead of cron)."
    )
    anchor = fields.TimeField(
        null=True,
        blank=True,
        help_text="Interval schedules fire at anchor + k x interval. Default: creation time.",
    )
    timezone = models.CharField(
        max_length=zones.MAX_ZONE_LENGTH,
        default=zones.DEFAULT_ZONE,
        db_default=zones.DEFAULT_ZONE,
        help_text="IANA time zone the cron fields are read in (Europe/Berlin). Cron only.",
    )
    dst_gap = models.CharField(
        max_length=8,
        choices=DstGap.choices,
        default=zoned.DST_GAP_DEFAULT,
        db_default=zoned.DST_GAP_DEFAULT,
        verbose_name="DST gap",
        help_text="A wall-clock time the clocks skip (spring forward).",
    )
    dst_fold = models.CharField(
        max_length=8,
        choices=DstFold.choices,
        default=zoned.DST_FOLD_DEFAULT,
        db_default=zoned.DST_FOLD_DEFAULT,
        verbose_name="DST fold",
        help_text="A wall-clock time that happens twice (fall back).",
    )
    jitter = fields.IntervalField(
        default=timedelta(0),
        db_default=timedelta(0),
        help_text=(
            "Spread each run over [0, jitter) after its occurrence, the same on every replica; "
            "never past the next occurrence."
        ),
    )
    status = models.CharField(
        max_length=16,
        choices=ScheduleStatus.choices,
        default=ScheduleStatus.ACTIVE,
        db_default=ScheduleStatus.ACTIVE,
    )
    next_fire_at = fields.TimeField(null=True, blank=True)
    last_fire_at = fields.TimeField(null=True, blank=True)
    misfire_policy = models.CharField(
        max_length=16,
        choices=MisfirePolicy.choices,
        default=_default_policy,
        db_default=MisfirePolicy.LATEST,
    )
    catch_up_limit = models.PositiveIntegerField(default=_default_catch_up_limit, db_default=10)
    misfire_grace = fields.IntervalField(
        null=True,
        blank=True,
        help_text="An occurrence later than this is missed. Empty: PGSCHED['MISFIRE_GRACE'].",
    )
    skipped_occurrences = models.BigIntegerField(default=0, db_default=0)
    overlap = models.CharField(
        max_length=16,
        choices=OverlapPolicy.choices,
        default=OverlapPolicy.ALLOW,
        db_default=OverlapPolicy.ALLOW,
        help_text="While an earlier run of this schedule is unfinished: start anyway (allow), "
        "skip the occurrence (skip), or let one wait for it (buffer_one).",
    )
    start_deadline = fields.IntervalField(
        null=True,
        blank=True,
        help_text="A run not started this long after it was due ends 'missed' without running. "
        "Empty: no deadline.",
    )
    max_attempts = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text=f"1 to {MAX_ATTEMPTS}. Empty: the job's default."
    )
    timeout = fields.IntervalField(null=True, blank=True, help_text="Empty: the job's default.")
    queue = models.CharField(
        max_length=100, null=True, blank=True, help_text="Empty: the job's default."
    )
    tenant = models.CharField(
        max_length=TENANT_MAX_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="Whose schedule this is (empty: no tenant). Its runs carry it too.",
    )
    source = models.CharField(
        max_length=16,
        default="database",
        db_default="database",
        editable=False,
        help_text="'settings' for schedules declared in PGSCHED['SCHEDULES'].",
    )
    last_error = models.TextField(blank=True, default="", db_default="", editable=False)
    pause_reason = models.TextField(
        blank=True, default="", db_default="", help_text="Why it is paused (shown to its tenant)."
    )
    created_at = fields.TimeField(db_default=Now(), editable=False)
    updated_at = fields.TimeField(auto_now=True)

    objects: ClassVar[ScheduleQuerySet] = ScheduleQuerySet.as_manager()  # type: ignore[assignment]

    class Meta:
        db_table = "pgsched_schedule"
        ordering = ("name",)
        permissions = (
            ("pause_schedule", "Can pause and resume schedules"),
            ("run_schedule_now", "Can run a schedule now"),
            ("backfill_schedule", "Can backfill schedules"),
        )
        constraints = (
            models.UniqueConstraint(
                fields=("tenant", "name"),
                name="pgsched_schedule_tenant_name",
                violation_error_message="A schedule of this tenant has this name.",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(cron__isnull=False, interval__isnull=True)
                    | models.Q(cron__isnull=True, interval__isnull=False)
                ),
                name="pgsched_schedule_cron_xor_interval",
                violation_error_message="Set exactly one of cron and interval.",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=ScheduleStatus.values),
                name="pgsched_schedule_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(misfire_policy__in=MisfirePolicy.values),
                name="pgsched_schedule_policy_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(overlap__in=OverlapPolicy.values),
                name="pgsched_schedule_overlap_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(start_deadline__isnull=True)
                | models.Q(
                    start_deadline__gte=MIN_START_DEADLINE, start_deadline__lte=MAX_START_DEADLINE
                ),
                name="pgsched_schedule_start_deadline_range",
            ),
            models.CheckConstraint(
                condition=models.Q(catch_up_limit__gte=1, catch_up_limit__lte=MAX_CATCH_UP_LIMIT),
                name="pgsched_schedule_catch_up_limit_range",
            ),
            models.CheckConstraint(
                condition=models.Q(max_attempts__isnull=True)
                | models.Q(max_attempts__gte=1, max_attempts__lte=MAX_ATTEMPTS),
                name="pgsched_schedule_max_attempts_range",
            ),
            models.CheckConstraint(
                condition=models.Q(skipped_occurrences__gte=0),
                name="pgsched_schedule_skipped_non_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(dst_gap__in=DstGap.values),
                name="pgsched_schedule_dst_gap_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(dst_fold__in=DstFold.values),
                name="pgsched_schedule_dst_fold_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(jitter__gte=timedelta(0), jitter__lte=jitters.MAX_JITTER),
                name="pgsched_schedule_jitter_range",
            ),
            # interval schedules are elapsed time: a zone would only mislead
            models.CheckConstraint(
                condition=models.Q(cron__isnull=False) | models.Q(timezone=zones.DEFAULT_ZONE),
                name="pgsched_schedule_zone_needs_cron",
            ),
        )
        indexes = (
            # the list's order and a lookup by name across tenants; the unique
            # (tenant, name) index serves a tenant's own
            models.Index(fields=("name",), name="pgsched_schedule_name_idx"),
        )
        # the due index is an expression index created in the migration:
        # (coalesce(next_fire_at, '-infinity')) WHERE status = 'active'

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a new, resumed or re-timed schedule fires first after the database's now().

        Occurrences while a schedule was paused are not caught up. The same rule
        holds for raw SQL and ``QuerySet.update()``: a trigger clears
        ``next_fire_at`` and the planner recomputes it from the database clock.
        """
        if self.cron == "":
            self.cron = None
        if self.status == ScheduleStatus.BROKEN and self._lattice_changed():
            self.status = ScheduleStatus.ACTIVE  # the definition was fixed
            self.last_error = ""
        self.check_bounds()
        using = kwargs.get("using") or get_settings().DATABASE_ALIAS
        # the audit trail's actor is the ORM, unless one is named
        with (
            bounds.refused_as_validation_error(self),
            transaction.atomic(using=using, savepoint=False),
            orm_unless_named(using),
        ):
            if self.tenant and self._tenant_is_new():
                # counted again under the tenant's lock, held to the commit: concurrent
                # creators take turns (the trigger takes the same lock)
                limits = tenant_limits.limits_for(
                    self.tenant, get_settings().TENANT_DEFAULTS, using=using
                )
                try:
                    quotas.check_count(self.tenant, limits, using=using, schedule_id=self.pk)
                except ValidationError as exc:
                    raise ValidationError({"tenant": exc.messages}) from None
            self._save(using, args, kwargs)
        self._remember()

    def check_bounds(self) -> None:
        """``ValidationError`` for a time, duration or payload the database would refuse."""
        bounds.check(
            self, bounds.SCHEDULE_TIMES, bounds.SCHEDULE_DURATIONS, bounds.SCHEDULE_PAYLOADS
        )

    def delete(self, using: Any = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        alias = using or get_settings().DATABASE_ALIAS
        with transaction.atomic(using=alias, savepoint=False), orm_unless_named(alias):
            return super().delete(using=using, keep_parents=keep_parents)

    def _save(self, using: str, args: Any, kwargs: dict[str, Any]) -> None:
        if self._needs_first_fire() or (self.interval is not None and self.anchor is None):
            now = db_now(using)
            if self.interval is not None and self.anchor is None:
                self.anchor = now.replace(microsecond=0)
            if self.status == ScheduleStatus.ACTIVE or self.next_fire_at is None:
                try:
                    self.next_fire_at = self.get_timetable().next_after(now)
                except timetable.TimetableError:
                    self.next_fire_at = None  # the planner marks the schedule broken
            update_fields = kwargs.get("update_fields")
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "next_fire_at", "anchor"}
        super().save(*args, **kwargs)

    @property
    def kind(self) -> str:
        return "cron" if self.cron else "interval"

    def get_timetable(self) -> timetable.Timetable:
        """The timetable of occurrences; raises ``TimetableError`` for a bad definition."""
        if self.cron:
            return zoned.cron(self.cron, self.timezone, self.dst_gap, self.dst_fold)
        if self.interval is None:
            raise timetable.TimetableError(
                "interval", "missing", "set exactly one of cron and interval"
            )
        if self.anchor is None:
            raise timetable.TimetableError(
                "anchor", "missing", "anchor: required for interval schedules"
            )
        return timetable.interval(self.interval, self.anchor)

    def occurrences(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` occurrences strictly after ``after``, as aware UTC datetimes.

        Computed by the planner's own code (the same timetable, zone and DST
        policies), without jitter: these are the ``scheduled_for`` values the
        planner will give the runs. ``TimetableError`` for a bad definition.
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10_000:
            raise ValueError(f"count must be an integer from 0 to 10000, got {count!r}")
        if not isinstance(after, datetime) or after.utcoffset() is None:
            raise ValueError(f"after must be an aware datetime, got {after!r}")
        return self.get_timetable().following(after, count)

    # -- validation -------------------------------------------------------------

    def clean_fields(self, exclude: Any = None) -> None:
        # a payload Python cannot write back as JSON (an integer of 4,300 digits or more)
        # would make JSONField's own validation raise a bare ValueError
        message = bounds.payload_error("kwargs", self.kwargs)
        if message is None or (exclude is not None and "kwargs" in exclude):
            super().clean_fields(exclude)
            return
        errors = {"kwargs": [message]}
        try:
            super().clean_fields({*(exclude or ()), "kwargs"})
        except ValidationError as exc:
            errors.update(exc.message_dict)
        raise ValidationError(errors)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}

        def add(field: str, exc: ValidationError | timetable.TimetableError) -> None:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            errors.setdefault(field, []).extend(messages)

        try:
            self.check_bounds()
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                errors.setdefault(field, []).extend(messages)

        settings = get_settings()
        spec = None
        try:
            spec = require_job(self.job)
        except ValidationError as exc:
            add("job", exc)
        try:
            self.kwargs = validate_kwargs(
                self.kwargs,
                max_bytes=settings.MAX_PAYLOAD_BYTES,
                max_depth=settings.MAX_PAYLOAD_DEPTH,
            )
            if spec is not None:
                timeout = self.timeout if isinstance(self.timeout, timedelta) else spec.timeout
                self.kwargs = spec.checked_kwargs(
                    self.kwargs,
                    timeout or settings.DEFAULT_TIMEOUT,
                    tenant=self.tenant if isinstance(self.tenant, str) else "",
                )
        except ValidationError as exc:
            add("kwargs", exc)
        if self.cron == "":
            self.cron = None
        if self.cron is not None and self.interval is not None:
            add("cron", ValidationError("cron: set either cron or interval, not both"))
        elif self.cron is None and self.interval is None:
            add("cron", ValidationError("cron: set a cron expression or an interval"))
        elif self.cron is not None:
            try:
                timetable.cron(self.cron)
            except timetable.TimetableError as exc:
                add("cron", exc)
        else:
            try:
                timetable.validate_interval(self.interval)
            except timetable.TimetableError as exc:
                add("interval", exc)
        if self.anchor is not None:
            try:
                timetable.validate_anchor(self.anchor)
            except timetable.TimetableError as exc:
                add("anchor", exc)
        for check in (
            lambda: zones.validate_zone(self.timezone),
            lambda: zoned.validate_policy("dst_gap", self.dst_gap),
            lambda: zoned.validate_policy("dst_fold", self.dst_fold),
            lambda: jitters.validate_jitter(self.jitter),
        ):
            try:
                check()
            except timetable.TimetableError as exc:
                add(exc.field, exc)
        if self.cron is None and self.interval is not None and self.timezone != zones.DEFAULT_ZONE:
            add(
                "timezone",
                ValidationError(
                    f"timezone: interval schedules are elapsed time and ignore zones, got "
                    f"{self.timezone!r}; to fire at a local time use a cron expression "
                    "(e.g. '0 9 * * *') with this timezone"
                ),
            )
        if self.misfire_policy not in MisfirePolicy.values:
            add(
                "misfire_policy",
                ValidationError(
                    f"misfire_policy: {self.misfire_policy!r} is not one of "
                    f"{', '.join(MisfirePolicy.values)}"
                ),
            )
        if (
            not isinstance(self.catch_up_limit, int)
            or isinstance(self.catch_up_limit, bool)
            or not 1 <= self.catch_up_limit <= MAX_CATCH_UP_LIMIT
        ):
            add(
                "catch_up_limit",
                ValidationError(
                    f"catch_up_limit: must be an integer from 1 to {MAX_CATCH_UP_LIMIT}, "
                    f"got {self.catch_up_limit!r}"
                ),
            )
        if self.misfire_grace is not None and (
            not isinstance(self.misfire_grace, timedelta)
            or self.misfire_grace < timedelta(0)
            or self.misfire_grace > MAX_MISFIRE_GRACE
        ):
            add(
                "misfire_grace",
                ValidationError(
                    f"misfire_grace: must be between 0 seconds and {MAX_MISFIRE_GRACE.days} days, "
                    f"got {self.misfire_grace!r}"
                ),
            )
        if self.overlap not in OverlapPolicy.values:
            add(
                "overlap",
                ValidationError(
                    f"overlap: {self.overlap!r} is not one of {', '.join(OverlapPolicy.values)}"
                ),
            )
        if self.start_deadline is not None and (
            not isinstance(self.start_deadline, timedelta)
            or not MIN_START_DEADLINE <= self.start_deadline <= MAX_START_DEADLINE
            or self.start_deadline.microseconds
        ):
            add(
                "start_deadline",
                ValidationError(
                    "start_deadline: must be a whole number of seconds from 1 second to "
                    f"{MAX_START_DEADLINE.days} days, or empty, got {self.start_deadline!r}"
                ),
            )
        try:
            validate_tenant(self.tenant)
        except ValidationError as exc:
            add("tenant", exc)
        for field, validator in (
            ("max_attempts", validate_max_attempts),
            ("timeout", validate_timeout),
            ("queue", validate_queue),
        ):
            value = getattr(self, field)
            if value is not None:
                try:
                    validator(value)
                except ValidationError as exc:
                    add(field, exc)
        if self.status not in ScheduleStatus.values:
            add(
                "status",
                ValidationError(
                    f"status: {self.status!r} is not one of {', '.join(ScheduleStatus.values)}"
                ),
            )
        if not errors and self.tenant:
            self._check_quotas(settings, add)
        if errors:
            raise ValidationError(errors)

    def _check_quotas(self, settings: Settings, add: Any) -> None:
        """The tenant's quotas (ValidationError messages name each quota and its values)."""
        using = self._state.db or settings.DATABASE_ALIAS
        limits = tenant_limits.limits_for(self.tenant, settings.TENANT_DEFAULTS, using=using)
        try:
            quotas.check_job(self.tenant, self.job, limits)
        except ValidationError as exc:
            add("job", exc)
        if limits is not None and limits.min_interval is not None:
            try:
                gap = (
                    self.interval
                    if not self.cron and isinstance(self.interval, timedelta)
                    else quotas.shortest_gap(self.get_timetable(), db_now(using))
                )
                quotas.check_gap(self.tenant, gap, limits)
            except ValidationError as exc:
                add("cron" if self.cron else "interval", exc)
            except timetable.TimetableError:
                pass  # the definition's own error is reported above
        if self._tenant_is_new():
            try:  # counted again, under the lock to the commit, by save()
                quotas.check_count(self.tenant, limits, using=using, schedule_id=self.pk)
            except ValidationError as exc:
                add("tenant", exc)

    def _tenant_is_new(self) -> bool:
        """A schedule new to its tenant: created, or moved from another tenant."""
        loaded: dict[str, Any] | None = getattr(self, "_loaded", None)
        return self.pk is None or loaded is None or loaded.get("tenant") != self.tenant

    # -- persistence ---------------------------------------------------------------

    @classmethod
    def from_db(cls, db: str | None, field_names: Any, values: Any, **kwargs: Any) -> Schedule:
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._remember()
        return instance

    def _remember(self) -> None:
        # __dict__, not getattr: a deferred field must not cost a query here
        self._loaded = {
            f: self.__dict__.get(f) for f in (*LATTICE_FIELDS, "status", "next_fire_at", "tenant")
        }

    def _lattice_changed(self) -> bool:
        loaded: dict[str, Any] | None = getattr(self, "_loaded", None)
        return loaded is not None and any(loaded[f] != self.__dict__.get(f) for f in LATTICE_FIELDS)

    def _needs_first_fire(self) -> bool:
        if self.next_fire_at is None:
            return True
        loaded: dict[str, Any] | None = getattr(self, "_loaded", None)
        if loaded is None or loaded["next_fire_at"] != self.next_fire_at:
            return False  # new with an explicit first fire, or set explicitly
        if self._lattice_changed():
            return True
        return loaded["status"] != ScheduleStatus.ACTIVE and self.status == ScheduleStatus.ACTIVE


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
    # pgsched_run_max_attempts_range bound both (a second CHECK of the same bound costs
    # every statement that writes a run; migration 0026)
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
            # (migrations 0019, 0027) keeps a tenant's key to one run: see docs, "Partitions".
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
            # The guard's scan (engine/guard.py): pending runs that it may have to
            # end, for an overlap policy or a start deadline; the others take none.
            models.Index(
                fields=("fire_after",),
                condition=models.Q(status="pending")
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


class Replica(models.Model):
    """A live scheduler replica, as PostgreSQL sees it (a view over ``pg_stat_activity``).

    Every loop of ``runscheduler`` connects with ``application_name`` =
    ``pgsched <loop> <worker id>``, so the database itself knows which replicas
    are connected: nothing is written to keep this list (no heartbeat rows).
    A replica that lost its connections drops out at once; the runs it still
    holds are in :class:`JobRun` with ``worker`` set, until the reaper frees them.
    """

    worker = models.CharField(max_length=200, primary_key=True)
    loops = models.TextField(help_text="The loops with a session open: planner, executor, ...")
    sessions = models.IntegerField()
    connected_since = fields.TimeField()
    address = models.TextField(null=True, blank=True)

    class Meta:
        managed = False
        db_table = "pgsched_replica"
        ordering = ("worker",)

    def __str__(self) -> str:
        return self.worker


# Models of the capabilities' rooms, imported here so that Django registers them.
from .audit.models import ChangeAction, ScheduleChange  # noqa: E402
from .delivery.models import Breaker, BreakerState  # noqa: E402
from .ledger.models import SkippedRange  # noqa: E402
from .tenants.models import Tenant  # noqa: E402
