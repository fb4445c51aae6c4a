"""Executor throughput: no-op runs per second, beside the raw-SQL limit and the peers.

Each cell starts from a queue of due no-op jobs (sized from the cell's expected
rate so that it never drains), VACUUM ANALYZE and CHECKPOINT, then starts one
worker process: a real ``runscheduler --loops executor --concurrency C``, the
raw loop (``bench.raw``) at batch B, or a peer's worker. After its first
completion and a warm-up, completions are counted over a window **from the
database**: ``finished_at`` of our runs, pgqueuer's ``pgqueuer_log``,
procrastinate's ``procrastinate_events``, django-tasks-db's ``finished_at``.
The worker's CPU (``/proc``), the server's CPU and the WAL written per job are
recorded alongside. Cells run interleaved within a repetition, so each ratio
is of two cells measured a minute apart.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now, server_cpu_seconds, wait_until, wal_lsn
from .machine import load
from .procs import Proc, django_env, replica
from .stats import ratios, summary


@dataclass(frozen=True)
class Peer:
    venv: str
    module: str
    db: str
    reset: str
    done: str  # completions between %s and %s, by the database's timestamps
    any_done: str
    pending: str


PEERS = {
    "pgqueuer": Peer(
        "pgqueuer",
        "pgqueuer_peer",
        "peer_pgqueuer",
        "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics",
        "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        " AND created >= %s AND created < %s",
        "SELECT EXISTS (SELECT 1 FROM pgqueuer_log WHERE status = 'successful')",
        "SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'queued')",
    ),
    "procrastinate": Peer(
        "procrastinate",
        "procrastinate_peer",
        "peer_procrastinate",
        "TRUNCATE procrastinate_jobs CASCADE",
        "SELECT count(*) FROM procrastinate_events WHERE type = 'succeeded'"
        " AND at >= %s AND at < %s",
        "SELECT EXISTS (SELECT 1 FROM procrastinate_events WHERE type = 'succeeded')",
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status = 'todo')",
    ),
    "django-tasks-db": Peer(
        "dtdb",
        "dtdb_peer",
        "peer_dtdb",
        "TRUNCATE django_tasks_database_dbtaskresult",
        "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status = 'SUCCESSFUL'"
        " AND finished_at >= %s AND finished_at < %s",
        "SELECT EXISTS (SELECT 1 FROM django_tasks_database_dbtaskresult"
        " WHERE status = 'SUCCESSFUL')",
        "SELECT EXISTS (SELECT 1 FROM django_tasks_database_dbtaskresult WHERE status = 'READY')",
    ),
}
OURS_DONE = "SELECT count(*) FROM pgsched_job_run WHERE finished_at >= %s AND finished_at < %s"
OURS_ANY = "SELECT EXISTS (SELECT 1 FROM pgsched_job_run WHERE finished_at IS NOT NULL)"
OURS_PENDING = "SELECT EXISTS (SELECT 1 FROM pgsched_job_run WHERE status = 'pending')"


@dataclass
class Cell:
    key: str
    label: str
    system: str  # ours, raw, or a key of PEERS
    size: int  # concurrency (ours, procrastinate) or batch (raw, pgqueuer)
    estimate: float  # jobs/s, to size the queue; raised when a cell comes close


def cells(ctx: Context) -> list[Cell]:
    p = ctx.profile
    out: list[Cell] = []
    raw = {
        b: Cell(f"raw_b{b}", f"raw SQL, batch {b}", "raw", b, 500 + 80 * b) for b in p.raw_batches
    }
    for c in p.exec_concurrency:
        if c in raw:
            out.append(raw.pop(c))
        out.append(Cell(f"ours_c{c}", f"django-pgsched, concurrency {c}", "ours", c, 400 + 60 * c))
    out += raw.values()
    for b in p.pgqueuer_batches:
        out.append(Cell(f"pgqueuer_b{b}", f"pgqueuer, batch {b}", "pgqueuer", b, 1500 + 40 * b))
    c = p.procrastinate_concurrency
    out.append(
        Cell(f"procrastinate_c{c}", f"procrastinate, concurrency {c}", "procrastinate", c, 400)
    )
    out.append(Cell("dtdb", "django-tasks-db db_worker", "django-tasks-db", 1, 300))
    return out


def setup_peers(ctx: Context) -> None:
    for peer in PEERS.values():
        ctx.cluster.create_database(peer.db)
        ctx.peer_run(peer.venv, peer.module, "setup", db=peer.db)


def _start(ctx: Context, cell: Cell) -> Proc:
    if cell.system == "ours":
        return replica(ctx.dsn, ctx.log(cell.key), loops="executor", concurrency=cell.size)
    if cell.system == "raw":
        argv = [sys.executable, "-m", "bench.raw", "executor", ctx.dsn, "--batch", str(cell.size)]
        return Proc(argv, env=django_env(ctx.dsn), log=ctx.log(cell.key))
    peer = PEERS[cell.system]
    args = [] if cell.system == "django-tasks-db" else [str(cell.size)]
    return ctx.peer_proc(peer.venv, peer.module, "work", *args, db=peer.db)


def _fill(ctx: Context, cell: Cell, count: int) -> str:
    """Queue ``count`` jobs for the cell; return its database."""
    if cell.system in ("ours", "raw"):
        with ctx.connect() as conn:
            fixtures.reset(conn)
            fixtures.add_pending_runs(conn, count)
            fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
        return "bench"
    peer = PEERS[cell.system]
    with ctx.connect(peer.db) as conn:
        conn.execute(peer.reset)
    ctx.peer_run(peer.venv, peer.module, "fill", str(count), db=peer.db)
    with ctx.connect(peer.db) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    return peer.db


def measure(
    ctx: Context,
    proc: Proc,
    conn: psycopg.Connection[Any],
    *,
    done: str,
    any_done: str,
    pending: str,
    warm: float,
    window: float,
) -> dict[str, Any]:
    """Wait for the first completion and ``warm`` seconds, then count over ``window``."""

    def first() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{' '.join(proc.argv)} exited early; see {proc.log}")
        return bool(conn.execute(any_done).fetchone()[0])  # type: ignore[index]

    startup = wait_until(first, timeout=90, what="the first completion")
    time.sleep(warm)
    t0, wal0 = db_now(conn), wal_lsn(conn)
    cpu0, server0 = proc.cpu_seconds(), server_cpu_seconds(ctx.cluster)
    time.sleep(window)
    t1, wal1 = db_now(conn), wal_lsn(conn)
    cpu1, server1 = proc.cpu_seconds(), server_cpu_seconds(ctx.cluster)
    drained = not conn.execute(pending).fetchone()[0]  # type: ignore[index]
    proc.stop()
    count = int(conn.execute(done, (t0, t1)).fetchone()[0])  # type: ignore[index]
    seconds = (t1 - t0).total_seconds()
    return {
        "rate": count / seconds,
        "completed": count,
        "seconds": seconds,
        "startup": startup,
        "drained": drained,
        "worker_cpu": (cpu1 - cpu0) / seconds,
        "server_cpu": (server1 - server0) / seconds,
        "wal_per_job": (wal1 - wal0) / count if count else None,
        "load": load(),
    }


def run_cell(ctx: Context, cell: Cell) -> dict[str, Any]:
    p = ctx.profile
    for _attempt in range(3):
        count = int(cell.estimate * (p.exec_warm + p.exec_window + 6) * 1.3) + 500
        db = _fill(ctx, cell, count)
        proc = _start(ctx, cell)
        peer = PEERS.get(cell.system)
        with ctx.connect(db) as conn:
            try:
                result = measure(
                    ctx,
                    proc,
                    conn,
                    done=peer.done if peer else OURS_DONE,
                    any_done=peer.any_done if peer else OURS_ANY,
                    pending=peer.pending if peer else OURS_PENDING,
                    warm=p.exec_warm,
                    window=p.exec_window,
                )
            finally:
                proc.stop()
        if result["rate"] > 0.6 * cell.estimate:
            cell.estimate = result["rate"] * 1.5
        if result["drained"]:  # the rate over a drained window understates it: grow anyway
            cell.estimate *= 2
        if not result["drained"]:
            result["queued"] = count
            return result
        ctx.say(f"  {cell.key}: queue of {count} drained; again with a larger one")
    raise RuntimeError(f"{cell.key}: the queue drained three times")


def run(ctx: Context, only: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
    ctx.fresh_database()
    setup_peers(ctx)
    todo = [c for c in cells(ctx) if only(c.key)]
    reps: dict[str, list[dict[str, Any]]] = {c.key: [] for c in todo}
    for rep in range(ctx.profile.reps):
        for cell in todo:
            result = run_cell(ctx, cell)
            reps[cell.key].append(result)
            ctx.say(
                f"executor rep {rep + 1}: {cell.label}: {result['rate']:.0f}/s "
                f"(worker cpu {result['worker_cpu']:.2f}, server cpu {result['server_cpu']:.2f})"
            )
    out: dict[str, Any] = {"cells": {}, "ratios": {}}
    labels = {c.key: c.label for c in todo}
    for key, results in reps.items():
        out["cells"][key] = {
            "label": labels[key],
            "unit": "runs/s",
            **summary([r["rate"] for r in results]),
            "worker_cpu": summary([r["worker_cpu"] for r in results])["median"],
            "server_cpu": summary([r["server_cpu"] for r in results])["median"],
            "wal_per_job": summary([r["wal_per_job"] or 0 for r in results])["median"],
            "reps": results,
        }

    def ratio(name: str, a: str, b: str) -> None:
        if a in reps and b in reps:
            out["ratios"][name] = {
                "of": a,
                "to": b,
                **ratios([r["rate"] for r in reps[a]], [r["rate"] for r in reps[b]]),
            }

    for c in ctx.profile.exec_concurrency:
        ratio(f"ours_c{c}/raw_b{c}", f"ours_c{c}", f"raw_b{c}")
    ratio("ours_c8/pgqueuer_b10", "ours_c8", "pgqueuer_b10")
    ratio("ours_c32/pgqueuer_b100", "ours_c32", "pgqueuer_b100")
    ratio("ours_c100/pgqueuer_b100", "ours_c100", "pgqueuer_b100")
    pc = ctx.profile.procrastinate_concurrency
    ratio(f"ours_c{pc}/procrastinate_c{pc}", f"ours_c{pc}", f"procrastinate_c{pc}")
    ratio(f"ours_c32/procrastinate_c{pc}", "ours_c32", f"procrastinate_c{pc}")
    ratio("ours_c1/dtdb", "ours_c1", "dtdb")
    return out
