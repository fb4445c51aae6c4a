"""Start lateness of two (or more) source trees, in alternation, on one private cluster.

A diagnostic for "is it the code or the machine?": each tree (a worktree of an
older commit, say) gets a database migrated by its own migrations; then, for
each repetition, each cell runs each tree's real ``runscheduler`` replicas one
after the other, in alternating order, so that the trees share the machine's
load. Compare ratios within a repetition, not absolute figures::

    git worktree add --detach /tmp/old 9f6f170
    python -m bench.paired --trees old=/tmp/old,new=. --cells sparse1s,plan,burst,race --reps 3

Cells (lateness is ``attempt.started_at - run.fire_after`` of attempt 1):

- ``sparse1s``: ``--n`` interval schedules every second (all due at the same
  instant), ``--replicas`` replicas, ``--seconds`` measured after a 5 s warm-up;
- ``plan``: two ``--loops planner`` replicas, ``--burst`` schedules due at T;
  how long their runs took to insert (first to last ``created_at``);
- ``burst``: two replicas (all loops, concurrency 16), ``--burst`` schedules
  due at T: when the last one started, when the last run was planned;
  ``--stale N`` first gives the run table statistics of N finished runs and
  none due (a steady day's, which autovacuum keeps until the burst);
- ``race``: the acceptance test's race (tests/acceptance/test_replicas.py):
  three replicas, ``--n`` every-second schedules of ``tests.witness`` with no
  ``next_fire_at`` yet, for ``--seconds``; lateness also split into the first
  two seconds after the replicas were up (``warm``) and the rest (``steady``).

Schedules are inserted with the columns every tree since November has, without
triggers. Prints one JSON line per (repetition, cell, tree) and appends it to
``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from . import fixtures, machine
from .cluster import private_cluster

Conn = psycopg.Connection[Any]

INSERT_CRON = """
    INSERT INTO pgsched_schedule (name, job, kwargs, cron, status, next_fire_at, misfire_policy,
           catch_up_limit, skipped_occurrences, source, last_error, updated_at)
    SELECT %(prefix)s || g, %(job)s, '{}', %(cron)s, 'active', %(next)s, %(policy)s, 10, 0,
           'database', '', now()
      FROM generate_series(1, %(n)s::int) g
"""
INSERT_INTERVAL = """
    INSERT INTO pgsched_schedule (name, job, kwargs, "interval", anchor, status, next_fire_at,
           misfire_policy, catch_up_limit, skipped_occurrences, source, last_error, updated_at)
    SELECT 'sparse-' || g, 'tests.noop', '{}', interval '1 second', %(a)s, 'active', %(a)s,
           'latest', 10, 0, 'database', '', now()
      FROM generate_series(1, %(n)s::int) g
"""
INSERT_HISTORY = """
    INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue, status,
           fire_after, attempts, max_attempts, timeout, note, started_at, finished_at, worker)
    SELECT date_trunc('second', now()) - g * interval '1 s', 'history:' || g, 'tests.noop', '{}',
           'default', 'succeeded', now(), 1, 3, interval '1 minute', '', now(), now(), 'w'
      FROM generate_series(1, %(n)s::int) g
