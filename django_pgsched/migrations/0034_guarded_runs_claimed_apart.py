"""The guarded index in the claim's order, retrying runs included: the claim of runs with
an overlap policy or a start deadline reads it.

``executor_pass`` no longer claims a run with an overlap policy or a start deadline
(its rules were subqueries the claim planned and started for every run);
``executor_guarded_pick`` picks such runs when their rules let them start, in the
claim's order (``-priority, fire_after, id``, as ``pgsched_run_claim_order_idx``),
and stops after its limit. The index is made on the partitioned table alone, then on
each month under the month's name for it (``<index>_pYYYYMM``, as migration 0019
names them) and attached.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

INDEX = "pgsched_run_guarded_idx"

MONTHS = """
SELECT n.nspname, c.relname
  FROM pg_inherits h
  JOIN pg_class c ON c.oid = h.inhrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE h.inhparent = 'pgsched_job_run'::regclass
 ORDER BY c.relname
"""


def _remake(statuses: str, columns: str) -> Any:
    where = f"status IN ({statuses}) AND (overlap IS NOT NULL OR start_by IS NOT NULL)"

    def run(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"DROP INDEX IF EXISTS {INDEX}")
            cursor.execute(f"CREATE INDEX {INDEX} ON ONLY pgsched_job_run ({columns}) WHERE {where}")
            cursor.execute(MONTHS)
            for schema, table in cursor.fetchall():
                month = table.rsplit("_p", 1)[1]
                cursor.execute(
                    "SELECT format('CREATE INDEX %%I ON %%I.%%I (' || %s || ') WHERE ' || %s, "
                    "%s, %s, %s), format('ALTER INDEX %%I ATTACH PARTITION %%I.%%I', %s, %s, %s)",
                    [columns, where, f"{INDEX}_p{month}", schema, table, INDEX, schema, f"{INDEX}_p{month}"],
                )
                create, attach = cursor.fetchone()
                cursor.execute(create)
                cursor.execute(attach)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0033_value_checks_as_domains"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="jobrun", name=INDEX),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        models.F("priority") * -1,
                        models.F("fire_after"),
                        models.F("id"),
                        condition=models.Q(("status__in", ["pending", "retrying"]))
                        & models.Q(
                            ("overlap__isnull", False), ("start_by__isnull", False), _connector="OR"
                        ),
                        name=INDEX,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(
                    _remake("'pending', 'retrying'", "(priority * -1), fire_after, id"),
                    _remake("'pending'", "fire_after"),
                ),
            ],
        ),
    ]
