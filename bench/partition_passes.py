"""An executor pass and a planner's insert with 24 months of history against one month.

``python -m bench.partition_passes [ROWS_PER_MONTH] [--months 24] [--rounds 200]``:
a private cluster, two databases from the migrated template: ``one`` with
``ROWS_PER_MONTH`` finished runs in the current month, ``many`` with as many in
each of ``--months`` months up to the current one; both with the same 2,000
due runs. After VACUUM ANALYZE, in alternating rounds (the machine's load
weighs on both alike), each database times:

- ``executor``: ``executor_pass`` claiming 8 runs (prepared, generic plan, as
  the scheduler's sessions run it, reading the months from the horizon that the
  upkeep's ``pgsched_run_horizon_advance()`` set), rolled back so that the due
  runs stay;
- ``executor_every_month``: the same with no horizon (every month in the
  statement: ``live_since`` NULL), for comparison in the same run;
- ``planner_insert``: the planner's insert of one occurrence of 500 schedules
  (the keys it derives, the occurrence index, the triggers), rolled back. The
  rest of a planner pass reads schedules, which partitions do not touch.

Each statement is prepared once and its plan kept: the transactions are begun
and rolled back on the server connection directly, because psycopg forgets its
prepared statements at every ``ROLLBACK`` it sends (the statement would then be
planned again at each round, which the scheduler's committing sessions never
do, and the planning of two years of partitions would be what is measured).

The ratio is many months over one (median). Results go to
``bench/results/<UTC timestamp>-partition-passes.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from . import fixtures, machine
from .cluster import private_cluster
from .context import TEMPLATE, Context
from .profiles import QUICK

RESULTS = Path(__file__).parent / "results"

HISTORY = """
INSERT INTO pgsched_job_run (schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
       status, fire_after, attempts, max_attempts, timeout, started_at, finished_at, note, tenant)
SELECT 'history-' || (g %% 500), t, 'history:' || %(month)s || ':' || g, 'tests.noop', '{}',
       'default', CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'succeeded' END, t, 1, 3,
       interval '5 minutes', t, t + interval '20 milliseconds', '', 'tenant-' || (g %% 50)
  FROM generate_series(1, %(n)s::int) g,
       LATERAL (SELECT date_trunc('second', %(start)s::timestamptz
                       + (g::bigint * %(step)s) * interval '1 microsecond')) AS c(t)
"""

PLANNER_INSERT = """
INSERT INTO pgsched_job_run
       (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue, status,
        fire_after, attempts, max_attempts, timeout, note, tenant)
