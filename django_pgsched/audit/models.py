"""The audit trail of schedule changes: one row per change, written by a trigger.

The statement-level triggers on ``pgsched_schedule``
(``pgsched_schedule_after_insert``, ``_after_update``, ``_after_delete``, in
``migrations/sql/triggers.sql``) record every inserted, updated and deleted row,
set-based, whoever made it: the admin, the ORM, the settings sync, or plain SQL.
``changes`` maps each changed field to ``[before, after]`` (JSON values:
durations as PostgreSQL's interval text, times as ISO 8601). The columns the
planner writes as it advances a schedule (``next_fire_at``, ``last_fire_at``,
``skipped_occurrences`` and the like) are not changes: the planner's own updates
match no row and record nothing.

``actor`` is the session setting ``pgsched.actor`` at the time of the change
(see :func:`django_pgsched.audit.actor`), or ``"sql"`` when nothing set it.
Rows outlive the schedule they describe (``schedule_id`` is a plain number,
not a foreign key) and are deleted by retention like runs.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.functions import Now

from .. import fields


class ChangeAction(models.TextChoices):
    CREATED = "created", "created"
    CHANGED = "changed", "changed"
    DELETED = "deleted", "deleted"


class ScheduleChange(models.Model):
    """One change of one schedule: who, when, and the before and after of each field."""

    schedule_id = models.BigIntegerField(
        null=True, db_index=False, help_text="The schedule's id (kept after it is deleted)."
    )
    schedule_name = models.CharField(max_length=200)
    action = models.CharField(max_length=16, choices=ChangeAction.choices)
    actor = models.TextField(
        help_text="user:<username>, 'settings sync', 'orm', a scheduler loop, or 'sql'."
    )
    changes = fields.PayloadField(default=dict, help_text="{field: [before, after]}")
    at = fields.TimeField(db_default=Now())
    db_user = models.TextField(blank=True, default="", db_default="")
    application = models.TextField(
        blank=True, default="", db_default="", help_text="The session's application_name."
    )

    class Meta:
        app_label = "pgsched"
        db_table = "pgsched_schedule_change"
        verbose_name = "schedule change"
        ordering = ("-at", "-id")
        indexes = (
            models.Index(fields=("schedule_id", "at", "id"), name="pgsched_change_schedule_idx"),
            models.Index(fields=("at", "id"), name="pgsched_change_at_idx"),
        )
        constraints = (
            models.CheckConstraint(
                condition=models.Q(action__in=ChangeAction.values),
                name="pgsched_change_action_valid",
            ),
        )

    def __str__(self) -> str:
        return f"{self.schedule_name} {self.summary} by {self.actor}"

    @property
    def summary(self) -> str:
        """'paused', 'resumed', 'created', 'deleted' or 'changed cron, queue'."""
        if self.action != ChangeAction.CHANGED:
            return str(self.action)
        fields = sorted(self.changes)
        status = self.changes.get("status")
        if status and set(fields) <= {"status", "last_error"}:
            before, after = status
            if after == "paused":
                return "paused"
            if after == "active":
                return "resumed" if before == "paused" else f"reactivated (was {before})"
            return f"became {after}"
        return "changed " + ", ".join(fields)

    def pairs(self) -> list[tuple[str, Any, Any]]:
        """(field, before, after) for each changed field, by field name."""
        return [(field, *values) for field, values in sorted(self.changes.items())]
