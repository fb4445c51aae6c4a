"""Schedules: what runs, when (a cron or an interval), and how it is planned."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models.functions import Now

from .. import bounds, fields, validation
from ..audit.actor import orm_unless_named
from ..conf import Settings, get_settings
from ..limits import (
    MAX_ATTEMPTS,
    MAX_CATCH_UP_LIMIT,
    MAX_MISFIRE_GRACE,
    MAX_START_DEADLINE,
    MIN_START_DEADLINE,
)
from ..registry import require_job
from ..statuses import (
    DstFold,
    DstGap,
    MisfirePolicy,
    OverlapPolicy,
    ScheduleStatus,
)
from ..tenants import MAX_LENGTH as TENANT_MAX_LENGTH
from ..tenants import limits as tenant_limits
from ..tenants import quotas
from ..timing import jitter as jitters
from ..timing import timetable, zoned, zones
from .clock import db_now

# the columns that define a schedule's timetable of occurrences
GRID_FIELDS = ("cron", "interval", "anchor", "timezone", "dst_gap", "dst_fold")
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
        if self.status == ScheduleStatus.BROKEN and self._grid_changed():
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
        problems = validation.Problems()
        try:
            self.check_bounds()
        except ValidationError as exc:
            problems.add_all(exc)

        settings = get_settings()
        spec = problems.check("job", require_job, self.job)
        self.kwargs = validation.job_kwargs(
            problems, spec, self.kwargs, timeout=self.timeout, tenant=self.tenant, settings=settings
        )
        if self.cron == "":
            self.cron = None
        if self.cron is not None and self.interval is not None:
            problems.add("cron", "cron: set either cron or interval, not both")
        elif self.cron is None and self.interval is None:
            problems.add("cron", "cron: set a cron expression or an interval")
        elif self.cron is not None:
            problems.check("cron", timetable.cron, self.cron)
        else:
            problems.check("interval", timetable.validate_interval, self.interval)
        if self.anchor is not None:
            problems.check("anchor", timetable.validate_anchor, self.anchor)
        for field, check in (
            ("timezone", lambda: zones.validate_zone(self.timezone)),
            ("dst_gap", lambda: zoned.validate_policy("dst_gap", self.dst_gap)),
            ("dst_fold", lambda: zoned.validate_policy("dst_fold", self.dst_fold)),
            ("jitter", lambda: jitters.validate_jitter(self.jitter)),
        ):
            problems.check(field, check)
        if self.cron is None and self.interval is not None and self.timezone != zones.DEFAULT_ZONE:
            problems.add(
                "timezone",
                f"timezone: interval schedules are elapsed time and ignore zones, got "
                f"{self.timezone!r}; to fire at a local time use a cron expression "
                "(e.g. '0 9 * * *') with this timezone",
            )
        validation.choice(problems, "misfire_policy", self.misfire_policy, MisfirePolicy.values)
        if (
            not isinstance(self.catch_up_limit, int)
            or isinstance(self.catch_up_limit, bool)
            or not 1 <= self.catch_up_limit <= MAX_CATCH_UP_LIMIT
        ):
            problems.add(
                "catch_up_limit",
                f"catch_up_limit: must be an integer from 1 to {MAX_CATCH_UP_LIMIT}, "
                f"got {self.catch_up_limit!r}",
            )
        if self.misfire_grace is not None and (
            not isinstance(self.misfire_grace, timedelta)
            or self.misfire_grace < timedelta(0)
            or self.misfire_grace > MAX_MISFIRE_GRACE
        ):
            problems.add(
                "misfire_grace",
                f"misfire_grace: must be between 0 seconds and {MAX_MISFIRE_GRACE.days} days, "
                f"got {self.misfire_grace!r}",
            )
        validation.choice(problems, "overlap", self.overlap, OverlapPolicy.values)
        if self.start_deadline is not None and (
            not isinstance(self.start_deadline, timedelta)
            or not MIN_START_DEADLINE <= self.start_deadline <= MAX_START_DEADLINE
            or self.start_deadline.microseconds
        ):
            problems.add(
                "start_deadline",
                "start_deadline: must be a whole number of seconds from 1 second to "
                f"{MAX_START_DEADLINE.days} days, or empty, got {self.start_deadline!r}",
            )
        validation.tenant(problems, self.tenant)
        validation.run_options(
            problems,
            {"max_attempts": self.max_attempts, "timeout": self.timeout, "queue": self.queue},
        )
        validation.choice(problems, "status", self.status, ScheduleStatus.values)
        if not problems and self.tenant:
            self._check_quotas(settings, problems.add)
        problems.raise_any()

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
            f: self.__dict__.get(f) for f in (*GRID_FIELDS, "status", "next_fire_at", "tenant")
        }

    def _grid_changed(self) -> bool:
        loaded: dict[str, Any] | None = getattr(self, "_loaded", None)
        return loaded is not None and any(loaded[f] != self.__dict__.get(f) for f in GRID_FIELDS)

    def _needs_first_fire(self) -> bool:
        if self.next_fire_at is None:
            return True
        loaded: dict[str, Any] | None = getattr(self, "_loaded", None)
        if loaded is None or loaded["next_fire_at"] != self.next_fire_at:
            return False  # new with an explicit first fire, or set explicitly
        if self._grid_changed():
            return True
        return loaded["status"] != ScheduleStatus.ACTIVE and self.status == ScheduleStatus.ACTIVE
