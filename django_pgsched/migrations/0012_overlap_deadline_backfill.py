"""Overlap policy, start deadline and backfill: their columns and constraints.

``pgsched_schedule``: ``overlap`` (allow, skip, buffer_one) and
``start_deadline``. ``pgsched_job_run``: ``is_backfill``, ``overlap`` (the
schedule's policy when the run was created; NULL for allow) and ``start_by``
(its start deadline), and the status ``missed``.

The run table can be large and is written all the time, so its constraints
change without a long lock: the status and terminal CHECKs are replaced, and
the overlap CHECK added, as ``NOT VALID`` here (instant: only new rows are
checked); migration 0013 validates them, and builds the two partial indexes
concurrently, outside a transaction. The new columns have constant defaults
(no table rewrite).
"""

import datetime

from django.db import migrations, models

RUN_CONSTRAINTS = r"""
ALTER TABLE pgsched_job_run
    DROP CONSTRAINT pgsched_run_status_valid,
    ADD CONSTRAINT pgsched_run_status_valid CHECK (status IN
        ('pending', 'running', 'retrying', 'succeeded', 'failed', 'cancelled', 'missed')) NOT VALID,
    DROP CONSTRAINT pgsched_run_terminal_has_finished_at,
    ADD CONSTRAINT pgsched_run_terminal_has_finished_at CHECK (
        status NOT IN ('succeeded', 'failed', 'cancelled', 'missed') OR finished_at IS NOT NULL
    ) NOT VALID,
    ADD CONSTRAINT pgsched_run_overlap_valid
        CHECK (overlap IS NULL OR overlap IN ('skip', 'buffer_one')) NOT VALID;
"""
RUN_CONSTRAINTS_REVERSE = r"""
ALTER TABLE pgsched_job_run
    DROP CONSTRAINT pgsched_run_overlap_valid,
    DROP CONSTRAINT pgsched_run_terminal_has_finished_at,
    ADD CONSTRAINT pgsched_run_terminal_has_finished_at CHECK (
        status NOT IN ('succeeded', 'failed', 'cancelled') OR finished_at IS NOT NULL),
    DROP CONSTRAINT pgsched_run_status_valid,
    ADD CONSTRAINT pgsched_run_status_valid CHECK (status IN
        ('pending', 'running', 'retrying', 'succeeded', 'failed', 'cancelled'));
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0011_claim_order"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="schedule",
            options={
                "ordering": ("name",),
                "permissions": (
                    ("pause_schedule", "Can pause and resume schedules"),
                    ("run_schedule_now", "Can run a schedule now"),
                    ("backfill_schedule", "Can backfill schedules"),
                ),
            },
        ),
        migrations.AddField(
            model_name="jobrun",
            name="is_backfill",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Created by a backfill, not by the planner.",
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="overlap",
            field=models.CharField(
                blank=True,
                choices=[
                    ("allow", "allow: runs may overlap"),
                    ("skip", "skip: not started while the previous run is unfinished"),
                    ("buffer_one", "buffer one: at most one waits for the previous run"),
                ],
                help_text="Its schedule's overlap policy when it was created; empty: allow.",
                max_length=16,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="start_by",
            field=models.DateTimeField(
                blank=True,
                help_text="Its start deadline: not started by then, it ends 'missed' without running.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="overlap",
            field=models.CharField(
                choices=[
                    ("allow", "allow: runs may overlap"),
                    ("skip", "skip: not started while the previous run is unfinished"),
                    ("buffer_one", "buffer one: at most one waits for the previous run"),
                ],
                db_default="allow",
                default="allow",
                help_text="While an earlier run of this schedule is unfinished: start anyway (allow), skip the occurrence (skip), or let one wait for it (buffer_one).",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="start_deadline",
            field=models.DurationField(
                blank=True,
                help_text="A run not started this long after it was due ends 'missed' without running. Empty: no deadline.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="status",
            field=models.CharField(
                choices=[
                    ("pending", "pending"),
                    ("running", "running"),
                    ("retrying", "retrying"),
                    ("succeeded", "succeeded"),
                    ("failed", "failed"),
                    ("cancelled", "cancelled"),
                    ("missed", "missed (not started by its start deadline)"),
                ],
                db_default="pending",
                default="pending",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.CheckConstraint(
                condition=models.Q(("overlap__in", ["allow", "skip", "buffer_one"])),
                name="pgsched_schedule_overlap_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="schedule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("start_deadline__isnull", True),
                    models.Q(
                        ("start_deadline__gte", datetime.timedelta(seconds=1)),
                        ("start_deadline__lte", datetime.timedelta(days=366)),
                    ),
                    _connector="OR",
                ),
                name="pgsched_schedule_start_deadline_range",
            ),
        ),
        # the audit trigger watches the schedule's new columns too
        migrations.RunSQL(
            "SELECT pgsched_schedule_audit_install();", "SELECT pgsched_schedule_audit_install();"
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(RUN_CONSTRAINTS, RUN_CONSTRAINTS_REVERSE)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="jobrun",
                    name="pgsched_run_status_valid",
                ),
                migrations.RemoveConstraint(
                    model_name="jobrun",
                    name="pgsched_run_terminal_has_finished_at",
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "running",
                                    "retrying",
                                    "succeeded",
                                    "failed",
                                    "cancelled",
                                    "missed",
                                ],
                            )
                        ),
                        name="pgsched_run_status_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("overlap__isnull", True),
                            ("overlap__in", ("skip", "buffer_one")),
                            _connector="OR",
                        ),
                        name="pgsched_run_overlap_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("status__in", ("succeeded", "failed", "cancelled", "missed")),
                                _negated=True,
                            ),
                            ("finished_at__isnull", False),
                            _connector="OR",
                        ),
                        name="pgsched_run_terminal_has_finished_at",
                    ),
                ),
            ],
        ),
    ]
