"""One tenant's burst beside another tenant's every-second schedules (issue 22's row).

Tenant ``a`` has ``--burst`` cron schedules on one boundary T; tenant ``b`` has
``--small`` interval schedules firing every second. Two real ``runscheduler``
replicas at ``--concurrency`` run both. Per repetition, by the database's
clock: of b's runs scheduled in ``[T, T + --window)``, how many started within
the window, and their start lateness (``started_at - fire_after``) p50/p99;
and when a's last run started after T. The cell ``none`` runs the same schedules
without tenants, in the same run: what tenants cost the claim::

    python -m bench.fairness --reps 2 --burst 100000 --small 100 --statements

``--statements`` also prints each cell's ten statements of most server time and
the server time of the claim's statements per run (``pg_stat_statements``);
``PGSCHED_BENCH_EXPLAIN_MS=25`` logs the plans of statements slower than that
(``auto_explain``) and copies the server's log beside the replicas' logs;
``PGSCHED_BENCH_PREPARE_SQL`` runs SQL on the migrated database first (what an
index costs: ``DROP INDEX ...``).
Run it from a checkout without fair claiming for the "before"
(``bench/results/20261203-fairness.md``). It starts its own private cluster
(``bench/cluster.py``), never your server.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--burst", type=int, default=30_000)
    parser.add_argument("--small", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument(
        "--cells",
        default="tenants,none",
        help="tenants: a and b as tenants; none: the same schedules without tenants (the"
        " claim's cost without tenants, in the same run)",
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="print each cell's ten statements of most server time (pg_stat_statements)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from . import fixtures, machine
    from .cluster import migrated_database, private_cluster
    from .procs import replica, wait_ready
    from .stats import percentile

    logs = Path(tempfile.mkdtemp(prefix="pgsched-fairness-"))  # the replicas' logs
    print(f"logs: {logs}", flush=True)
    cells: list[dict[str, Any]] = []
    claim_cost: dict[tuple[str, int], float] = {}  # µs of the claim's statements per run
    with private_cluster() as cluster:
        dsn = migrated_database(cluster, "fair")
        prepare = os.environ.get("PGSCHED_BENCH_PREPARE_SQL")
        if prepare:  # diagnostics: what an index costs, say (DROP INDEX ...), before the cells
            cluster.sql("fair", prepare)
        explain_ms = os.environ.get("PGSCHED_BENCH_EXPLAIN_MS")
        if explain_ms:  # diagnostics: the plans of slow statements, in the server's log
            for name, value in (
                ("session_preload_libraries", "auto_explain"),
                ("auto_explain.log_min_duration", explain_ms),
                ("auto_explain.log_analyze", "on"),
                ("auto_explain.log_timing", "off"),
                ("auto_explain.log_buffers", "on"),
                ("auto_explain.log_level", "warning"),
            ):
                cluster.sql("postgres", f"ALTER DATABASE fair SET {name} = '{value}'")
        for rep, kind in ((r, k) for r in range(args.reps) for k in args.cells.split(",")):
            with cluster.connect("fair") as conn:
                fixtures.reset(conn)
                fixtures.settle(conn)
                overrides = json.dumps({"PLANNER_LOOKAHEAD": 30})
                procs = [
                    replica(
                        dsn,
                        logs / f"{rep}-{i}.log",
                        concurrency=args.concurrency,
                        overrides=overrides,
                    )
                    for i in range(2)
                ]
                try:
                    wait_ready(conn, procs, ("planner", "executor", "maintenance"))
                    if args.statements:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                        conn.execute("SELECT pg_stat_statements_reset()")
                    due = fixtures.db_now(conn).replace(microsecond=0) + timedelta(seconds=40)
                    cron = f"{due.second} {due.minute} {due.hour} * * *"
                    fixtures.add_cron_schedules(
                        conn, args.burst, cron=cron, next_fire_at=due, prefix="burst"
                    )
                    fixtures.add_interval_schedules(
                        conn, args.small, every_s=1, anchor=due - timedelta(seconds=5)
                    )
                    if kind == "tenants":
                        conn.execute(
                            "UPDATE pgsched_schedule SET tenant = CASE WHEN name LIKE 'burst-%%'"
                            " THEN 'a' ELSE 'b' END"
                        )
                    conn.execute("ANALYZE pgsched_schedule")
                    end = due + timedelta(seconds=args.window)
                    wait = (end - fixtures.db_now(conn)).total_seconds() + 5
                    time.sleep(max(0.0, wait))
                    deadline = time.monotonic() + 240
                    while time.monotonic() < deadline:  # until a's burst is done
                        row = conn.execute(
                            "SELECT count(*) FROM pgsched_job_run"
                            " WHERE schedule_name LIKE 'burst-%%' AND started_at IS NOT NULL"
                        ).fetchone()
                        if row and row[0] >= args.burst:
                            break
                        time.sleep(1.0)
                finally:
                    for proc in procs:
                        proc.stop()
                small = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE r.started_at < %(end)s),"
                    "       array_agg(extract(epoch FROM a.started_at - r.fire_after) * 1000)"
                    "  FROM pgsched_job_run r"
                    "  LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1"
                    " WHERE r.schedule_name LIKE 'sparse-%%' AND r.scheduled_for >= %(due)s"
                    "   AND r.scheduled_for < %(end)s",
                    {"due": due, "end": end},
                ).fetchone()
                burst = conn.execute(
                    "SELECT extract(epoch FROM max(a.started_at) - %(due)s), count(a.*)"
                    "  FROM pgsched_job_run r"
                    "  JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1"
                    " WHERE r.schedule_name LIKE 'burst-%%' AND r.scheduled_for = %(due)s",
                    {"due": due},
                ).fetchone()
                if args.statements:
                    top = conn.execute(
                        "SELECT calls, total_exec_time, mean_exec_time, rows,"
                        "       query"
                        "  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 10"
                    ).fetchall()
                    claim = conn.execute(  # the executor's passes and the fair pick
                        "SELECT sum(total_exec_time), sum(calls) FROM pg_stat_statements"
                        " WHERE query LIKE '%%outcome AS%%'"
                        "    OR query LIKE '%%visited (tenant, n)%%'"
                    ).fetchone()
                    assert claim is not None and burst is not None and small is not None
                    runs = int(burst[1]) + int(small[0])
                    claim_ms = float(claim[0] or 0) / max(runs, 1)
                    claim_cost[kind, rep] = claim_ms * 1000
                    print(
                        f"  the claim's statements: {claim_ms * 1000:.0f} µs of server time"
                        f" per run ({int(claim[1] or 0)} calls, {runs} runs)",
                        flush=True,
                    )
                    texts = logs / f"statements-{rep}-{kind}.sql"
                    texts.write_text("\n\n".join(f"-- #{i}\n{t[4]}" for i, t in enumerate(top)))
                    for i, (calls, total, mean, nrows, text) in enumerate(top):
                        words = " ".join(ln.split("--")[0] for ln in text.split("\n")).split()
                        print(
                            f"  #{i} {total / 1000:8.1f} s {calls:8d} calls {mean:8.2f} ms"
                            f" {nrows:9d} rows  {' '.join(words)[:160]}",
                            flush=True,
                        )
            assert small is not None and burst is not None
            late = sorted(float(x) for x in (small[2] or []) if x is not None)
            cell = {
                "cell": kind,
                "small_runs": int(small[0]),
                "small_started_in_window": int(small[1]),
                "small_p50_ms": percentile(late, 50) if late else None,
                "small_p99_ms": percentile(late, 99) if late else None,
                "burst_started": int(burst[1]),
                "burst_last_started_s": float(burst[0]) if burst[0] is not None else None,
                "load": machine.load(),
                "claim_server_us_per_run": claim_cost.get((kind, rep)),
            }
            cells.append(cell)
            print(
                f"rep {rep + 1} {kind}: b {cell['small_started_in_window']} of {cell['small_runs']}"
                f" started in the {args.window:g} s window, p50"
                f" {cell['small_p50_ms'] or float('nan'):.0f} ms, p99"
                f" {cell['small_p99_ms'] or float('nan'):.0f} ms; a's last of"
                f" {cell['burst_started']} started"
                f" {cell['burst_last_started_s'] or float('nan'):+.1f} s after T;"
                f" load {cell['load'][0]:.2f}",
                flush=True,
            )
        if explain_ms:
            shutil.copy(cluster.log, logs / "server.log")
    machine.write_results(args.out, args, {"fairness": cells})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
