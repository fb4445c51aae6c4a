"""The tenant record (table ``pgsched_tenant``): a tenant's quotas and its pause.

A tenant without a row takes ``PGSCHED["TENANT_DEFAULTS"]``
(:mod:`django_pgsched.tenants.limits`). The database enforces a row's
``max_schedules`` and ``allowed_jobs`` for every writer of ``pgsched_schedule``
(trigger ``pgsched_schedule_tenant_quota``, ``migrations/sql/triggers.sql``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.db.models.functions import Now

from .. import fields
from . import MAX_LENGTH


class Tenant(models.Model):
    key = models.CharField(
        max_length=MAX_LENGTH, unique=True, help_text="The tenant string of its schedules and runs."
    )
    paused = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Nothing of a paused tenant is planned or claimed; its occurrences go to "
        "the ledger (tenant_paused).",
    )
    pause_reason = models.TextField(blank=True, default="", db_default="")
    max_schedules = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: no limit.")
    min_interval = fields.IntervalField(
        null=True,
        blank=True,
        help_text="The shortest gap allowed between two occurrences of one schedule. "
        "Empty: no limit.",
    )
    max_running = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs running at once, all replicas together."
    )
    weight = models.PositiveIntegerField(
        default=1, db_default=1, help_text="Its share of claims when tenants contend."
    )
    allowed_jobs = fields.PayloadField(
        null=True,
        blank=True,
        help_text="Job names the tenant may schedule (a list). Empty: "
        "PGSCHED['TENANT_DEFAULTS']['allowed_jobs'].",
    )
    updated_at = fields.TimeField(auto_now=True, db_default=Now())

    class Meta:
        db_table = "pgsched_tenant"
        ordering = ("key",)
        constraints = (
            models.CheckConstraint(condition=models.Q(weight__gte=1), name="pgsched_tenant_weight"),
            models.CheckConstraint(
                condition=models.Q(min_interval__isnull=True)
                | models.Q(min_interval__gt=timedelta(0)),
                name="pgsched_tenant_min_interval_positive",
            ),
            models.CheckConstraint(
                condition=~models.Q(key=""), name="pgsched_tenant_key_not_empty"
            ),
        )
        indexes = (
            # the tenants the claim leaves to others (paused) or to the held claim
            # (max_running): usually none, so the claim's probe reads an empty index
            models.Index(
                fields=("key",),
                condition=models.Q(paused=True) | models.Q(max_running__isnull=False),
                name="pgsched_tenant_held_idx",
            ),
        )

    def __str__(self) -> str:
        return self.key

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        from . import validate_allowed_jobs, validate_tenant

        errors: dict[str, Any] = {}
        try:
            validate_tenant(self.key, "key")
            if self.key == "":
                raise ValidationError("key: the empty tenant (no tenant) has no record")
        except ValidationError as exc:
            errors["key"] = exc.messages
        try:
            validate_allowed_jobs(self.allowed_jobs)
        except ValidationError as exc:
            errors["allowed_jobs"] = exc.messages
        if errors:
            raise ValidationError(errors)
