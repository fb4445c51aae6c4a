"""The executor's claim order: priority first (django.tasks' priority), then due time.

``pgsched_run_claim_order_idx`` is ``((priority * -1), fire_after, id) WHERE
status IN ('pending', 'retrying')``: one ascending key, so the claim reads it in
order, stops after the runs it locks, and starts from its cursor with a row
comparison. ``pgsched_run_claimable_idx`` ``(fire_after, id)`` stays: it answers
"when does the next claimable run fall due" and the admin's pending runs.

Built CONCURRENTLY (``atomic = False``), so a deployment with a long run
history keeps inserting and claiming while it builds.
"""

import django.db.models.expressions
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgsched", "0010_skipped_range"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                django.db.models.expressions.CombinedExpression(
                    models.F("priority"), "*", models.Value(-1)
                ),
                models.F("fire_after"),
                models.F("id"),
                condition=models.Q(("status__in", ("pending", "retrying"))),
                name="pgsched_run_claim_order_idx",
            ),
        ),
    ]
