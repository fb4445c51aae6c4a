"""The value bounds' CHECKs and the horizon trigger's WHEN clause, written without SQL functions.

PostgreSQL prepares a table's CHECK expressions, and a trigger's WHEN clause,
again at every execution of every statement that writes the table (once per
partition written), and a SQL function in them is inlined then: its body parsed
and analysed anew. With migration 0015's ``pgsched_time_ok`` (seven calls),
``pgsched_interval_ok`` and ``pgsched_json_ok`` (three) in the run's CHECKs,
checking a run was 22 % of the executor sessions' server CPU in a burst, and
preparing expressions 14 % (two UPDATEs and an INSERT per pass; perf, 50,000
runs due at once). An UPDATE of one run (with the table's other CHECKs) cost
0.31-0.43 ms of server CPU with them, 0.23-0.27 ms with the same bounds written
as below, 0.14-0.21 ms without the three. So each bound is spelled out in the
CHECK itself, refusing exactly the values the function refused:

- times: ``least(...) >= year 1 AND greatest(...) < year 10000``. ``least`` and
  ``greatest`` skip NULLs, so the CHECK passes NULL columns (all NULL: NULL,
  which a CHECK accepts) and refuses a row whenever one of its times is out of
  range, as ``pgsched_time_ok(a) AND pgsched_time_ok(b) ...`` did;
- durations: ``d >= lo AND d <= hi`` (NULL passes a CHECK, an out-of-range
  value makes the whole conjunction false);
- payloads: ``pgsched_json_ok``'s body, with the column in place of its argument.

The functions stay (the hot statements use them in plans that are made once).
Same names, so every message and test that names a CHECK reads as before. Each
new CHECK is added ``NOT VALID`` beside the old one (instant), validated outside
a transaction (``VALIDATE CONSTRAINT`` lets the scheduler keep writing while it
scans), then the old one is dropped and the new one takes its name. A month's
table made later copies the new CHECKs; one kept detached from before (with rows:
RETENTION_KEEP_DETACHED) holds the old ones, and attaching it again fails on their
different definition until they are replaced the same way.

The horizon trigger of migration 0020 (``pgsched_run_horizon_lower``) is made
anew with ``pgsched_month_floor(now(), 1)`` spelled out the same way: its WHEN
clause is prepared by every statement that writes a run's status (each executor
pass, twice).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# the bounds of migration 0015, each function's body written out
LO = "'0001-01-01 00:00:00+00'::timestamptz"
HI = "'10000-01-01 00:00:00+00'::timestamptz"


def _times(*columns: str) -> str:
    cols = ", ".join(columns)
    return f"least({cols}) >= {LO} AND greatest({cols}) < {HI}"


def _json(column: str) -> str:
    return (
        f"({column} IS NULL OR (NOT jsonb_path_exists({column}, 'strict $.**{{100 to last}}')"
        f" AND NOT jsonb_path_exists({column},"
        f" 'strict $.** ? (@.type() == \"number\" && (@ >= 1e4300 || @ <= -1e4300))')))"
    )


SCHEDULE_TIMES = ("anchor", "next_fire_at", "last_fire_at", "created_at", "updated_at")
RUN_TIMES = (
    "scheduled_for",
    "fire_after",
    "claim_expires_at",
    "started_at",
    "finished_at",
    "start_by",
    "created_at",
)

# (table, constraint, expression without functions, expression of migration 0015)
CHECKS = [
    (
        "pgsched_schedule",
        "pgsched_schedule_times_range",
        _times(*SCHEDULE_TIMES),
        " AND ".join(f"pgsched_time_ok({c})" for c in SCHEDULE_TIMES),
    ),
    (
        "pgsched_schedule",
        "pgsched_schedule_durations_range",
        "timeout >= interval '1 second' AND timeout <= interval '7 days'"
        " AND misfire_grace >= interval '0' AND misfire_grace <= interval '366 days'",
        "pgsched_interval_ok(timeout, interval '1 second', interval '7 days')"
        " AND pgsched_interval_ok(misfire_grace, interval '0', interval '366 days')",
    ),
    (
        "pgsched_schedule",
        "pgsched_schedule_kwargs_readable",
        _json("kwargs"),
        "pgsched_json_ok(kwargs)",
    ),
    (
        "pgsched_job_run",
        "pgsched_run_times_range",
        _times(*RUN_TIMES),
        " AND ".join(f"pgsched_time_ok({c})" for c in RUN_TIMES),
    ),
    (
        "pgsched_job_run",
        "pgsched_run_timeout_range",
        "timeout >= interval '1 second' AND timeout <= interval '7 days'",
        "pgsched_interval_ok(timeout, interval '1 second', interval '7 days')",
    ),
    (
        "pgsched_job_run",
        "pgsched_run_json_readable",
        " AND ".join(_json(c) for c in ("kwargs", "task_call", "return_value")),
        "pgsched_json_ok(kwargs) AND pgsched_json_ok(task_call) AND pgsched_json_ok(return_value)",
    ),
]

NEW = "_v2"  # the new CHECK's name until the old one is dropped

# pgsched_month_floor(now(), 1), written out
MONTH_BEFORE = (
    "(date_trunc('month', now() AT TIME ZONE 'UTC') - interval '1 month') AT TIME ZONE 'UTC'"
)


def _add(expression_of: int) -> list[str]:
    return [
        f"ALTER TABLE {table} ADD CONSTRAINT {name}{NEW} CHECK ({check[expression_of]}) NOT VALID"
        for table, name, *check in CHECKS
    ]


def _validate() -> list[str]:
    return [f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}{NEW}" for table, name, *_ in CHECKS]


def _swap() -> list[str]:
    statements = []
    for table, name, *_ in CHECKS:
        statements.append(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        statements.append(f"ALTER TABLE {table} RENAME CONSTRAINT {name}{NEW} TO {name}")
    return statements


def _horizon_trigger(month_before: str) -> list[str]:
    return [
        "DROP TRIGGER pgsched_run_horizon_lower ON pgsched_job_run",
        f"""CREATE TRIGGER pgsched_run_horizon_lower
    AFTER INSERT OR UPDATE OF status, scheduled_for ON pgsched_job_run
    FOR EACH ROW
    WHEN (NEW.status IN ('pending', 'retrying', 'running')
          AND NEW.scheduled_for < {month_before})
    EXECUTE FUNCTION pgsched_run_horizon_lower()""",
    ]


def _run(statements: list[str]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    atomic = False  # the scans of VALIDATE CONSTRAINT run outside a transaction

    dependencies = [
        ("pgsched", "0020_run_horizon"),
    ]

    operations = [
        # one transaction: the trigger made anew, the new CHECKs beside the old (instant)
        migrations.RunPython(
            _run(_horizon_trigger(MONTH_BEFORE) + _add(0)),
            _run(_swap() + _horizon_trigger("pgsched_month_floor(now(), 1)")),
            atomic=True,
        ),
        migrations.RunPython(_run(_validate()), _run(_validate()), atomic=False),
        # one transaction: the old CHECKs dropped, the new ones named as they were
        migrations.RunPython(_run(_swap()), _run(_add(1)), atomic=True),
    ]
