"""Indexes behind the admin's run list: its order alone and behind each filter.

Built CONCURRENTLY (so ``atomic = False``): on a deployment that already has
millions of runs, a plain CREATE INDEX would block every insert and update of
``pgsched_job_run`` (every planner and executor write) while it builds.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgsched", "0002_database_guards"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(fields=["scheduled_for", "id"], name="pgsched_run_recent_idx"),
        ),
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("status__in", ("failed", "cancelled"))),
                fields=["scheduled_for", "id"],
                name="pgsched_run_unsuccessful_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                fields=["queue", "scheduled_for", "id"], name="pgsched_run_by_queue_idx"
            ),
        ),
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                fields=["schedule_name", "scheduled_for", "id"],
                name="pgsched_run_by_schedule_idx",
            ),
        ),
    ]
