"""Executor throughput while another session holds a snapshot open, and after it lets go.

One replica (``--loops executor --concurrency C``) drains a large queue of
no-op runs. Three phases of ``opentx_phase`` seconds each: the baseline; a
second connection holding ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT
txid_current();`` (an analytics query left open: it pins the xmin horizon, so
vacuum cannot remove the dead run versions every claim and completion leave
behind); and the phase after its COMMIT. Throughput per phase and per 5 s
bucket comes from ``finished_at``; the dead tuples of ``pgsched_job_run`` are
read at the end of each phase.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now, wait_until
from .machine import load
from .procs import replica

ESTIMATE = 3000  # runs/s, to size the queue so it never drains


def _count(conn: psycopg.Connection[Any], t0: datetime, t1: datetime) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgsched_job_run WHERE finished_at >= %s AND finished_at < %s",
        (t0, t1),
    ).fetchone()
    return int(row[0]) if row else 0


def _dead(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    # the months' own counts: the partitioned table itself holds no rows
    row = conn.execute(
        "SELECT coalesce(sum(s.n_dead_tup), 0) FROM pg_stat_user_tables s"
        " JOIN pg_inherits i ON i.inhrelid = s.relid"
        " WHERE i.inhparent = 'pgsched_job_run'::regclass"
    ).fetchone()
    return int(row[0]) if row else 0


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    phase = p.opentx_phase
    with ctx.connect() as conn:
        fixtures.add_pending_runs(conn, int(ESTIMATE * (3 * phase + 15)))
        fixtures.settle(conn, "pgsched_job_run")
        proc = replica(
            ctx.dsn, ctx.log("opentx"), loops="executor", concurrency=p.opentx_concurrency
        )
        marks: dict[str, datetime] = {}
        dead: dict[str, int] = {}
        try:

            def started() -> bool:
                return (
                    _count(conn, datetime.min.replace(tzinfo=db_now(conn).tzinfo), db_now(conn)) > 0
                )

            wait_until(started, timeout=60, what="the first completion")
            time.sleep(2.0)
            marks["start"] = db_now(conn)
            time.sleep(phase)
            marks["pinned"] = db_now(conn)
            dead["baseline"] = _dead(conn)
            with ctx.connect() as holder:
                holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT txid_current()")
                time.sleep(phase)
                marks["released"] = db_now(conn)
                dead["held"] = _dead(conn)
                holder.execute("COMMIT")
            time.sleep(phase)
            marks["end"] = db_now(conn)
            dead["after"] = _dead(conn)
            drained = conn.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM pgsched_job_run WHERE status = 'pending')"
            ).fetchone()
        finally:
            proc.stop()
        rates = {
            name: _count(conn, marks[a], marks[b]) / (marks[b] - marks[a]).total_seconds()
            for name, a, b in (
                ("baseline", "start", "pinned"),
                ("held", "pinned", "released"),
                ("after", "released", "end"),
            )
        }
        buckets = conn.execute(
            """
            SELECT extract(epoch FROM date_bin('5 seconds', finished_at, %(t0)s) - %(t0)s),
                   count(*) / 5.0
              FROM pgsched_job_run
             WHERE finished_at >= %(t0)s AND finished_at < %(t1)s
             GROUP BY 1 ORDER BY 1
            """,
            {"t0": marks["start"], "t1": marks["end"]},
        ).fetchall()
    return {
        "unit": "runs/s",
        "phase_seconds": phase,
        "concurrency": p.opentx_concurrency,
        "rates": rates,
        "held_ratio": rates["held"] / rates["baseline"],
        "after_ratio": rates["after"] / rates["baseline"],
        "dead_tuples": dead,
        "timeline": [(float(t), float(r)) for t, r in buckets],
        "drained": bool(drained and drained[0]),
        "load": load(),
    }
