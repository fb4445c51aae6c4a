"""Every-second schedules on several replicas with Django's default ``CONN_MAX_AGE = 0``.

Issue 21's "a new user's Django defaults" cell: ``--replicas`` real
``runscheduler`` processes (``--concurrency`` slots each, the shipped default
4) and ``--schedules`` interval schedules every second, the job
``tests.witness`` (it writes one row). Start lateness by the database's clock
(attempt 1's ``started_at`` minus the run's ``fire_after``) of the runs due in a
window after a warm-up, and the share of those runs that finished by the end
of the window plus one second. The variants, alternated within each
repetition, differ only in how a slot thread treats its job's connection::

    python -m bench.conn_race --reps 2

- ``django0-per-job``: ``CONN_MAX_AGE = 0``, ``JOB_CONNECTION_MAX_AGE = None``
  (Django's request rule alone: a new connection per job; before 2026-12-01);
- ``django0-shipped``: ``CONN_MAX_AGE = 0`` with the shipped default
  ``JOB_CONNECTION_MAX_AGE`` (60 s): what a new user gets;
- ``conn60``: ``CONN_MAX_AGE = 60``, the old advice, for reference.

It starts its own private cluster (``bench/cluster.py``), never your server.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "django0-per-job": ("0", {"JOB_CONNECTION_MAX_AGE": None}),
    "django0-shipped": ("0", {}),
    "conn60": ("60", {}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.conn_race", description=__doc__)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--schedules", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    from . import fixtures, machine
    from .cluster import private_cluster
    from .procs import replica, wait_ready
    from .stats import percentile

    results: dict[str, list[dict[str, Any]]] = {}
    logs = Path(args.out).with_suffix("") if args.out else Path("/tmp/pgsched-conn-race")
    logs.mkdir(parents=True, exist_ok=True)
    with private_cluster() as cluster:
        from .cluster import migrated_database

        migrated_database(cluster, "race")
        dsn = cluster.url("race")
        for rep in range(args.reps):
            for name in args.variants.split(","):
                conn_max_age, overrides = VARIANTS[name]
                with cluster.connect("race") as conn:
                    fixtures.reset(conn)
                    conn.execute("TRUNCATE testapp_witness")
                    fixtures.settle(conn)
                    procs = [
                        replica(
                            dsn,
                            logs / f"{rep}-{name}-{i}.log",
                            concurrency=args.concurrency,
                            overrides=json.dumps(overrides),
                            environ={"PGSCHED_BENCH_CONN_MAX_AGE": conn_max_age},
                        )
                        for i in range(args.replicas)
                    ]
                    try:
                        wait_ready(conn, procs, ("planner", "executor", "maintenance"))
                        time.sleep(1.0)
                        anchor = fixtures.db_now(conn).replace(microsecond=0) + timedelta(seconds=3)
                        fixtures.add_interval_schedules(
                            conn, args.schedules, every_s=1, anchor=anchor, job="tests.witness"
                        )
                        since = anchor + timedelta(seconds=args.warmup)
                        until = since + timedelta(seconds=args.seconds)
                        cpu0 = sum(p.cpu_seconds() for p in procs)
                        wait = (until - fixtures.db_now(conn)).total_seconds() + 1.0
                        time.sleep(max(0.0, wait))
                        cpu = sum(p.cpu_seconds() for p in procs) - cpu0
                    finally:
                        for proc in procs:
                            proc.stop()
                    cell = _measure(conn, since, until, percentile)
                cell["replica_cpu_s"] = round(cpu, 2)
                cell["load"] = machine.load()
                results.setdefault(name, []).append(cell)
                print(
                    f"rep {rep + 1} {name}: p50 {cell['p50_ms']:.0f} ms, p99 {cell['p99_ms']:.0f}"
                    f" ms, done {cell['done_share']:.1%} of {cell['due']}, replicas' CPU"
                    f" {cell['replica_cpu_s']} s, load {cell['load'][0]:.2f}",
                    flush=True,
                )
    machine.write_results(args.out, args, results)
    return 0


def _measure(conn: Any, since: datetime, until: datetime, percentile: Any) -> dict[str, Any]:
    rows = conn.execute(
        """
        SELECT extract(epoch FROM a.started_at - r.fire_after) * 1000,
               r.finished_at IS NOT NULL AND r.finished_at <= %(until)s + interval '1 second'
          FROM pgsched_job_run r
          LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1
         WHERE r.fire_after >= %(since)s AND r.fire_after < %(until)s
        """,
        {"since": since, "until": until},
    ).fetchall()
    ms = [float(r[0]) for r in rows if r[0] is not None]
    due = len(rows)
    return {
        "due": due,
        "p50_ms": percentile(ms, 50) if ms else float("nan"),
        "p99_ms": percentile(ms, 99) if ms else float("nan"),
        "max_ms": max(ms) if ms else float("nan"),
        "done_share": sum(1 for r in rows if r[1]) / due if due else 0.0,
    }


if __name__ == "__main__":
    raise SystemExit(main())
