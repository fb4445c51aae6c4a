"""The outbox's schema: its table (``pgsched_claim_outbox``) and its triggers.

A run becomes claimable (inserted pending, or updated back to pending or
retrying, or re-timed) in some transaction of the planner, ``enqueue``, the
executor (a retry, a release), the reaper, a backfill or the admin. With the
``nats`` transport a row trigger on ``pgsched_job_run`` writes one outbox row
in that same transaction, so a run committed is a run to publish, whoever
committed it. The triggers are created disabled by the migration, so the
``postgres`` transport pays nothing for them; :func:`ensure_outbox` (a
``nats`` replica at start, or ``manage.py pgsched_claims --enable``) creates
them if missing (``pgsched_job_run`` rebuilt, e.g. partitioned) and enables
them; ``manage.py pgsched_claims --disable`` disables them again.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from .. import sqlfiles

# DDL run as one script without parameters: verbatim blocks of queries.sql, each ending
# in its ";" and a newline, so that they run one after the other
TABLE = sqlfiles.get("broker", "outbox_table")
FUNCTION = sqlfiles.get("broker", "outbox_function")
TRIGGERS = sqlfiles.get("broker", "outbox_triggers")

TRIGGER_NAMES = ("pgsched_run_outbox_insert", "pgsched_run_outbox_update")

DISABLE = "".join(
    f"ALTER TABLE pgsched_job_run DISABLE TRIGGER {name};\n" for name in TRIGGER_NAMES
)
ENABLE = "".join(f"ALTER TABLE pgsched_job_run ENABLE TRIGGER {name};\n" for name in TRIGGER_NAMES)

# How many of the two triggers exist on pgsched_job_run and are enabled ('O').
STATE = sqlfiles.get("broker", "outbox_state")


def outbox_state(conn: BaseDatabaseWrapper) -> tuple[int, int]:
    """(enabled, present) of the outbox's two triggers."""
    with conn.cursor() as cursor:
        cursor.execute(STATE, [list(TRIGGER_NAMES)])
        enabled, present = cursor.fetchone()
    return int(enabled), int(present)


def ensure_outbox(conn: BaseDatabaseWrapper) -> bool:
    """Create (if missing) and enable the outbox's triggers; True if anything changed.

    Needs the owner of ``pgsched_job_run`` (like a migration) only when something
    is to change: a replica whose triggers are already enabled only reads.
    """
    if outbox_state(conn) == (len(TRIGGER_NAMES), len(TRIGGER_NAMES)):
        return False
    with conn.cursor() as cursor:
        cursor.execute(TABLE + FUNCTION + TRIGGERS + ENABLE)
    return True


def disable_outbox(conn: BaseDatabaseWrapper) -> None:
    """Stop writing outbox rows (the ``postgres`` transport everywhere again)."""
    if outbox_state(conn)[1]:
        with conn.cursor() as cursor:
            cursor.execute(DISABLE)
