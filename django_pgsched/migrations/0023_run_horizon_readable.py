"""Every role may read the live months' horizon, so the executor reads it in its own statement.

Migration 0022 gave ``pgsched_run_horizon_since()`` ``SECURITY DEFINER`` so that a
role granted only the tables of docs/how-to/database.md could read the horizon.
Such a function cannot be inlined: PostgreSQL planned its body again, and switched
the role and search path, at every ``executor_pass`` (5 % of the executor
backend's CPU at concurrency 8, ``python -m bench.passes --perf``). The horizon is
one timestamp (where the months that may hold an unfinished run start), so every
role may now read its table, and ``executor_pass`` reads it with a subquery that
is planned once per session. Writing it is still only for the ``SECURITY DEFINER``
functions (the trigger's and the upkeep's); the function stays for other callers.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = "GRANT SELECT ON pgsched_run_horizon TO PUBLIC;"
REVERSE = "REVOKE SELECT ON pgsched_run_horizon FROM PUBLIC;"


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0022_run_horizon_roles"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, REVERSE),
    ]
