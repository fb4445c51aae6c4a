"""The planner measured the shipped way, on a server you name (not the bench's private cluster).

``scripts/bench`` measures the planner with ``Planner().run_once()`` in a loop
on a private cluster with pinned settings, against a raw loop on the same
migrated schema. This measures it as a deployment runs it:

- two (``--replicas``) real ``manage.py runscheduler --loops planner`` processes
  with the default settings, started well before the boundary;
- ``--schedules`` (100,000) cron schedules ``* * * * *`` whose next occurrence
  is the same minute boundary T, inserted with one statement;
- on the server of ``--pgurl`` (default: the machine's PostgreSQL at
  127.0.0.1:5432, with whatever configuration it has), in a database of its own;
- timed from the first run of T to the last (their ``created_at``: the start of
  the planner transaction that inserted them), and to the moment the last one
  was seen committed (polled every 20 ms).

With ``--raw-anchor PATH`` it then runs that raw-SQL planner script (for
example ``raw_sql_limit.py --planner-only``, two connections, its own minimal
schema) on the same server and prints both::

    python -m bench.shipped_planner --raw-anchor /path/to/raw_sql_limit.py

``--notify-trigger off`` drops the statement-level NOTIFY trigger on schedule
updates first (a diagnostic: how much of the planner's time it costs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from . import fixtures
from .procs import ROOT, Proc, django_env, replica

DB = "bench_shipped_planner"


def _database(pgurl: str) -> str:
    with psycopg.connect(pgurl + "/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    dsn = f"{pgurl}/{DB}"
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v0"],
        cwd=ROOT,
        env=django_env(dsn),
        check=True,
    )
    return dsn


def ours(
    pgurl: str, schedules: int, replicas: int, notify_trigger: bool, logs: Path
) -> dict[str, Any]:
    dsn = _database(pgurl)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not notify_trigger:
            conn.execute("DROP TRIGGER pgsched_schedule_notify_update ON pgsched_schedule")
        now = fixtures.db_now(conn)
        boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        if boundary - now < timedelta(seconds=40):
            boundary += timedelta(minutes=1)
        fixtures.add_cron_schedules(conn, schedules, cron="* * * * *", next_fire_at=boundary)
        conn.execute("VACUUM ANALYZE pgsched_schedule")
        procs: list[Proc] = [
            replica(
                dsn, logs / f"shipped-planner-{i}.log", loops="planner", worker_id=f"planner-{i}"
            )
            for i in range(replicas)
        ]
        try:
            seen_all = None
            deadline = time.monotonic() + (boundary - fixtures.db_now(conn)).total_seconds() + 120
            while time.monotonic() < deadline:
                (count,) = conn.execute(
                    "SELECT count(*) FROM pgsched_job_run WHERE scheduled_for = %s", [boundary]
                ).fetchone()  # type: ignore[misc]
                if count >= schedules:
                    seen_all = fixtures.db_now(conn)
                    break
                time.sleep(0.02)
            row = conn.execute(
                "SELECT min(created_at), max(created_at), count(*),"
                " count(DISTINCT schedule_id) FROM pgsched_job_run WHERE scheduled_for = %s",
                [boundary],
            ).fetchone()
            assert row is not None
            first, last, count, distinct = row
            replica_cpu = [proc.cpu_seconds() for proc in procs]
            backends = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgsched planner %'"
            ).fetchall()
            backend_cpu = [_cpu(int(pid)) for (pid,) in backends]
        finally:
            for proc in procs:
                proc.stop()
    span = (last - first).total_seconds()
    to_seen = (seen_all - first).total_seconds() if seen_all else float("nan")
    return {
        "runs": count,
        "distinct_schedules": distinct,
        "first_to_last_created_s": span,
        "first_created_to_all_seen_s": to_seen,
        "rate_created": count / span if span else float("nan"),
        "rate_seen": count / to_seen if to_seen else float("nan"),
        "planned_before_boundary_s": (boundary - last).total_seconds(),
        "notify_trigger": notify_trigger,
        # CPU seconds over the replicas' whole lives (mostly the planning), and their backends'
        "replica_cpu_s": replica_cpu,
        "backend_cpu_s": backend_cpu,
    }


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_anchor(path: str, pgurl: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, path, "--planner-only"],
        env={**os.environ, "PGURL": pgurl},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"(\d+) runs materialised in ([\d.]+)s = (\d+) runs/s", out)
    if not match:
        raise RuntimeError(f"unexpected output of {path}: {out!r}")
    return {"runs": int(match[1]), "seconds": float(match[2]), "rate": float(match[3])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shipped_planner", description=__doc__)
    parser.add_argument(
        "--pgurl", default=os.environ.get("PGURL", "postgresql://postgres@127.0.0.1")
    )
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--raw-anchor", default=None)
    parser.add_argument("--notify-trigger", choices=("on", "off"), default="on")
    parser.add_argument("--logs", default="/tmp")
    args = parser.parse_args(argv)
    logs = Path(args.logs)
    result: dict[str, Any] = {
        "ours": ours(args.pgurl, args.schedules, args.replicas, args.notify_trigger == "on", logs)
    }
    if args.raw_anchor:
        result["raw"] = raw_anchor(args.raw_anchor, args.pgurl)
        for key in ("rate_created", "rate_seen"):
            result[f"ratio_{key}"] = result["ours"][key] / result["raw"]["rate"]
    with psycopg.connect(args.pgurl + "/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