SELECT s.id, s.name, %(at)s::timestamptz,
       'pgsched:' || s.id || ':'
           || to_char(%(at)s::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       s.job, s.kwargs, 'default', 'pending', %(at)s::timestamptz, 0, 3, interval '5 minutes',
       '', s.tenant
  FROM pgsched_schedule s
 WHERE s.name LIKE 'passes-%%'
 ORDER BY s.id
    ON CONFLICT DO NOTHING
"""


def fill(conn: psycopg.Connection[Any], months: int, rows: int) -> None:
    now = fixtures.db_now(conn)
    current = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    fixtures.ensure_months(conn, now - current + timedelta(days=31 * months), timedelta(0))
    for back in range(months):
        index = current.year * 12 + current.month - 1 - back
        start = current.replace(year=index // 12, month=index % 12 + 1)
        end = now if back == 0 else start + timedelta(days=28)
        step = int((end - start).total_seconds() * 1_000_000 / (rows + 1))
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")  # set-up: no triggers
            conn.execute(
                HISTORY, {"month": f"{start:%Y%m}", "n": rows, "start": start, "step": step}
            )
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        fixtures.add_pending_runs(conn, 2000)
    fixtures.add_cron_schedules(
        conn, 500, cron="* * * * *", next_fire_at=now + timedelta(days=1), prefix="passes"
    )
    fixtures.settle(conn)
    conn.execute("SELECT pgsched_run_horizon_advance()")  # as every replica's upkeep does


def timed(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> float:
    """One execution in a transaction rolled back (see the module's docstring)."""
    conn.pgconn.exec_(b"BEGIN")
    try:
        started = time.perf_counter()
        conn.execute(sql, params, prepare=True)
        return time.perf_counter() - started
    finally:
        conn.pgconn.exec_(b"ROLLBACK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.partition_passes", description=__doc__)
    parser.add_argument("rows", type=int, nargs="?", default=200_000)
    parser.add_argument("--months", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="pgsched-passes-"))
    from django_pgsched.engine import queries, recording

    executor_params = {
        "now": None,
        "live_since": None,  # each database's horizon (below)
        "record_since": recording.NO_MONTH,  # nothing to record
        **{k: [] for k in ("ids", "tokens", "results", "errors", "statuses", "delays")},
        **{k: [] for k in ("values", "error_classes", "not_befores", "details")},
        "limit": 8,
        "jobs": ["tests.noop"],
        "queues": None,
        "worker": "bench",
        "lease_factor": 2.0,
        "floor_rank": None,
        "floor_at": None,
        "floor_id": None,
        "held": False,
        "default_held": False,
    }
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=logs)
        ctx.migrate_template()
        conns: dict[str, psycopg.Connection[Any]] = {}
        horizons: dict[str, Any] = {}
        for name, months in (("one", 1), ("many", args.months)):
            cluster.create_database(name, template=TEMPLATE)
            conn = cluster.connect(name)
            conn.autocommit = True
            ctx.say(f"{name}: {months} month(s) of {args.rows:,} runs")
            fill(conn, months, args.rows)
            conn.execute("SET plan_cache_mode = force_generic_plan")
            # the executor's session settings (django_pgsched.engine.db.configure)
            conn.execute("SET jit = off")
            conn.execute("SET enable_sort = off")
            conn.prepare_threshold = 0
            conns[name] = conn
            horizon = conn.execute("SELECT live_since FROM pgsched_run_horizon").fetchone()
            horizons[name] = horizon[0]
            ctx.say(f"{name}: the live months start at {horizons[name]}")
        executor_sql = queries.get("executor_pass")
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
        samples: dict[str, dict[str, list[float]]] = {
            name: {"executor": [], "executor_every_month": [], "planner_insert": []}
            for name in conns
        }
        ctx.say(f"{args.rounds} alternating rounds")
        for _ in range(args.rounds):
            for name, conn in conns.items():
                samples[name]["executor"].append(
                    timed(conn, executor_sql, {**executor_params, "live_since": horizons[name]})
                )
                # no horizon: every month in the statement
                samples[name]["executor_every_month"].append(
                    timed(conn, executor_sql, executor_params)
                )
                samples[name]["planner_insert"].append(timed(conn, PLANNER_INSERT, {"at": at}))
        result: dict[str, Any] = {
            "rows_per_month": args.rows,
            "months": args.months,
            "rounds": args.rounds,
            "load": machine.load()[0],
            "live_since": {name: str(value) for name, value in horizons.items()},
            "partitions": {
                name: conn.execute(
                    "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgsched_job_run'::regclass"
                ).fetchone()[0]
                for name, conn in conns.items()
            },
        }
        for name, kinds in samples.items():
            result[name] = {
                kind: {
                    "median_ms": round(statistics.median(values) * 1000, 3),
                    "p90_ms": round(sorted(values)[int(len(values) * 0.9)] * 1000, 3),
                }
                for kind, values in kinds.items()
            }
        result["ratio"] = {
            kind: round(result["many"][kind]["median_ms"] / result["one"][kind]["median_ms"], 2)
            for kind in ("executor", "executor_every_month", "planner_insert")
        }
        for conn in conns.values():
            conn.close()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{stamp}-partition-passes.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
