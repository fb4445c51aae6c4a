"""The idempotency key's check across months reads the key's index, whatever the statistics say.

``pgsched_run_key_unique()`` (migration 0019) looks for the key of each one-off run
written in the other months. PL/pgSQL keeps that query's plan for the session; where
a month's statistics said it was empty (a month made ahead that a database-wide ANALYZE
or ``vacuumdb`` reached before its first run, or a table after a TRUNCATE), PostgreSQL
planned a sequential scan of it, and one transaction writing many one-off runs into it
read the month again for each row: 40,000 runs in one statement took 67 s, against 3.0 s
with this setting (``python -m bench.key_check``; ``enqueue()`` in a loop inside
``transaction.atomic()``, a django.tasks bulk enqueue, an import).
The function now runs with ``enable_seqscan = off``: the check reads the index of
``pgsched_run_idempotency_key`` in each month, as it does once the statistics know
better (no slower then: 50,000 runs in 3.3 s with it, 4.9 s without).
"""

from __future__ import annotations

from django.db import migrations

FORWARD = "ALTER FUNCTION pgsched_run_key_unique() SET enable_seqscan = off;"
REVERSE = "ALTER FUNCTION pgsched_run_key_unique() RESET enable_seqscan;"


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0023_run_horizon_readable"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, REVERSE),
    ]
