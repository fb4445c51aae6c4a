"""Indexes behind the admin's run list: its order alone and behind each filter.

Few on purpose: a run's status changes are not HOT updates (status is in
partial-index predicates), so every index here takes a new entry at each
claim and completion. Filters by a schedule read its occurrences from the unique
(schedule_id, scheduled_for) index of 0001 and only its one-off runs from here;
the queue index leaves out the dense "default" queue.

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
                condition=models.Q(("queue", "default"), _negated=True),
                fields=["queue", "scheduled_for", "id"],
                name="pgsched_run_by_queue_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("schedule__isnull", True)),
                fields=["schedule_name", "scheduled_for", "id"],
                name="pgsched_run_one_off_idx",
            ),
        ),
    ]
