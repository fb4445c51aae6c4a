"""The circuit breaker's state: one row per destination (and tenant), in the database.

Every replica reads and writes the same rows, so they agree about a
destination without a leader. See :mod:`django_pgsched.delivery.breaker` for
the transitions; the admin shows these rows and resets them.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from .. import fields


class BreakerState(models.TextChoices):
    CLOSED = "closed", "closed (deliveries go through)"
    OPEN = "open", "open (deliveries held back)"
    HALF_OPEN = "half_open", "half-open (one probe in flight)"


class Breaker(models.Model):
    """A circuit breaker for one destination: ``scheme://host:port`` of a ``pgsched.http`` URL."""

    tenant = models.CharField(max_length=200, blank=True, default="", db_default="")
    destination = models.CharField(max_length=300)
    state = models.CharField(
        max_length=16,
        choices=BreakerState.choices,
        default=BreakerState.CLOSED,
        db_default=BreakerState.CLOSED,
    )
    failures = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Failed deliveries in a row."
    )
    since = fields.TimeField(db_default=Now(), help_text="When the state last changed.")
    retry_at = fields.TimeField(
        null=True,
        blank=True,
        help_text="Open: when a probe may go. Half-open: when a silent probe is given up.",
    )
    cooldown = fields.IntervalField(null=True, blank=True, help_text="The current cool-down.")
    probe_run_id = models.BigIntegerField(null=True, blank=True)
    park_until = fields.TimeField(
        null=True, blank=True, help_text="Runs held back by this breaker wait until then at most."
    )
    opened_at = fields.TimeField(
        null=True, blank=True, help_text="When it last opened (closed -> open)."
    )
    opened = models.PositiveIntegerField(default=0, db_default=0, help_text="Times it opened.")
    last_error = models.TextField(blank=True, default="", db_default="")
    last_failure_at = fields.TimeField(null=True, blank=True)
    last_success_at = fields.TimeField(null=True, blank=True)

    class Meta:
        app_label = "pgsched"
        db_table = "pgsched_breaker"
        verbose_name = "circuit breaker"
        ordering = ("tenant", "destination")
        permissions = (("reset_breaker", "Can reset circuit breakers"),)
        constraints = (
            models.UniqueConstraint(
                fields=("tenant", "destination"), name="pgsched_breaker_destination"
            ),
            models.CheckConstraint(
                condition=models.Q(state__in=BreakerState.values),
                name="pgsched_breaker_state_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(state="closed") | models.Q(retry_at__isnull=False),
                name="pgsched_breaker_open_has_retry_at",
            ),
        )

    def __str__(self) -> str:
        who = f"{self.tenant}: " if self.tenant else ""
        return f"{who}{self.destination} ({self.state})"
