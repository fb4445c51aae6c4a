"""django.tasks: no-op tasks enqueued and executed through PgschedBackend vs django-tasks-db.

Two measurements per cell, each on a fresh, settled table:

* **pipeline** (enqueue + execute): the workers are up and idle; a producer
  process enqueues N no-op tasks through the framework's ``task.enqueue()``
  from T threads (one transaction each, as web workers would) while the workers
  execute them. The rate is N over the time from the first enqueue to the last
  finish, both by the database's timestamps; each ``enqueue()`` call is timed
  in the producer (latency p50, p99).
* **drain** (execute only): N tasks are enqueued first, then the workers start;
  N over the time from the first finish... to the last.
* **producer only**: the enqueue step of the drain measure, with no worker
  running: N ``task.enqueue()`` calls from T threads, their rate, latency and
  the producer's CPU per call. The pipeline cannot go faster than its producer:
  our producer-only rate over the peer's pipeline rate is the ceiling of the
  pipeline ratio on this machine (``ratios[... ceiling]``).

Like concurrency: ``runscheduler --loops executor --concurrency C`` (one
process, C slots) against C ``db_worker`` processes (django-tasks-db runs one
task at a time per process). Cells run interleaved within a repetition.

And what priority costs the claim (``pgsched_run_claim_order_idx``): the
executor's no-op throughput (``b_executor``'s measure, concurrency 8) over a
backlog of due runs at priority 0, with and without 100,000 runs of priority 10
deferred by a day in front of them in the index.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import b_executor, fixtures
from .context import Context, wait_until
from .machine import load
from .procs import Proc, django_env, replica
from .stats import ratios, summary

DTDB_DB = "peer_dtdb"
DTDB_TABLE = "django_tasks_database_dbtaskresult"


@dataclass(frozen=True)
class Cell:
    key: str
    label: str
    system: str  # "ours" or "dtdb"
    concurrency: int


def cells(ctx: Context) -> list[Cell]:
    out = []
    for c in ctx.profile.tasks_concurrency:
        out.append(Cell(f"ours_c{c}", f"PgschedBackend, concurrency {c}", "ours", c))
        out.append(Cell(f"dtdb_w{c}", f"django-tasks-db, {c} db_worker(s)", "dtdb", c))
    return out


def _reset(ctx: Context, cell: Cell) -> None:
    if cell.system == "ours":
        with ctx.connect() as conn:
            fixtures.reset(conn, schedules=False)
            fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
    else:
        with ctx.connect(DTDB_DB) as conn:
            conn.execute(f"TRUNCATE {DTDB_TABLE}")
            conn.execute(f"VACUUM ANALYZE {DTDB_TABLE}")
            conn.execute("CHECKPOINT")


def _workers(ctx: Context, cell: Cell) -> list[Proc]:
    if cell.system == "ours":
        proc = replica(ctx.dsn, ctx.log(cell.key), loops="executor", concurrency=cell.concurrency)
        return [proc]
    return [ctx.peer_proc("dtdb", "dtdb_peer", "work", db=DTDB_DB) for _ in range(cell.concurrency)]


def _produce(ctx: Context, cell: Cell, count: int, threads: int) -> dict[str, Any]:
    out = ctx.logs / f"{cell.key}-producer-{time.monotonic_ns()}.json"
    if cell.system == "ours":
        argv = [sys.executable, "-m", "bench.producers", "ours", ctx.dsn, str(count),
                str(threads), str(out)]  # fmt: skip
        proc = Proc(argv, env=django_env(ctx.dsn), log=ctx.log(f"{cell.key}-producer"))
    else:
        proc = ctx.peer_proc(
            "dtdb", "dtdb_peer", "produce", str(count), str(threads), str(out), db=DTDB_DB
        )
    if proc.popen.wait() != 0:
        raise RuntimeError(f"the producer of {cell.key} failed; see {proc.log}")
    proc.stop()
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _span(ctx: Context, cell: Cell) -> tuple[int, float, float]:
    """(finished, seconds from the first enqueue to the last finish, from first to last finish)."""
    if cell.system == "ours":
        db, query = (
            None,
            (
                "SELECT count(*), extract(epoch FROM max(finished_at) - min(created_at)),"
                " extract(epoch FROM max(finished_at) - min(finished_at))"
                " FROM pgsched_job_run WHERE status = 'succeeded'"
            ),
        )
    else:
        db, query = (
            DTDB_DB,
            (
                "SELECT count(*), extract(epoch FROM max(finished_at) - min(enqueued_at)),"
                " extract(epoch FROM max(finished_at) - min(finished_at))"
                f" FROM {DTDB_TABLE} WHERE status = 'SUCCESSFUL'"
            ),
        )
    with ctx.connect(db) if db else ctx.connect() as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0), float(row[2] or 0)


def _wait_done(ctx: Context, cell: Cell, count: int, workers: list[Proc]) -> None:
    def done() -> bool:
        for proc in workers:
            if not proc.alive():
                raise RuntimeError(f"{' '.join(proc.argv)} exited early; see {proc.log}")
        return _span(ctx, cell)[0] >= count

    wait_until(done, timeout=600, interval=0.25, what=f"{count} tasks of {cell.key} to finish")


def _cpu(workers: list[Proc]) -> float:
    return sum(proc.cpu_seconds() for proc in workers)


def pipeline(ctx: Context, cell: Cell) -> dict[str, Any]:
    p = ctx.profile
    _reset(ctx, cell)
    workers = _workers(ctx, cell)
    try:
        time.sleep(p.tasks_startup)  # the workers are up and idle
        cpu0 = _cpu(workers)
        produced = _produce(ctx, cell, p.tasks_count, p.tasks_producer_threads)
        _wait_done(ctx, cell, p.tasks_count, workers)
        cpu = _cpu(workers) - cpu0
    finally:
        for proc in workers:
            proc.stop()
    count, seconds, _ = _span(ctx, cell)
    return {
        "rate": count / seconds,
        "completed": count,
        "seconds": seconds,
        "enqueue_rate": produced["rate"],
        "enqueue_ms": produced["latencies_ms"],
        "worker_cpu_per_task_ms": cpu / count * 1000,
        "load": load(),
    }


def drain(ctx: Context, cell: Cell) -> dict[str, Any]:
    p = ctx.profile
    _reset(ctx, cell)
    produced = _produce(ctx, cell, p.tasks_count, p.tasks_producer_threads)  # no worker yet
    workers = _workers(ctx, cell)
    try:
        _wait_done(ctx, cell, p.tasks_count, workers)
    finally:
        for proc in workers:
            proc.stop()
    count, _, seconds = _span(ctx, cell)
    return {
        "rate": count / seconds if seconds else None,
        "completed": count,
        "seconds": seconds,
        "produce": produced,  # the producer-only measure
    }


CLAIM_COST_CONCURRENCY = 8


def claim_cost(ctx: Context, deferred: int) -> dict[str, Any]:
    """Executor throughput over due priority-0 runs, with ``deferred`` priority-10 runs waiting."""
    p = ctx.profile
    count = 40_000  # never drained within the window at this concurrency
    with ctx.connect() as conn:
        fixtures.reset(conn, schedules=False)
        fixtures.add_pending_runs(conn, count)
        if deferred:
            fixtures.add_deferred_runs(conn, deferred, priority=10)
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
    proc = replica(
        ctx.dsn, ctx.log(f"claim-{deferred}"), loops="executor", concurrency=CLAIM_COST_CONCURRENCY
    )
    with ctx.connect() as conn:
        try:
            result = b_executor.measure(
                ctx,
                proc,
                conn,
                done=b_executor.OURS_DONE,
                any_done=b_executor.OURS_ANY,
                pending="SELECT EXISTS (SELECT 1 FROM pgsched_job_run WHERE status = 'pending'"
                " AND fire_after < now())",
                warm=p.exec_warm,
                window=p.exec_window,
            )
        finally:
            proc.stop()
    return result


def run(ctx: Context, only: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
    ctx.fresh_database()
    ctx.cluster.create_database(DTDB_DB)
    ctx.peer_run("dtdb", "dtdb_peer", "setup", db=DTDB_DB)
    todo = [c for c in cells(ctx) if only(c.key)]
    reps: dict[str, dict[str, list[dict[str, Any]]]] = {
        c.key: {"pipeline": [], "drain": []} for c in todo
    }
    for rep in range(ctx.profile.tasks_reps):
        for cell in todo:
            for kind, measure in (("pipeline", pipeline), ("drain", drain)):
                result = measure(ctx, cell)
                reps[cell.key][kind].append(result)
                extra = ""
                if kind == "pipeline":
                    extra = (
                        f", enqueue p50 {result['enqueue_ms']['p50']:.2f} ms"
                        f" p99 {result['enqueue_ms']['p99']:.2f} ms"
                    )
                else:
                    made = result["produce"]
                    extra = (
                        f"; producer only {made['rate']:.0f}/s, p50"
                        f" {made['latencies_ms']['p50']:.2f} ms p99"
                        f" {made['latencies_ms']['p99']:.2f} ms,"
                        f" CPU {made['cpu_ms']:.3f} ms per enqueue"
                    )
                ctx.say(f"tasks rep {rep + 1}: {cell.label}: {kind} {result['rate']:.0f}/s{extra}")
    claims: dict[str, list[dict[str, Any]]] = {"plain": [], "deferred": []}
    if only("claim"):
        for rep in range(ctx.profile.tasks_reps):
            for key, deferred in (("plain", 0), ("deferred", ctx.profile.tasks_deferred)):
                result = claim_cost(ctx, deferred)
                claims[key].append(result)
                ctx.say(f"claim cost rep {rep + 1}: {key}: {result['rate']:.0f} runs/s")
    out: dict[str, Any] = {"cells": {}, "ratios": {}}
    if claims["plain"]:
        out["claim_cost"] = {
            "concurrency": CLAIM_COST_CONCURRENCY,
            "deferred": ctx.profile.tasks_deferred,
            "plain": summary([r["rate"] for r in claims["plain"]]),
            "deferred_ahead": summary([r["rate"] for r in claims["deferred"]]),
            "ratio": ratios(
                [r["rate"] for r in claims["deferred"]], [r["rate"] for r in claims["plain"]]
            ),
            "reps": claims,
        }
    for cell in todo:
        pipe, dr = reps[cell.key]["pipeline"], reps[cell.key]["drain"]
        out["cells"][cell.key] = {
            "label": cell.label,
            "unit": "tasks/s",
            **summary([r["rate"] for r in pipe]),
            "drain": summary([r["rate"] for r in dr]),
            "enqueue_p50_ms": summary([r["enqueue_ms"]["p50"] for r in pipe])["median"],
            "enqueue_p99_ms": summary([r["enqueue_ms"]["p99"] for r in pipe])["median"],
            "enqueue_rate": summary([r["enqueue_rate"] for r in pipe])["median"],
            "worker_cpu_per_task_ms": summary([r["worker_cpu_per_task_ms"] for r in pipe])[
                "median"
            ],
            "producer_only": {
                "threads": ctx.profile.tasks_producer_threads,
                **summary([r["produce"]["rate"] for r in dr]),
                "p50_ms": summary([r["produce"]["latencies_ms"]["p50"] for r in dr])["median"],
                "p99_ms": summary([r["produce"]["latencies_ms"]["p99"] for r in dr])["median"],
                "cpu_ms": summary([r["produce"]["cpu_ms"] for r in dr])["median"],
            },
            "reps": {"pipeline": pipe, "drain": dr},
        }
    for c in ctx.profile.tasks_concurrency:
        a, b = f"ours_c{c}", f"dtdb_w{c}"
        if a in reps and b in reps:
            out["ratios"][f"{a}/{b}"] = {
                "of": a,
                "to": b,
                **ratios(
                    [r["rate"] for r in reps[a]["pipeline"]],
                    [r["rate"] for r in reps[b]["pipeline"]],
                ),
            }
            out["ratios"][f"{a}/{b} drain"] = {
                "of": a,
                "to": b,
                **ratios(
                    [r["rate"] for r in reps[a]["drain"]], [r["rate"] for r in reps[b]["drain"]]
                ),
            }
            out["ratios"][f"{a}/{b} producer only"] = {
                "of": a,
                "to": b,
                **ratios(
                    [r["produce"]["rate"] for r in reps[a]["drain"]],
                    [r["produce"]["rate"] for r in reps[b]["drain"]],
                ),
            }
            # the most the pipeline ratio can be while our producer bounds our pipeline
            out["ratios"][f"{a}/{b} ceiling"] = {
                "of": a,
                "to": b,
                "what": "our producer-only rate over the peer's pipeline rate",
                **ratios(
                    [r["produce"]["rate"] for r in reps[a]["drain"]],
                    [r["rate"] for r in reps[b]["pipeline"]],
                ),
            }
    return out
