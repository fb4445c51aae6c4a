"""Bulk statements on ``pgsched_schedule``: the triggers' cost, as a ratio in one run.

N schedules (100k by default) are written set-based; each statement shape then
runs on all of them twice per repetition, in a transaction that is rolled back:
once as it is, once on the same table with its user triggers disabled
(``ALTER TABLE ... DISABLE TRIGGER USER`` in the same transaction: the same
rows, indexes, CHECKs and foreign-key actions, none of the scheduler's
triggers). The ratio of the two medians is what the triggers cost. The order of
the two alternates between repetitions, and ``VACUUM`` runs between
statements, so neither side inherits the other's dead tuples.

Shapes: a definition column for every row (``kwargs``, audited and notified);
``next_fire_at`` set to one value for all rows (the shape that degraded
quadratically); ``next_fire_at`` moved forward (the planner's own advance: no
audit, no notification); a runtime-only column; pause (audited, cancels
unstarted runs); resume (the ``unplanned_from`` and next-fire triggers); a
re-time (``cron``); a bulk ``INSERT`` and a bulk ``DELETE``. A planner-sized
advance (500 rows, the default batch) is measured the same way, many times.

Runnable on its own against any migrated database::

    python -m bench.b_triggers postgresql://.../db [rows] [reps]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import psycopg

from .context import Context

SETUP_PAUSED = "UPDATE pgsched_schedule SET status = 'paused'"

# name -> (setup statement run first with triggers disabled, or None; the timed statement)
SHAPES: dict[str, tuple[str | None, str]] = {
    "set kwargs": (None, """UPDATE pgsched_schedule SET kwargs = '{"x": 1}'"""),
    "set next_fire_at = one value": (
        None,
        "UPDATE pgsched_schedule SET next_fire_at = date_trunc('second', now()) + interval '1 day'",
    ),
    "advance next_fire_at": (
        None,
        "UPDATE pgsched_schedule SET next_fire_at = next_fire_at + interval '1 minute', "
        "last_fire_at = next_fire_at",
    ),
    "set next_fire_at earlier": (
        None,
        "UPDATE pgsched_schedule SET next_fire_at = next_fire_at - interval '1 minute'",
    ),
    "set updated_at (runtime only)": (None, "UPDATE pgsched_schedule SET updated_at = now()"),
    "pause": (None, "UPDATE pgsched_schedule SET status = 'paused'"),
    "resume": (SETUP_PAUSED, "UPDATE pgsched_schedule SET status = 'active'"),
    "re-time (cron)": (None, "UPDATE pgsched_schedule SET cron = '*/5 * * * *'"),
    "insert": (
        "DELETE FROM pgsched_schedule",
        """
        INSERT INTO pgsched_schedule
               (name, job, kwargs, cron, status, next_fire_at, misfire_policy, catch_up_limit,
                skipped_occurrences, source, last_error, updated_at)
        SELECT 'bulk-' || g, 'tests.noop', '{}', '* * * * *', 'active',
               date_trunc('minute', now()) + interval '1 hour', 'latest', 10, 0, 'database', '',
               now()
          FROM generate_series(1, %(rows)s::int) g
        """,
    ),
    "delete": (None, "DELETE FROM pgsched_schedule"),
}

FILL = """
INSERT INTO pgsched_schedule
       (name, job, kwargs, cron, status, next_fire_at, misfire_policy, catch_up_limit,
        skipped_occurrences, source, last_error, updated_at)
SELECT 'trig-' || g, 'tests.noop', '{}', '* * * * *', 'active',
       date_trunc('minute', now()) + interval '1 hour' + (g %% 600) * interval '1 second',
       'latest', 10, 0, 'database', '', now()
  FROM generate_series(1, %(rows)s::int) g
"""

PLANNER_BATCH = """
UPDATE pgsched_schedule s
   SET next_fire_at = s.next_fire_at + interval '1 minute',
       last_fire_at = s.next_fire_at,
       skipped_occurrences = s.skipped_occurrences,
       unplanned_from = NULL, unplanned_reason = NULL
 WHERE s.id BETWEEN %(lo)s AND %(hi)s
