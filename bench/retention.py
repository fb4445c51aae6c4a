"""Retention of a month of runs: detach + drop against the batched DELETE it replaced.

``python -m bench.retention [RUNS] [--batch 1000]``: a private cluster, one
month (three months back) of ``RUNS`` finished runs with an attempt each, and
the same month removed twice, from the same state (frozen, analyzed, after a
checkpoint):

- ``delete``: the old retention, ``BATCHED_DELETE`` in batches of
  ``RETENTION_BATCH`` rows until none is left (each run's attempt goes with it),
  and then the ``VACUUM`` of the month that a DELETE makes necessary;
- ``detach``: the retention of now (``MonthRetention``): ``DETACH PARTITION
  ... CONCURRENTLY`` of the runs and of the attempts, and ``DROP TABLE``.

For each: wall time and WAL bytes (``pg_current_wal_lsn()`` before and after:
the cluster is private, so nothing else writes). Results go to
``bench/results/<UTC timestamp>-retention.json``. Times depend on the machine's
load; WAL bytes do not.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import machine
from .cluster import private_cluster
from .context import Context, wal_lsn
from .profiles import QUICK

# The batched DELETE retention used to run (the baseline that detaching a month replaces):
# Delete one bounded batch of terminal runs older than the cutoff; their
# attempts go with them (ON DELETE CASCADE). The scan walks
# pgsched_run_recent_idx (scheduled_for, id) from the oldest run, so there is
# no index on finished_at to update at every completion: a run goes once both
# its scheduled time and its finish are before the cutoff. A run scheduled
# long ago but finished recently (or not finished) is skipped, and kept until
# a later pass finds it finished before the cutoff.
BATCHED_DELETE = """
WITH doomed AS MATERIALIZED (
    SELECT id
      FROM pgsched_job_run
     WHERE scheduled_for < %(cutoff)s
       AND finished_at < %(cutoff)s
       AND status IN ('succeeded', 'failed', 'cancelled', 'missed')
     ORDER BY scheduled_for, id
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM pgsched_job_run r
 USING doomed d
 WHERE r.id = d.id;
"""

RESULTS = Path(__file__).parent / "results"

# One schedule's occurrences (its runs carry the keys the planner derives from them).
FILL = """
SELECT pgsched_ensure_months(ARRAY[%(start)s::timestamptz]);
INSERT INTO pgsched_schedule (name, job, cron, updated_at)
VALUES ('bench-month', 'tests.noop', '* * * * *', now())
    ON CONFLICT (name) DO NOTHING;
INSERT INTO pgsched_job_run (schedule_id, schedule_name, scheduled_for, idempotency_key, job,
       queue, status, fire_after, attempts, max_attempts, timeout, started_at, finished_at,
       worker, tenant)
SELECT s.id, s.name, t,
       'pgsched:' || s.id || ':' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       'tests.noop', 'default', 'succeeded', t, 1, 3,
       interval '30 seconds', t, t + interval '1 second', 'w', 'tenant-' || (g %% 50)
  FROM pgsched_schedule s, generate_series(1, %(n)s) g,
       LATERAL (SELECT %(start)s::timestamptz
                       + (g::bigint * %(step)s) * interval '1 microsecond') AS c(t0),
       LATERAL (SELECT date_trunc('second', t0)) AS d(t)
 WHERE s.name = 'bench-month';
INSERT INTO pgsched_attempt (job_run_id, run_scheduled_for, number, status, started_at,
       finished_at, worker)
SELECT id, scheduled_for, 1, 'succeeded', started_at, finished_at, worker
  FROM pgsched_job_run WHERE scheduled_for >= %(start)s AND scheduled_for < %(end)s;
"""


def fill(conn: Any, start: datetime, end: datetime, runs: int) -> None:
    step = int((end - start).total_seconds() * 1_000_000 / (runs + 1))
    for statement in FILL.strip().split(";\n"):
        conn.execute(statement, {"start": start, "end": end, "n": runs, "step": step})
    conn.execute("VACUUM (FREEZE, ANALYZE) pgsched_job_run, pgsched_attempt")
    conn.execute("CHECKPOINT")


def measure(conn: Any, work: Any) -> dict[str, float]:
    before, started = wal_lsn(conn), time.perf_counter()
    extra = work()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 3), "wal_bytes": wal_lsn(conn) - before, **(extra or {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    parser.add_argument("runs", type=int, nargs="?", default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000, help="RETENTION_BATCH of the DELETE")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="pgsched-retention-"))
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=logs)
        ctx.migrate_template()
        ctx.fresh_database()
        os.environ["PGSCHED_BENCH_DSN"] = ctx.dsn
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.db import connection

        from django_pgsched.conf import get_settings
        from django_pgsched.partitions.months import add_months, month_start
        from django_pgsched.partitions.retention import MonthRetention

        with ctx.connect() as conn:
            conn.autocommit = True
            now = conn.execute("SELECT statement_timestamp()").fetchone()[0]
            start = add_months(month_start(now), -3)
            end = add_months(start, 1)
            cutoff = now - timedelta(days=30)
            result: dict[str, Any] = {
                "runs": args.runs,
                "attempts": args.runs,
                "month": f"{start:%Y-%m}",
                "load_before": machine.load()[0],
            }

            ctx.say(f"filling {start:%Y-%m} with {args.runs:,} runs and attempts")
            fill(conn, start, end, args.runs)
            size = conn.execute(
                "SELECT pg_total_relation_size(%s) + pg_total_relation_size(%s)",
                [f"pgsched_job_run_p{start:%Y%m}", f"pgsched_attempt_p{start:%Y%m}"],
            ).fetchone()[0]
            result["month_bytes"] = size

            def delete_in_batches() -> dict[str, int]:
                statements = 0
                while True:
                    count = conn.execute(
                        BATCHED_DELETE, {"cutoff": cutoff, "batch": args.batch}
                    ).rowcount
                    statements += 1
                    if count < args.batch:
                        return {"statements": statements}

            ctx.say("batched DELETE")
            result["delete"] = measure(conn, delete_in_batches)
            ctx.say(f"  {result['delete']}")

            def vacuum() -> None:
                conn.execute(f"VACUUM pgsched_job_run_p{start:%Y%m}, pgsched_attempt_p{start:%Y%m}")

            result["delete_vacuum"] = measure(conn, vacuum)
            ctx.say(f"  then VACUUM: {result['delete_vacuum']}")

            ctx.say("the same month again, then detach + drop")
            fill(conn, start, end, args.runs)
            retention = MonthRetention(settings=get_settings(), max_months=1)

            def detach_and_drop() -> dict[str, int]:
                months = retention.run_once(connection, now)
                assert months.dropped == [start], months
                return {"runs_dropped": months.runs}

            result["detach"] = measure(conn, detach_and_drop)
            ctx.say(f"  {result['detach']}")
            result["load_after"] = machine.load()[0]
            result["wal_ratio"] = round(
                result["delete"]["wal_bytes"] / max(1, result["detach"]["wal_bytes"]), 1
            )
            result["wal_ratio_with_vacuum"] = round(
                (result["delete"]["wal_bytes"] + result["delete_vacuum"]["wal_bytes"])
                / max(1, result["detach"]["wal_bytes"]),
                1,
            )
            result["time_ratio"] = round(
                result["delete"]["seconds"] / max(1e-6, result["detach"]["seconds"]), 1
            )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{stamp}-retention.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
