"""The history API's index: one tenant's runs by (scheduled_for, id), built concurrently.

Outside a transaction (``atomic = False``): ``CREATE INDEX CONCURRENTLY`` lets
the planner and executors keep writing runs while it scans the table. Partial:
runs without a tenant (``tenant = ''``) take no entry, so an installation that
does not use tenants pays nothing on its inserts.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgsched", "0013_overlap_deadline_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("tenant", ""), _negated=True),
                fields=["tenant", "scheduled_for", "id"],
                name="pgsched_run_tenant_idx",
            ),
        ),
    ]
