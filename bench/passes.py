"""Runs per executor pass: the executor driven in-process on a deep queue of no-op runs.

A diagnostic, not a benchmark of record (``scripts/bench`` measures throughput
against its baselines). It shows how many runs each ``executor_pass`` statement
records, which is what the gathering of outcomes changes::

    python -m bench.passes --concurrency 8 --gather-ms 2    # as shipped
    python -m bench.passes --concurrency 8 --gather-ms 0    # without gathering

It starts its own private cluster (``bench/cluster.py``), never your server.
The loop is the runner's executor loop without the other loops: a pass, then
sleep until the executor asks for the next one or a job wakes it.
"""

from __future__ import annotations

import argparse
import os
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.passes", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0, help="measured window")
    parser.add_argument("--gather-ms", type=float, default=None, help="override GATHER_WINDOW")
    parser.add_argument("--runs", type=int, default=200_000, help="runs queued before the start")
    args = parser.parse_args(argv)

    from .cluster import private_cluster

    with private_cluster() as cluster:
        cluster.create_database("passes")
        os.environ["PGSCHED_BENCH_DSN"] = cluster.url("passes")
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.core.management import call_command

        from django_pgsched.engine import executor as executor_module

        from . import fixtures

        call_command("migrate", verbosity=0)
        if args.gather_ms is not None:
            executor_module.GATHER_WINDOW = args.gather_ms / 1000
        with cluster.connect("passes") as conn:
            fixtures.add_pending_runs(conn, args.runs, job="bench.noop")
            conn.execute("VACUUM ANALYZE pgsched_job_run")

        executor = executor_module.Executor(concurrency=args.concurrency, worker_id="passes")
        executor.start_threads()
        executor.run_once()  # opens and configures the session
        passes = recorded = 0
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
        from django.db import connections

        connections.close_all()
    print(
        f"concurrency {args.concurrency}, gather window "
        f"{executor_module.GATHER_WINDOW * 1000:g} ms: {recorded / elapsed:,.0f} runs/s, "
        f"{passes / elapsed:,.0f} passes/s, {recorded / max(passes, 1):.1f} runs recorded per pass"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
