"""The one-column CHECKs of runs and schedules as domain constraints: checked when a value is written.

PostgreSQL prepares every CHECK of a table again for each statement that writes it
(once per partition written): the constraint's stored expression is parsed back
from text (``stringToNode``) and planned (``eval_const_expressions``), then
evaluated on every row the statement writes, whichever columns it sets. The run
table had 16 CHECKs, about 25 KB of stored expressions. A claim or an end (an
``executor_pass``) writes 8 to 32 runs; preparing them was 16-18 % of the
executor's server CPU at ``--concurrency 8`` (perf, ``bench.passes``), and every
claim re-checked the payloads' bounds (two ``jsonb_path_exists`` each, and the
payload turned into text to count its bytes) though it never sets them.

A domain's constraints are prepared once per session (PostgreSQL's type cache)
and checked only where a value is coerced to the domain: on INSERT, and on an
UPDATE that sets that column. So each CHECK that names one column moves to a
domain over the column's type, under the same constraint name (a refusal still
says ``violates check constraint "pgsched_run_json_readable"``, SQLSTATE 23514,
and ``bounds.refusal`` still names the field from it). A bound shared by several
columns (``pgsched_run_times_range`` over seven times, ``pgsched_run_json_readable``
over three payloads) becomes the same constraint on each column's domain; it
refuses the same rows. The partition key ``scheduled_for`` cannot change type:
its bounds stay CHECKs of the table (``pgsched_run_times_range`` on it alone,
``pgsched_run_scheduled_for_whole_second``), and so do the CHECKs that relate
two columns (``pgsched_run_lease_iff_running``,
``pgsched_run_terminal_has_finished_at``, ``pgsched_run_attempts_within_max``).

Each column's type becomes its domain without a rewrite (the domain has no
constraint yet: the same type underneath); the constraint is then added to the
domain, which checks the existing rows. A column a trigger names cannot change
type, so the tables' triggers are dropped and made again from their definitions,
each enabled or disabled as it was (the broker's outbox triggers are disabled
until ``PGSCHED["CLAIMS"]`` enables them). A month's table made later copies the
domains with the columns (``LIKE ... INCLUDING CONSTRAINTS``); a month detached
before this migration and kept (``RETENTION_KEEP_DETACHED``) keeps the old types
and CHECKs, and could not be attached again as it is.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

LO = "'0001-01-01 00:00:00+00'::timestamptz"
HI = "'10000-01-01 00:00:00+00'::timestamptz"
TIMES = f"VALUE >= {LO} AND VALUE < {HI}"
JSON_READABLE = (
    "VALUE IS NULL OR (NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}')"
    " AND NOT jsonb_path_exists(VALUE,"
    " 'strict $.** ? (@.type() == \"number\" && (@ >= 1e4300 || @ <= -1e4300))'))"
)
MAX_PAYLOAD = "1048576"
RUN_STATUSES = "'pending', 'running', 'retrying', 'succeeded', 'failed', 'cancelled', 'missed'"

RUN = "pgsched_job_run"
SCHEDULE = "pgsched_schedule"

# (table, domain, type underneath, its columns, [(constraint, expression over VALUE)])
DOMAINS: list[tuple[str, str, str, tuple[str, ...], list[tuple[str, str]]]] = [
    (
        RUN,
        "pgsched_run_kwargs",
        "jsonb",
        ("kwargs",),
        [
            (
                "pgsched_run_kwargs_object",
                f"jsonb_typeof(VALUE) = 'object' AND octet_length(VALUE::text) <= {MAX_PAYLOAD}",
            ),
            ("pgsched_run_json_readable", JSON_READABLE),
        ],
    ),
    (
        RUN,
        "pgsched_run_task_call",
        "jsonb",
        ("task_call",),
        [
            (
                "pgsched_run_task_call_object",
                "VALUE IS NULL OR (jsonb_typeof(VALUE) = 'object'"
                f" AND octet_length(VALUE::text) <= {MAX_PAYLOAD})",
            ),
            ("pgsched_run_json_readable", JSON_READABLE),
        ],
    ),
    (
        RUN,
        "pgsched_run_return_value",
        "jsonb",
        ("return_value",),
        [
            (
                "pgsched_run_return_value_size",
                f"VALUE IS NULL OR octet_length(VALUE::text) <= {MAX_PAYLOAD}",
            ),
            ("pgsched_run_json_readable", JSON_READABLE),
        ],
    ),
    (
        RUN,
        "pgsched_run_status",
        "varchar(16)",
        ("status",),
        [("pgsched_run_status_valid", f"VALUE::text IN ({RUN_STATUSES})")],
    ),
    (
        RUN,
        "pgsched_run_overlap",
        "varchar(16)",
        ("overlap",),
        [("pgsched_run_overlap_valid", "VALUE IS NULL OR VALUE::text IN ('skip', 'buffer_one')")],
    ),
    (
        RUN,
        "pgsched_run_priority",
        "smallint",
        ("priority",),
        [("pgsched_run_priority_range", "VALUE >= -100 AND VALUE <= 100")],
    ),
    (
        RUN,
        "pgsched_run_attempts",
        "smallint",
        ("attempts",),
        [("pgsched_run_attempts_range", "VALUE >= 0 AND VALUE <= 8")],
    ),
    (
        RUN,
        "pgsched_run_max_attempts",
        "smallint",
        ("max_attempts",),
        [("pgsched_run_max_attempts_range", "VALUE >= 1 AND VALUE <= 8")],
    ),
    (
        RUN,
        "pgsched_run_timeout",
        "interval",
        ("timeout",),
        [
            (
                "pgsched_run_timeout_range",
                "VALUE >= interval '1 second' AND VALUE <= interval '7 days'",
            )
        ],
    ),
    (
        RUN,
        "pgsched_run_tenant",
        "varchar(200)",
        ("tenant",),
        [("pgsched_run_tenant_text", "VALUE::text !~ '[\\x01-\\x1f\\x7f]'")],
    ),
    (
        RUN,
        "pgsched_run_time",
        "timestamptz",
        ("fire_after", "claim_expires_at", "started_at", "finished_at", "start_by", "created_at"),
        [("pgsched_run_times_range", TIMES)],
    ),
    (
        SCHEDULE,
        "pgsched_schedule_kwargs",
        "jsonb",
        ("kwargs",),
        [
            (
                "pgsched_schedule_kwargs_object",
                f"jsonb_typeof(VALUE) = 'object' AND octet_length(VALUE::text) <= {MAX_PAYLOAD}",
            ),
            ("pgsched_schedule_kwargs_readable", JSON_READABLE),
        ],
    ),
    (
        SCHEDULE,
        "pgsched_schedule_tenant",
        "varchar(200)",
        ("tenant",),
        [("pgsched_schedule_tenant_text", "VALUE::text !~ '[\\x01-\\x1f\\x7f]'")],
    ),
]

# scheduled_for is the partition key, whose type cannot change: its bound stays a CHECK of
# the table (under the same name as the other times' domain constraint), and so does
# pgsched_run_scheduled_for_whole_second
SCHEDULED = TIMES.replace("VALUE", "scheduled_for")

RUN_TIMES = (
    "scheduled_for",
    "fire_after",
    "claim_expires_at",
    "started_at",
    "finished_at",
    "start_by",
    "created_at",
)


def _table_checks() -> list[tuple[str, str, str]]:
    """The CHECKs the domains replace, as the table held them: (table, name, expression)."""
    checks: dict[tuple[str, str], str] = {}
    for table, _domain, _type, columns, constraints in DOMAINS:
        for name, expression in constraints:
            if name == "pgsched_run_times_range":
                cols = ", ".join(RUN_TIMES)
                checks[(table, name)] = f"least({cols}) >= {LO} AND greatest({cols}) < {HI}"
            elif name == "pgsched_run_json_readable":
                checks[(table, name)] = " AND ".join(
                    f"({JSON_READABLE.replace('VALUE', column)})"
                    for column in ("kwargs", "task_call", "return_value")
                )
            else:
                (column,) = columns
                checks[(table, name)] = expression.replace("VALUE", column)
    return [(table, name, expression) for (table, name), expression in checks.items()]


def _triggers(cursor: Any) -> list[tuple[str, str, str, str]]:
    """The tables' own triggers: (table, name, definition, enabled as pg_trigger says)."""
    cursor.execute(
        """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid), tgenabled
          FROM pg_trigger
         WHERE tgrelid IN (%s::regclass, %s::regclass) AND NOT tgisinternal AND tgparentid = 0
         ORDER BY tgrelid, tgname
        """,
        [RUN, SCHEDULE],
    )
    return [tuple(row) for row in cursor.fetchall()]  # type: ignore[misc]


