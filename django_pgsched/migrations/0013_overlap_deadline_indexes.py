"""The overlap and deadline indexes, built concurrently, and the run CHECKs of 0012 validated.

Outside a transaction (``atomic = False``): ``CREATE INDEX CONCURRENTLY`` and
``VALIDATE CONSTRAINT`` let the planner and executors keep writing runs while
they scan the table. Both indexes are partial: only runs of schedules with an
overlap policy, or pending runs with a policy or a start deadline, take an
entry, so the runs of every other schedule cost nothing more.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

VALIDATE = """
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_status_valid;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_terminal_has_finished_at;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_overlap_valid;
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgsched", "0012_overlap_deadline_backfill"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("overlap__isnull", False)),
                fields=["schedule", "finished_at"],
                name="pgsched_run_exclusive_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(
                    ("status", "pending"),
                    models.Q(
                        ("overlap__isnull", False), ("start_by__isnull", False), _connector="OR"
                    ),
                ),
                fields=["fire_after"],
                name="pgsched_run_guarded_idx",
            ),
        ),
        migrations.RunSQL(VALIDATE, migrations.RunSQL.noop),
    ]