"""


class Tree:
    def __init__(self, label: str, path: str, dsn: str, logs: Path) -> None:
        self.label, self.path, self.dsn, self.logs = label, str(Path(path).resolve()), dsn, logs

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "PGSCHED_BENCH_DSN": self.dsn,
            "PYTHONPATH": self.path,  # before the venv's editable install: this tree's code
            "PYTHONUNBUFFERED": "1",
        }
        for key in ("DATABASE_URL", "PGSCHED_TEST_OVERRIDES", "PGSCHED_BENCH_OVERRIDES"):
            env.pop(key, None)
        return env

    def migrate(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v", "0"],
            cwd=self.path,
            env=self.env(),
            check=True,
        )

    def replicas(self, n: int, concurrency: int, loops: str) -> list[subprocess.Popen[bytes]]:
        procs = []
        for i in range(n):
            log = (self.logs / f"{self.label}-{i}.log").open("ab")
            argv = [sys.executable, "-m", "django", "runscheduler", "--no-sync"]
            argv += ["--loops", loops, "--concurrency", str(concurrency)]
            argv += ["--worker-id", f"{self.label}-{i}"]
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=self.path,
                    env=self.env(),
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
        return procs


def wait_ready(conn: Conn, tree: Tree, n: int, roles: Sequence[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        names = [r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")]
        if all(
            any(x.startswith(f"pgsched {role} ") and x.endswith(f"{tree.label}-{i}") for x in names)
            for i in range(n)
            for role in roles
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{tree.label}: replicas not ready")


def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def now(conn: Conn) -> datetime:
    value: datetime = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
    return value


def insert(conn: Conn, sql: str, params: dict[str, Any]) -> None:
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # set-up: no triggers
        conn.execute(sql, params)


def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def lateness(conn: Conn, since: datetime, until: datetime) -> tuple[list[float], int]:
    rows = conn.execute(
        """
        SELECT extract(epoch FROM a.started_at - r.fire_after) * 1000
          FROM pgsched_job_run r
          LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1
         WHERE r.fire_after >= %s AND r.fire_after < %s AND r.schedule_id IS NOT NULL
        """,
        (since, until),
    ).fetchall()
    ms = [float(r[0]) for r in rows if r[0] is not None]
    return ms, len(rows) - len(ms)


def sparse1s(conn: Conn, tree: Tree, a: argparse.Namespace) -> dict[str, Any]:
    procs = tree.replicas(a.replicas, 8, "planner,executor,maintenance")
    try:
        wait_ready(conn, tree, a.replicas, ("planner", "executor"))
        time.sleep(1)
        anchor = now(conn).replace(microsecond=0) + timedelta(seconds=3)
        insert(conn, INSERT_INTERVAL, {"a": anchor, "n": a.n})
        since = anchor + timedelta(seconds=5)
        until = since + timedelta(seconds=a.seconds)
        time.sleep(max(0.0, (until - now(conn)).total_seconds()) + 2)
    finally:
        stop(procs)
    ms, missing = lateness(conn, since, until)
    return {"p50": pct(ms, 50), "p99": pct(ms, 99), "samples": len(ms), "missing": missing}


def _burst_schedules(conn: Conn, n: int) -> datetime:
    due = now(conn).replace(microsecond=0) + timedelta(seconds=8)
    cron = f"{due.second} {due.minute} {due.hour} * * *"
    params = {"prefix": "burst-", "job": "tests.noop", "cron": cron, "next": due}
    insert(conn, INSERT_CRON, {**params, "policy": "latest", "n": n})
    conn.execute("ANALYZE pgsched_schedule")
    return due


def _until(conn: Conn, sql: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and conn.execute(sql).fetchone()[0] < n:  # type: ignore[index]
        time.sleep(0.5)


def plan(conn: Conn, tree: Tree, a: argparse.Namespace) -> dict[str, Any]:
    procs = tree.replicas(2, 8, "planner")
    try:
        wait_ready(conn, tree, 2, ("planner",))
        time.sleep(1)
        due = _burst_schedules(conn, a.burst)
        _until(conn, "SELECT count(*) FROM pgsched_job_run", a.burst, a.timeout)
    finally:
        stop(procs)
    row = conn.execute(
        "SELECT count(*), extract(epoch FROM max(created_at) - min(created_at)),"
        " extract(epoch FROM max(created_at) - %s) FROM pgsched_job_run",
        (due,),
    ).fetchone()
    assert row is not None
    return {"runs": row[0], "plan_s": float(row[1] or 0), "planned_after_s": float(row[2] or 0)}


def burst(conn: Conn, tree: Tree, a: argparse.Namespace) -> dict[str, Any]:
    if a.stale:  # the months those runs fall in, where the tree's schema has partitions
        fixtures.ensure_months(conn, timedelta(seconds=a.stale + 60), timedelta(0))
        conn.execute(INSERT_HISTORY, {"n": a.stale})
        conn.execute("ANALYZE pgsched_job_run")
    procs = tree.replicas(2, 16, "planner,executor,maintenance")
    try:
        wait_ready(conn, tree, 2, ("planner", "executor"))
        time.sleep(1)
        due = _burst_schedules(conn, a.burst)
        _until(
            conn,
            "SELECT count(*) FROM pgsched_job_run"
            " WHERE started_at IS NOT NULL AND schedule_id IS NOT NULL",
            a.burst,
            a.timeout,
        )
    finally:
        stop(procs)
    ms, missing = lateness(conn, due, due + timedelta(seconds=1))
    row = conn.execute(
        "SELECT extract(epoch FROM max(created_at) - %s) FROM pgsched_job_run"
        " WHERE schedule_id IS NOT NULL",
        (due,),
    ).fetchone()
    assert row is not None
    return {
        "all_started_s": max(ms) / 1000 if ms and not missing and len(ms) == a.burst else None,
        "started": len(ms),
        "planned_after_s": float(row[0]) if row[0] is not None else None,
        "p50_ms": pct(ms, 50),
        "p99_ms": pct(ms, 99),
    }


def race(conn: Conn, tree: Tree, a: argparse.Namespace) -> dict[str, Any]:
    params = {"prefix": "race-", "job": "tests.witness", "cron": "* * * * * *", "next": None}
    insert(conn, INSERT_CRON, {**params, "policy": "skip", "n": a.n})
    procs = tree.replicas(3, 8, "planner,executor,maintenance")
    try:
        wait_ready(conn, tree, 3, ("planner", "executor"))
        ready = now(conn)
        time.sleep(a.seconds)
    finally:
        stop(procs)
    rows = conn.execute(
        """
        SELECT extract(epoch FROM a.started_at - r.fire_after) * 1000,
               extract(epoch FROM r.fire_after - %s)
          FROM pgsched_attempt a JOIN pgsched_job_run r ON r.id = a.job_run_id
         WHERE a.number = 1
        """,
        (ready,),
    ).fetchall()
    every = [float(r[0]) for r in rows]
    warm = [float(r[0]) for r in rows if r[1] < 2]
    steady = [float(r[0]) for r in rows if r[1] >= 2]
    return {
        "p50": pct(every, 50),
        "p99": pct(every, 99),
        "runs": len(every),
        "warm_p99": pct(warm, 99),
        "steady_p50": pct(steady, 50),
        "steady_p99": pct(steady, 99),
    }


CELLS: dict[str, Callable[[Conn, Tree, argparse.Namespace], dict[str, Any]]] = {
    "sparse1s": sparse1s,
    "plan": plan,
    "burst": burst,
    "race": race,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="label=path,label=path,...")
    ap.add_argument("--cells", default="sparse1s", help=",".join(CELLS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--n", type=int, default=200, help="schedules of sparse1s and race")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=1, help="replicas of sparse1s")
    ap.add_argument("--burst", type=int, default=30_000)
    ap.add_argument("--stale", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=200)
    ap.add_argument("--out", type=Path, default=Path("/tmp/pgsched-paired.jsonl"))
    a = ap.parse_args(argv)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"pgsched-paired-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    with private_cluster() as cluster:
        trees = []
        for spec in a.trees.split(","):
            label, path = spec.split("=", 1)
            cluster.create_database(f"paired_{label}")
            trees.append(Tree(label, path, cluster.url(f"paired_{label}"), logs))
            trees[-1].migrate()
        for rep in range(a.reps):
            for cell in a.cells.split(","):
                for tree in trees if rep % 2 == 0 else trees[::-1]:
                    with psycopg.connect(tree.dsn, autocommit=True) as conn:
                        conn.execute("TRUNCATE pgsched_job_run, pgsched_schedule CASCADE")
                        conn.execute("VACUUM ANALYZE pgsched_job_run")
                        conn.execute("VACUUM ANALYZE pgsched_schedule")
                        load = machine.load()[0]
                        result = CELLS[cell](conn, tree, a)
                    line = json.dumps(
                        {"rep": rep, "cell": cell, "tree": tree.label, "load": load, **result}
                    )
                    print(line, flush=True)
                    with a.out.open("a") as f:
                        f.write(line + "\n")
    print(f"replica logs: {logs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
