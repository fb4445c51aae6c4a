"""What one django.tasks ``enqueue()`` costs, part by part, beside django-tasks-db's.

``python -m bench.enqueue_cost [--count N] [--out FILE]`` (the bench's private
cluster and the django-tasks-db venv of ``scripts/bench``) measures, in one run:

* **framework**: N ``task.enqueue()`` calls through each backend from one
  thread and from 8 (the producer of ``bench/b_tasks.py``): latency, rate, the
  producer's CPU per call, and the server's execution time of each statement
  (``pg_stat_statements``, which counts neither the commit nor the network);
  with ``--before DIR``, also through the backend of another source tree
  (same database, same run);
* **statement**: our ``task_enqueue`` sent with psycopg in an explicit
  transaction, the statement and the ``COMMIT`` timed apart, as shipped and
  without each of its parts (the idempotency-key trigger, the NOTIFY), beside
  django-tasks-db's INSERT, from 1 and 8 connections, variants interleaved;
* **trigger**: the key trigger's time as ``EXPLAIN ANALYZE`` reports it.

Prints a table; ``--out`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from django_pgsched.engine import queries

from .cluster import private_cluster
from .context import Context
from .procs import Proc, django_env
from .profiles import QUICK

DTDB_DB = "peer_dtdb"
THREADS = (1, 8)

PARAMS = {
    "job": "bench.benchapp.tasks.noop",
    "kwargs": "{}",
    "call": '{"args": [1], "backend": "default", "run_after": null, "priority": 0}',
    "queue": "default",
    "priority": 0,
    "run_after": None,
    "max_attempts": 1,
    "timeout": "1 hour",
}
DTDB_INSERT = (
    "INSERT INTO django_tasks_database_dbtaskresult (id, status, enqueued_at, started_at,"
    " finished_at, args_kwargs, priority, task_path, worker_ids, queue_name, backend_name,"
    " run_after, return_value, exception_class_path, traceback) VALUES (%s, 'READY', now(),"
    " NULL, NULL, '{\"args\": [1], \"kwargs\": {}}', 0, 'bench.peers.dtdb_tasks.noop', '[]',"
    " 'default', 'default', now(), 'null', '', '')"
)


def _ours_sql(notify: bool) -> str:
    """``task_enqueue``; with ``notify``, the NOTIFY in the statement (as it was before)."""
    sql = queries.TASK_ENQUEUE.sql
    if notify:
        tail = "SELECT id, created_at FROM inserted"
        assert tail in sql
        sql = sql.replace(
            tail, "SELECT id, created_at, pg_notify('pgsched_wait', id::text) FROM inserted"
        )
    return sql


def _statements(ctx: Context, db: str) -> dict[str, dict[str, float]]:
    with ctx.connect(db) as conn:
        rows = conn.execute(
            "SELECT query, calls, mean_exec_time FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s AND calls >= 100"
            " ORDER BY total_exec_time DESC LIMIT 5",
            [db],
        ).fetchall()
    return {" ".join(q.split())[:90]: {"calls": c, "mean_ms": m} for q, c, m in rows}


def _reset_statements(ctx: Context) -> None:
    with ctx.connect() as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def framework(
    ctx: Context, system: str, count: int, threads: int, before: Path | None = None
) -> dict[str, Any]:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    if system in ("ours", "before"):
        # -P: the tree on PYTHONPATH, not the working directory, is imported
        argv = [sys.executable, "-P", "-m", "bench.producers", "ours", ctx.dsn, str(count),
                str(threads), str(out)]  # fmt: skip
        env = django_env(ctx.dsn, **({"PYTHONPATH": str(before)} if system == "before" else {}))
        proc = Proc(argv, env=env, log=ctx.log(f"{system}-producer"))
    else:
        proc = ctx.peer_proc(
            "dtdb", "dtdb_peer", "produce", str(count), str(threads), str(out), db=DTDB_DB
        )
    _reset_statements(ctx)
    if proc.popen.wait() != 0:
        raise RuntimeError(f"the {system} producer failed; see {proc.log}")
    proc.stop()
    result: dict[str, Any] = json.loads(out.read_text())
    result["server"] = _statements(ctx, DTDB_DB if system == "dtdb" else "bench")
    return result


def _one(conn: psycopg.Connection[Any], sql: str, params: Any, after: bool) -> tuple[float, float]:
    cur = psycopg.ClientCursor(conn)  # Django's binding: client-side, no prepared statement
    t0 = time.perf_counter()
    cur.execute(sql, params)
    rows = cur.fetchall() if cur.description else []
    t1 = time.perf_counter()
    conn.commit()
    if after:  # the wake-up once committed, in a transaction of its own (no xid, no WAL)
        cur.execute("SELECT pg_notify('pgsched_wait', %s)", [str(rows[0][0])])
        conn.commit()
    return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000


def statement(ctx: Context, variant: str, count: int, threads: int) -> dict[str, float | None]:
    db = DTDB_DB if variant == "dtdb" else "bench"
    with ctx.connect(db) as conn:
        conn.autocommit = True
        if variant != "dtdb":
            state = "DISABLE" if variant == "no key trigger" else "ENABLE"
            conn.execute(f"ALTER TABLE pgsched_job_run {state} TRIGGER pgsched_run_key_unique")
    # the NOTIFY as the statement's last column (before), or after the commit (now)
    after = variant in ("notify after commit", "no key trigger")
    sql = DTDB_INSERT if variant == "dtdb" else _ours_sql(variant == "notify in the insert")
    times: list[list[tuple[float, float]]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def work(index: int) -> None:
        with ctx.connect(db) as conn:
            conn.autocommit = False  # the statement and the COMMIT timed apart
            barrier.wait()
            for _ in range(count // threads):
                params = [str(uuid.uuid4())] if variant == "dtdb" else PARAMS
                times[index].append(_one(conn, sql, params, after))

    t0 = time.perf_counter()
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    seconds = time.perf_counter() - t0
    every = [t for ts in times for t in ts]
    return {
        "rate": len(every) / seconds,
        "statement_ms": statistics.median(s for s, _ in every),
        "commit_ms": statistics.median(c for _, c in every),  # with the NOTIFY after it
        "commit_p90_ms": sorted(c for _, c in every)[int(0.9 * len(every))],
    }


def trigger_time(ctx: Context, samples: int = 200) -> dict[str, float]:
    """The key trigger's and the whole insert's execution time, by EXPLAIN ANALYZE."""
    trig, total = [], []
    with ctx.connect() as conn:
        conn.autocommit = True
        conn.execute("ALTER TABLE pgsched_job_run ENABLE TRIGGER pgsched_run_key_unique")
        cur = psycopg.ClientCursor(conn)
        for _ in range(samples):
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _ours_sql(False), PARAMS)
            plan = cur.fetchone()[0][0]  # type: ignore[index]
            total.append(plan["Execution Time"])
            trig += [
                t["Time"] for t in plan.get("Triggers", []) if "key_unique" in t["Trigger Name"]
            ]
    return {
        "insert_ms": statistics.median(total),
        "key_trigger_ms": statistics.median(trig) if trig else 0.0,
    }


VARIANTS = ("notify in the insert", "notify after commit", "no key trigger", "no notify", "dtdb")


def _listen(ctx: Context, stop: threading.Event) -> None:
    """An executor's listener: LISTEN on the wake-up channel and read what arrives."""
    with ctx.connect() as conn:
        conn.execute("LISTEN pgsched_wait")
        while not stop.is_set():
            for _ in conn.notifies(timeout=0.2):
                pass


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/pgsched-bench")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--skip-framework", action="store_true")
    parser.add_argument(
        "--before",
        type=Path,
        help="another source tree (e.g. `git archive main`) whose producer is measured too",
    )
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="enqueue-cost-"))
    report: dict[str, Any] = {"framework": {}, "statement": {}}
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=args.cache / "venvs")
        ctx.migrate_template()
        ctx.fresh_database()
        cluster.create_database(DTDB_DB)
        ctx.peer_run("dtdb", "dtdb_peer", "setup", db=DTDB_DB)
        with ctx.connect(DTDB_DB) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for rnd in range(args.rounds):
            # an idle replica's listener, as in production: a NOTIFY signals it
            stop = threading.Event()
            listener = threading.Thread(target=_listen, args=(ctx, stop))
            listener.start()
            for threads in () if args.skip_framework else THREADS:
                for system in ("ours", "dtdb", *(("before",) if args.before else ())):
                    r = framework(ctx, system, args.count, threads, args.before)
                    report["framework"].setdefault(f"{system} x{threads}", []).append(r)
                    ctx.say(
                        f"round {rnd + 1} framework {system} x{threads}: {r['rate']:.0f}/s "
                        f"p50 {r['latencies_ms']['p50']:.2f} ms cpu {r['cpu_ms']:.3f} ms "
                        f"server {json.dumps(r['server'])}"
                    )
            for threads in THREADS:
                for variant in VARIANTS:
                    s = statement(ctx, variant, args.count, threads)
                    report["statement"].setdefault(f"{variant} x{threads}", []).append(s)
                    ctx.say(f"round {rnd + 1} statement {variant} x{threads}: {s}")
            stop.set()
            listener.join()
        report["trigger"] = trigger_time(ctx)
        ctx.say(f"EXPLAIN ANALYZE: {report['trigger']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
