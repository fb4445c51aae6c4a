"""The ledger of occurrences that did not run: ``pgsched_skipped_range``.

Besides the table: its foreign key (``ON DELETE CASCADE``: the ranges go with
their schedule) and whole-second CHECK; and on ``pgsched_schedule`` the two
columns that carry a stopped schedule's unplanned occurrences to the planner.
When a paused or broken schedule becomes active again, a trigger keeps where
it stopped (``unplanned_from``: its ``next_fire_at`` then) and why
(``unplanned_reason``: the status it had); the planner's next pass records
the occurrences from there to its first new one as a ``paused`` or ``broken``
range and clears both, in the statement that advances the schedule. They are
runtime columns (``pgsched_schedule_runtime_columns()``): not audited.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


LEDGER = r"""
ALTER TABLE pgsched_skipped_range
    ADD CONSTRAINT pgsched_skipped_range_schedule_fk FOREIGN KEY (schedule_id)
        REFERENCES pgsched_schedule (id) ON DELETE CASCADE DEFERRABLE INITIALLY IMMEDIATE,
    ADD CONSTRAINT pgsched_skipped_whole_seconds
        CHECK (date_trunc('second', first) = first AND date_trunc('second', last) = last);

ALTER TABLE pgsched_schedule
    ADD COLUMN unplanned_from timestamptz,
    ADD COLUMN unplanned_reason text,
    ADD CONSTRAINT pgsched_schedule_unplanned_reason
        CHECK (unplanned_reason IN ('paused', 'broken')
               AND unplanned_from IS NOT NULL
               OR unplanned_reason IS NULL AND unplanned_from IS NULL);

-- A stopped schedule becomes active again: keep where it stopped, and why, for
-- the planner (the first stop wins until the planner has recorded it).
CREATE FUNCTION pgsched_schedule_unplanned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.unplanned_from IS NULL AND OLD.next_fire_at IS NOT NULL THEN
        NEW.unplanned_from := OLD.next_fire_at;
        NEW.unplanned_reason := OLD.status;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pgsched_schedule_unplanned BEFORE UPDATE ON pgsched_schedule
    FOR EACH ROW WHEN (OLD.status <> 'active' AND NEW.status = 'active')
    EXECUTE FUNCTION pgsched_schedule_unplanned();
"""
LEDGER_REVERSE = """
DROP TRIGGER pgsched_schedule_unplanned ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_unplanned();
ALTER TABLE pgsched_schedule DROP CONSTRAINT pgsched_schedule_unplanned_reason,
    DROP COLUMN unplanned_reason, DROP COLUMN unplanned_from;
ALTER TABLE pgsched_skipped_range DROP CONSTRAINT pgsched_skipped_whole_seconds,
    DROP CONSTRAINT pgsched_skipped_range_schedule_fk;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0009_tasks"),
    ]

    operations = [
        migrations.CreateModel(
            name="SkippedRange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("first", models.DateTimeField(help_text="The first occurrence of the range.")),
                (
                    "last",
                    models.DateTimeField(help_text="The last occurrence of the range (inclusive)."),
                ),
                (
                    "count",
                    models.BigIntegerField(
                        help_text="Occurrences of the timetable in [first, last]."
                    ),
                ),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("misfire_skip", "missed: later than the grace, policy skip"),
                            ("misfire_latest", "missed: policy latest ran only the most recent"),
                            ("catch_up_limit", "missed: beyond the catch-up limit"),
                            ("dst_gap", "its local time did not exist (the clocks went forward)"),
                            ("paused", "the schedule was paused"),
                            ("broken", "the schedule was broken"),
                            ("overlap", "the previous run had not finished (overlap policy)"),
                            ("deadline", "not started by its start deadline (the run is missed)"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "recorded_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), editable=False
                    ),
                ),
                (
                    "schedule",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="skipped_ranges",
                        to="pgsched.schedule",
                    ),
                ),
            ],
            options={
                "verbose_name": "skipped range",
                "db_table": "pgsched_skipped_range",
                "ordering": ("schedule_id", "first"),
                "indexes": [
                    models.Index(fields=["schedule", "last"], name="pgsched_skipped_schedule_idx"),
                    models.Index(fields=["last"], name="pgsched_skipped_last_idx"),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "reason__in",
                                [
                                    "misfire_skip",
                                    "misfire_latest",
                                    "catch_up_limit",
                                    "dst_gap",
                                    "paused",
                                    "broken",
                                    "overlap",
                                    "deadline",
                                ],
                            )
                        ),
                        name="pgsched_skipped_reason_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("count__gte", 1)), name="pgsched_skipped_count_positive"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("first__lte", models.F("last"))),
                        name="pgsched_skipped_ordered",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("count", 1), ("first", models.F("last"))),
                            models.Q(("count__gt", 1), ("first__lt", models.F("last"))),
                            _connector="OR",
                        ),
                        name="pgsched_skipped_one_iff_single",
                    ),
                ],
            },
        ),
        migrations.RunSQL(LEDGER, LEDGER_REVERSE),
    ]