ENABLING = {"O": "ENABLE", "D": "DISABLE", "R": "ENABLE REPLICA", "A": "ENABLE ALWAYS"}

# each month's index: (the partitioned index, the month's table) -> (its schema, its name)
MONTH_INDEXES = """
SELECT p.relname, t.relname, n.nspname, c.relname
  FROM pg_inherits h
  JOIN pg_class c ON c.oid = h.inhrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_index x ON x.indexrelid = h.inhrelid
  JOIN pg_class t ON t.oid = x.indrelid
  JOIN pg_class p ON p.oid = h.inhparent
  JOIN pg_index px ON px.indexrelid = h.inhparent
 WHERE px.indrelid = %s::regclass
"""


def _month_indexes(cursor: Any) -> dict[tuple[str, str], tuple[str, str]]:
    cursor.execute(MONTH_INDEXES, [RUN])
    return {(parent, table): (schema, name) for parent, table, schema, name in cursor.fetchall()}


def _with_triggers_apart(change: Any) -> Any:
    """``change`` with the tables' triggers dropped, and the months' indexes named as before.

    Changing a column's type rebuilds the indexes that name it, and PostgreSQL
    names a month's rebuilt index by its own rule; the months' indexes are named
    ``<index>_pYYYYMM`` (migration 0019), which plans and operators read.
    """

    def run(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            triggers = _triggers(cursor)
            named = _month_indexes(cursor)
            for table, name, _definition, _enabled in triggers:
                cursor.execute(f"DROP TRIGGER {name} ON {table}")
            change(cursor)
            for key, (schema, name) in _month_indexes(cursor).items():
                if key in named and named[key][1] != name:
                    cursor.execute(
                        "SELECT format('ALTER INDEX %%I.%%I RENAME TO %%I', %s, %s, %s)",
                        [schema, name, named[key][1]],
                    )
                    cursor.execute(cursor.fetchone()[0])
            for table, name, definition, enabled in triggers:
                cursor.execute(definition)
                if enabled != "O":
                    cursor.execute(f"ALTER TABLE {table} {ENABLING[enabled]} TRIGGER {name}")

    return run


def _to_domains(cursor: Any) -> None:
    for table, domain, type_, columns, constraints in DOMAINS:
        cursor.execute(f"CREATE DOMAIN {domain} AS {type_}")
        for column in columns:  # the same type underneath, no constraint yet: no rewrite
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {domain}")
        for name, expression in constraints:  # checks the rows there are
            cursor.execute(f"ALTER DOMAIN {domain} ADD CONSTRAINT {name} CHECK ({expression})")
    for table, name, _expression in _table_checks():
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    cursor.execute(f"ALTER TABLE {RUN} ADD CONSTRAINT pgsched_run_times_range CHECK ({SCHEDULED})")


def _to_table_checks(cursor: Any) -> None:
    cursor.execute(f"ALTER TABLE {RUN} DROP CONSTRAINT pgsched_run_times_range")
    for table, _domain, type_, columns, _constraints in DOMAINS:
        for column in columns:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_}")
    for table, name, expression in _table_checks():
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expression})")
    for _table, domain, *_ in DOMAINS:
        cursor.execute(f"DROP DOMAIN {domain}")


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0032_months_made_as_owner"),
    ]

    operations = [
        migrations.RunPython(
            _with_triggers_apart(_to_domains), _with_triggers_apart(_to_table_checks)
        ),
    ]
