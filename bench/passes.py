"""Runs per executor pass: the executor driven in-process on a deep queue of no-op runs.

A diagnostic, not a benchmark of record (``scripts/bench`` measures throughput
against its baselines). It shows how many runs each ``executor_pass`` statement
records, which is what the gathering of outcomes changes::

    python -m bench.passes --concurrency 8 --gather-ms 2    # as shipped
    python -m bench.passes --concurrency 8 --gather-ms 0    # without gathering
    python -m bench.passes --guarded-share 0.1   # 10 % with an overlap policy and a deadline

It also says where a pass's CPU goes: the replica's (its executor thread and
the slot threads) and the executor's database backend's (``/proc``), per
pass and per run: CPU, unlike the rate, hardly moves when other processes
share the machine. ``--cprofile FILE`` writes a cProfile of the window
(every thread); ``--perf FILE`` samples the executor's database backend with
``perf record`` over the window (``perf report -i FILE`` reads it; the server's
own functions, where its CPU per pass goes).

It starts its own private cluster (``bench/cluster.py``), never your server.
The loop is the runner's executor loop without the other loops: a pass, then
sleep until the executor asks for the next one or a job wakes it.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import subprocess
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.passes", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0, help="measured window")
    parser.add_argument("--gather-ms", type=float, default=None, help="override GATHER_WINDOW")
    parser.add_argument("--runs", type=int, default=200_000, help="runs queued before the start")
    parser.add_argument("--cprofile", default=None, help="write a cProfile of the window here")
    parser.add_argument(
        "--sql",
        action="append",
        default=[],
        help="run this SQL after the migrations (a what-if: a dropped index or constraint)",
    )
    parser.add_argument(
        "--perf", default=None, help="sample the backend with perf record into this file"
    )
    parser.add_argument(
        "--guarded-share",
        type=float,
        default=0.0,
        help="this share of the runs has an overlap policy (skip) and a start deadline",
    )
    args = parser.parse_args(argv)

    from .cluster import migrated_database, private_cluster

    with private_cluster() as cluster:
        migrated_database(cluster, "passes")
        from django_pgsched.engine import executor as executor_module

        from . import fixtures

        if args.gather_ms is not None:
            executor_module.GATHER_WINDOW = args.gather_ms / 1000
        with cluster.connect("passes") as conn:
            for statement in args.sql:
                conn.execute(statement)
            fixtures.add_pending_runs(conn, args.runs, job="bench.noop")
            if args.guarded_share:  # spread evenly through the claim's order
                every = max(1, round(1 / args.guarded_share))
                conn.execute(
                    "UPDATE pgsched_job_run SET overlap = 'skip',"
                    " start_by = now() + interval '1 day' WHERE id %% %s = 0",
                    [every],
                )
            conn.execute("VACUUM ANALYZE pgsched_job_run")

        executor = executor_module.Executor(concurrency=args.concurrency, worker_id="passes")
        executor.start_threads()
        executor.run_once()  # opens and configures the session
        with cluster.connect("passes") as conn:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgsched executor%'"
            ).fetchone()
        assert row is not None
        backend = int(row[0])
        profiler = cProfile.Profile() if args.cprofile else None
        passes = recorded = 0
        cpu, thread_cpu, server_cpu = time.process_time(), time.thread_time(), _cpu(backend)
        if profiler:
            profiler.enable()
        perf = None
        if args.perf:
            perf = subprocess.Popen(
                ["perf", "record", "-q", "-F", "1999", "-g", "-p", str(backend), "-o", args.perf],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)  # perf attaches
            cpu, thread_cpu, server_cpu = time.process_time(), time.thread_time(), _cpu(backend)
        started = time.perf_counter()
        while time.perf_counter() - started < args.seconds:
            executor.wake.clear()
            result = executor.run_once()
            if result.completed or result.claimed:
                passes += 1
                recorded += result.completed
            wait = executor.seconds_until_next_pass()
            if wait:
                executor.wake.wait(wait)
        elapsed = time.perf_counter() - started
        if perf is not None:
            perf.send_signal(2)  # SIGINT: perf writes its file and exits
            perf.wait(30)
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.cprofile)
        cpu = time.process_time() - cpu
        thread_cpu = time.thread_time() - thread_cpu
        server_cpu = _cpu(backend) - server_cpu
        from django.db import connections

        connections.close_all()
    print(
        f"concurrency {args.concurrency}, gather window "
        f"{executor_module.GATHER_WINDOW * 1000:g} ms: {recorded / elapsed:,.0f} runs/s, "
        f"{passes / elapsed:,.0f} passes/s, {recorded / max(passes, 1):.1f} runs recorded per pass"
    )
    per_pass, per_run = 1000 / max(passes, 1), 1e6 / max(recorded, 1)
    print(
        f"CPU per pass: replica {cpu * per_pass:.2f} ms (executor thread "
        f"{thread_cpu * per_pass:.2f}, slot threads {(cpu - thread_cpu) * per_pass:.2f}), "
        f"database backend {server_cpu * per_pass:.2f} ms; per run: replica "
        f"{cpu * per_run:.0f} us, database backend {server_cpu * per_run:.0f} us"
    )
    return 0


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
