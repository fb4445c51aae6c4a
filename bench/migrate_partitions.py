"""How long migration 0019 (monthly partitions) locks the run history it copies.

``python -m bench.migrate_partitions [RUNS] [--months 12]``: a private cluster,
the schema of migration 0018 (one table of runs, one of attempts), ``RUNS``
finished runs spread over ``--months`` months with an attempt each, then
``migrate pgsched 0019``: its one transaction holds ACCESS EXCLUSIVE on both
tables from start to end, so its wall time is how long nothing can read or
write runs. Results go to ``bench/results/<UTC timestamp>-migrate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import machine
from .cluster import private_cluster
from .context import Context
from .profiles import QUICK

RESULTS = Path(__file__).parent / "results"

FILL = """
INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, queue, status, fire_after,
       attempts, max_attempts, timeout, started_at, finished_at, worker, tenant)
SELECT t, 'bench:' || g, 'tests.noop', 'default', 'succeeded', t, 1, 3,
       interval '30 seconds', t, t + interval '1 second', 'w', 'tenant-' || (g %% 50)
  FROM generate_series(1, %(n)s) g,
       LATERAL (SELECT date_trunc('second', statement_timestamp() - %(span)s * interval '1 day'
                       + (g::bigint * %(step)s) * interval '1 microsecond')) AS c(t);
INSERT INTO pgsched_attempt (job_run_id, number, status, started_at, finished_at, worker)
SELECT id, 1, 'succeeded', started_at, finished_at, worker FROM pgsched_job_run;
VACUUM (FREEZE, ANALYZE) pgsched_job_run, pgsched_attempt;
CHECKPOINT
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.migrate_partitions", description=__doc__)
    parser.add_argument("runs", type=int, nargs="?", default=1_000_000)
    parser.add_argument("--months", type=int, default=12)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="pgsched-migrate-"))
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=logs)
        ctx.migrate_template()
        ctx.fresh_database()
        os.environ["PGSCHED_BENCH_DSN"] = ctx.dsn
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.core.management import call_command

        result: dict[str, Any] = {"runs": args.runs, "months": args.months}
        ctx.say("back to 0018 (one table of runs)")
        call_command("migrate", "pgsched", "0018", verbosity=0)
        span_days = args.months * 30
        with ctx.connect() as conn:
            conn.autocommit = True
            ctx.say(f"filling {args.runs:,} runs and attempts over {args.months} months")
            step = int(span_days * 86400 * 1_000_000 / (args.runs + 1))
            for statement in FILL.strip().split(";\n"):
                conn.execute(statement, {"n": args.runs, "span": span_days, "step": step})
            result["bytes_before"] = conn.execute(
                "SELECT pg_total_relation_size('pgsched_job_run')"
                " + pg_total_relation_size('pgsched_attempt')"
            ).fetchone()[0]
        result["load_before"] = machine.load()[0]
        ctx.say("migrate pgsched 0019 (the lock is held throughout)")
        started = time.perf_counter()
        call_command("migrate", "pgsched", "0019", verbosity=0)
        result["forward_seconds"] = round(time.perf_counter() - started, 1)
        ctx.say(f"  {result['forward_seconds']} s")
        with ctx.connect() as conn:
            result["partitions"] = conn.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgsched_job_run'::regclass"
            ).fetchone()[0]
            result["rows_after"] = conn.execute("SELECT count(*) FROM pgsched_job_run").fetchone()[
                0
            ]
        result["load_after"] = machine.load()[0]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{stamp}-migrate.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
