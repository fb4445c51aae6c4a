"""One replica at concurrency C against the same slots split over several processes.

A diagnostic for issue 9's "two claim lanes" idea: would a replica go faster if
its slots were divided between connections, so that one lane's Python and jobs
run while the other's ``executor_pass`` is in the database? Several replica
processes at ``C / N`` slots each are that idea without any new code (each has
its own connection and passes)::

    python -m bench.split --concurrency 8 --processes 2 --reps 3

Each cell queues due no-op runs, starts ``runscheduler --loops executor`` (one
process at C, or N at C / N), waits for the first completion and 3 s more, and
counts completions over ``--seconds`` by the database's ``finished_at``. Cells
alternate within each repetition. A private cluster (``bench/cluster.py``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.split", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=120_000)
    args = parser.parse_args(argv)
    if args.concurrency % args.processes:
        parser.error("--concurrency must be a multiple of --processes")

    from . import fixtures
    from .cluster import migrated_database, private_cluster
    from .procs import replica

    logs = Path(tempfile.mkdtemp(prefix="pgsched-split-"))
    with private_cluster() as cluster:
        dsn = migrated_database(cluster, "split")

        def cell(processes: int) -> float:
            with cluster.connect("split") as conn:
                conn.execute("TRUNCATE pgsched_job_run CASCADE")
                fixtures.add_pending_runs(conn, args.runs, job="bench.noop")
                conn.execute("VACUUM ANALYZE pgsched_job_run")
                procs = [
                    replica(
                        dsn,
                        logs / f"{processes}-{i}.log",
                        loops="executor",
                        concurrency=args.concurrency // processes,
                    )
                    for i in range(processes)
                ]
                try:
                    finished = (
                        "SELECT EXISTS (SELECT FROM pgsched_job_run WHERE finished_at IS NOT NULL)"
                    )
                    while not conn.execute(finished).fetchone()[0]:  # type: ignore[index]
                        time.sleep(0.2)
                    time.sleep(3)
                    start = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
                    time.sleep(args.seconds)
                    end = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
                    done = conn.execute(
                        "SELECT count(*) FROM pgsched_job_run"
                        " WHERE finished_at >= %s AND finished_at < %s",
                        (start, end),
                    ).fetchone()[0]  # type: ignore[index]
                finally:
                    for proc in procs:
                        proc.stop()
                return float(done) / (end - start).total_seconds()

        for rep in range(1, args.reps + 1):
            rates = {n: cell(n) for n in (1, args.processes)}
            print(
                f"rep {rep}: 1 process at concurrency {args.concurrency}: {rates[1]:,.0f} runs/s; "
                f"{args.processes} processes at {args.concurrency // args.processes}: "
                f"{rates[args.processes]:,.0f} runs/s "
                f"({rates[args.processes] / rates[1]:.2f}x); load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