"""


def _fill(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute(
        "TRUNCATE pgsched_attempt, pgsched_job_run, pgsched_skipped_range, "
        "pgsched_schedule_change, pgsched_schedule RESTART IDENTITY"
    )
    conn.execute("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
    conn.execute(FILL, {"rows": rows})
    conn.execute("ALTER TABLE pgsched_schedule ENABLE TRIGGER USER")
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM ANALYZE pgsched_schedule")
    conn.autocommit = False


def _timed(
    conn: psycopg.Connection[Any],
    setup: str | None,
    statement: str,
    rows: int,
    *,
    triggers: bool,
    timeout_s: float,
) -> float | None:
    """Seconds the statement took (None past the timeout); rolled back either way."""
    params = {"rows": rows}
    try:
        conn.execute(f"SET LOCAL statement_timeout = '{int(timeout_s * 1000)}ms'")
        if setup:
            conn.execute("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
            conn.execute(setup, params)
            conn.execute("ALTER TABLE pgsched_schedule ENABLE TRIGGER USER")
        if not triggers:
            conn.execute("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
        started = time.perf_counter()
        conn.execute(statement, params)
        return time.perf_counter() - started
    except psycopg.errors.QueryCanceled:
        return None
    finally:
        conn.rollback()
        conn.autocommit = True
        conn.execute("VACUUM pgsched_schedule")
        conn.autocommit = False


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return None if len(known) < len(values) or not known else statistics.median(known)


def measure(
    conn: psycopg.Connection[Any],
    rows: int,
    reps: int,
    *,
    shapes: list[str] | None = None,
    timeout_s: float = 120.0,
    say: Any = print,
) -> dict[str, Any]:
    _fill(conn, rows)
    cells: dict[str, Any] = {}
    for name in shapes or list(SHAPES):
        setup, statement = SHAPES[name]
        with_t: list[float | None] = []
        without: list[float | None] = []
        for rep in range(reps):
            order = (True, False) if rep % 2 == 0 else (False, True)
            for triggers in order:
                took = _timed(conn, setup, statement, rows, triggers=triggers, timeout_s=timeout_s)
                (with_t if triggers else without).append(took)
            if None in with_t:
                break  # past the timeout once: no point in repeating it
        a, b = _median(with_t), _median(without)
        cells[name] = {
            "triggers_s": a,
            "no_triggers_s": b,
            "ratio": (a / b) if a is not None and b else None,
            "samples": {"triggers": with_t, "no_triggers": without},
        }
        say(
            f"{name:32s} triggers {a if a is None else round(a, 3)} s, "
            f"none {b if b is None else round(b, 3)} s, "
            f"ratio {cells[name]['ratio'] and round(cells[name]['ratio'], 2)}"
        )
    cells["planner batch (500 rows)"] = _planner_batches(conn, rows, say=say)
    return cells


def _planner_batches(
    conn: psycopg.Connection[Any], rows: int, *, batches: int = 40, say: Any = print
) -> dict[str, Any]:
    """The planner's advance of 500 rows, with and without the triggers: the median of many."""
    timings: dict[bool, list[float]] = {True: [], False: []}
    for i in range(batches):
        lo = 1 + (i * 500) % max(rows - 500, 1)
        for triggers in (True, False) if i % 2 == 0 else (False, True):
            if not triggers:
                conn.execute("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
            started = time.perf_counter()
            conn.execute(PLANNER_BATCH, {"lo": lo, "hi": lo + 499})
            timings[triggers].append(time.perf_counter() - started)
            conn.rollback()
    a, b = statistics.median(timings[True]), statistics.median(timings[False])
    say(
        f"{'planner batch (500 rows)':32s} triggers {a * 1000:.2f} ms, none {b * 1000:.2f} ms, "
        f"ratio {a / b:.2f}"
    )
    return {"triggers_s": a, "no_triggers_s": b, "ratio": a / b}


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    rows = int(ctx.profile.extra.get("trigger_rows", 100_000))
    with ctx.connect() as conn:
        conn.autocommit = False
        cells = measure(conn, rows, max(ctx.profile.reps, 3), say=ctx.say)
    worst = max(c["ratio"] or float("inf") for n, c in cells.items() if "planner" not in n)
    return {
        "unit": "ratio to the same statement without triggers",
        "rows": rows,
        "cells": cells,
        "worst_ratio": worst,
    }


def main(argv: list[str]) -> int:
    dsn = argv[1]
    rows = int(argv[2]) if len(argv) > 2 else 100_000
    reps = int(argv[3]) if len(argv) > 3 else 3
    shapes = argv[4].split(",") if len(argv) > 4 else None
    with psycopg.connect(dsn) as conn:
        measure(conn, rows, reps, shapes=shapes, say=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
