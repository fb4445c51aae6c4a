"""The ledger of occurrences that did not run: compact ranges with a reason.

Every occurrence of a schedule's timetable ends up as exactly one of: a run
(a row of ``pgsched_job_run``), or a point of a :class:`SkippedRange`. A range
is *pure*: every occurrence of the schedule's timetable from ``first`` to
``last`` (inclusive) did not run, for the one ``reason``, and ``count`` is
their number, so a day of a per-second schedule missed in an outage is one
row, not 86,400. Ranges of one schedule never overlap.

The one exception to "a run or a range" is a run that missed its start
deadline: it stays a run (status ``missed``) *and* its occurrence is in a
``deadline`` range, so the ledger alone answers "what did not run, and why".

Writers, each in the transaction that makes the decision:

* the planner (``misfire_skip``, ``misfire_latest``, ``catch_up_limit``,
  ``dst_gap``; ``paused`` and ``broken`` when a stopped schedule is active
  again), in the statement that advances ``next_fire_at``;
* the guard (``overlap``, ``deadline``), in the statement that deletes the
  overlapped run or marks the late one ``missed``;
* backfill takes occurrences out of ranges when it creates their runs.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from .. import fields
from ..statuses import SkipReason


class SkippedRange(models.Model):
    """Occurrences ``first`` .. ``last`` of ``schedule`` that did not run, for ``reason``."""

    schedule = models.ForeignKey(
        "pgsched.Schedule",
        on_delete=models.DO_NOTHING,  # ON DELETE CASCADE in the database (migration)
        db_constraint=False,
        db_index=False,  # (schedule_id, last) serves lookups
        related_name="skipped_ranges",
    )
    first = fields.TimeField(help_text="The first occurrence of the range.")
    last = fields.TimeField(help_text="The last occurrence of the range (inclusive).")
    count = models.BigIntegerField(help_text="Occurrences of the timetable in [first, last].")
    reason = models.CharField(max_length=16, choices=SkipReason.choices)
    recorded_at = fields.TimeField(db_default=Now(), editable=False)

    class Meta:
        app_label = "pgsched"
        db_table = "pgsched_skipped_range"
        verbose_name = "skipped range"
        ordering = ("schedule_id", "first")
        indexes = (
            models.Index(fields=("schedule", "last"), name="pgsched_skipped_schedule_idx"),
            models.Index(fields=("last",), name="pgsched_skipped_last_idx"),
        )
        constraints = (
            models.CheckConstraint(
                condition=models.Q(reason__in=SkipReason.values),
                name="pgsched_skipped_reason_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(count__gte=1), name="pgsched_skipped_count_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(first__lte=models.F("last")),
                name="pgsched_skipped_ordered",
            ),
            models.CheckConstraint(
                condition=models.Q(count=1, first=models.F("last"))
                | (models.Q(count__gt=1) & models.Q(first__lt=models.F("last"))),
                name="pgsched_skipped_one_iff_single",
            ),
        )

    def __str__(self) -> str:
        if self.count == 1:
            return f"{self.schedule_id} @ {self.first:%Y-%m-%d %H:%M:%S}: {self.reason}"
        return (
            f"{self.schedule_id} {self.first:%Y-%m-%d %H:%M:%S} .. {self.last:%Y-%m-%d %H:%M:%S}"
            f" ({self.count}): {self.reason}"
        )
