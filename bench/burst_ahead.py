"""The seed's worst case, 100k schedules on one boundary, planned ahead of it or not.

Issue 21's first row and its step 7: with two real ``runscheduler`` replicas at
``--concurrency 32``, every run should exist before the boundary T, and the last
should start within 1.25x the time raw SQL takes to claim and complete the same
100k runs at batch 32 over 2 connections (``bench.storage``'s ``raw`` design,
measured in the same run, on the same private cluster). The variants differ only
in ``PLANNER_LOOKAHEAD``; T is put ``lookahead + 10 s`` after the schedules are
written, so that planning starts when a replica would start it::

    python -m bench.burst_ahead --reps 2 --lookaheads 5,30

Per cell, by the database's clock: when the last run was created and when the
last started, both after T (negative: before), and the start lateness's p50
and p99.

It starts its own private cluster (``bench/cluster.py``), never your server.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst_ahead", description=__doc__)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--lookaheads", default="5,30", help="seconds, one cell each")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import psycopg

    from . import fixtures, machine, storage
    from .cluster import migrated_database, private_cluster
    from .procs import replica, wait_ready
    from .stats import percentile

    logs = Path(args.out).with_suffix("") if args.out else Path("/tmp/pgsched-burst-ahead")
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {}
    with private_cluster() as cluster:
        dsn = migrated_database(cluster, "burst")
        for rep in range(args.reps):
            # the raw floor, in this repetition
            with psycopg.connect(dsn, autocommit=True) as conn:
                storage.reset(conn, storage.TODAY, args.schedules)
                storage.reset(conn, storage.RAW, args.schedules)
            raw = storage.run_design(cluster, dsn, storage.RAW, args.schedules)["burst"]
            results.setdefault("raw", []).append({"burst_s": raw["wall_s"], "load": machine.load()})
            print(f"rep {rep + 1} raw: burst {raw['wall_s']:.2f} s", flush=True)
            for lookahead in (float(x) for x in args.lookaheads.split(",")):
                with cluster.connect("burst") as conn:
                    conn.execute("DROP SCHEMA IF EXISTS proto_raw CASCADE")
                    fixtures.reset(conn)
                    fixtures.settle(conn)
                    overrides = json.dumps({"PLANNER_LOOKAHEAD": lookahead})
                    procs = [
                        replica(
                            dsn,
                            logs / f"{rep}-{lookahead:g}-{i}.log",
                            concurrency=args.concurrency,
                            overrides=overrides,
                        )
                        for i in range(2)
                    ]
                    try:
                        wait_ready(conn, procs, ("planner", "executor", "maintenance"))
                        due = fixtures.db_now(conn).replace(microsecond=0) + timedelta(
                            seconds=lookahead + 10
                        )
                        cron = f"{due.second} {due.minute} {due.hour} * * *"
                        fixtures.add_cron_schedules(
                            conn, args.schedules, cron=cron, next_fire_at=due, prefix="burst"
                        )
                        conn.execute("ANALYZE pgsched_schedule")
                        margin = (due - fixtures.db_now(conn)).total_seconds()
                        deadline = time.monotonic() + margin + 180
                        while time.monotonic() < deadline:
                            row = conn.execute(
                                "SELECT count(*) FROM pgsched_job_run WHERE started_at IS NOT NULL"
                            ).fetchone()
                            if row and row[0] >= args.schedules:
                                break
                            time.sleep(1.0)
                    finally:
                        for proc in procs:
                            proc.stop()
                    row = conn.execute(
                        "SELECT extract(epoch FROM max(r.created_at) - %(due)s),"
                        "       extract(epoch FROM max(a.started_at) - %(due)s), count(a.*),"
                        "       array_agg(extract(epoch FROM a.started_at - r.fire_after) * 1000)"
                        "  FROM pgsched_job_run r"
                        "  LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1"
                        " WHERE r.scheduled_for = %(due)s",
                        {"due": due},
                    ).fetchone()
                assert row is not None
                ms = [float(x) for x in (row[3] or []) if x is not None]
                cell = {
                    "lookahead_s": lookahead,
                    "planned_after_s": float(row[0]) if row[0] is not None else None,
                    "all_started_after_s": float(row[1]) if row[2] == args.schedules else None,
                    "started": int(row[2]),
                    "p50_ms": percentile(ms, 50) if ms else None,
                    "p99_ms": percentile(ms, 99) if ms else None,
                    "setup_margin_s": margin,
                    "vs_raw": (float(row[1]) / raw["wall_s"]) if row[2] == args.schedules else None,
                    "load": machine.load(),
                }
                results.setdefault(f"lookahead {lookahead:g} s", []).append(cell)
                print(
                    f"rep {rep + 1} lookahead {lookahead:g} s: last planned"
                    f" {cell['planned_after_s']:+.1f} s, last started"
                    f" {cell['all_started_after_s'] or float('nan'):+.1f} s after T"
                    f" ({cell['started']} started; {cell['vs_raw'] or float('nan'):.2f}x raw),"
                    f" p99 {cell['p99_ms'] or float('nan'):.0f} ms, load {cell['load'][0]:.2f}",
                    flush=True,
                )
    machine.write_results(args.out, args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
