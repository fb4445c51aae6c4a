"""What-if cells: the executor with a candidate engine change, beside the engine as it is.

Not part of the profiles' default run (``--only variants`` runs it). Each of
(at most) three repetitions runs, interleaved, concurrency 8 of:

- ``default``: the migrated schema and settings, as in the executor benchmark;
- ``lean``: the same without the four run-list indexes (``ADMIN_INDEXES``: the admin
  run list's ``(scheduled_for, id)``, failed-or-cancelled ``(scheduled_for, id)``,
  non-default ``(queue, …)`` and one-off ``(schedule_name, …)``): every claim
  and completion is a non-HOT update, so each index on ``pgsched_job_run`` that
  holds the run is written twice per run;
- ``async``: the replica's sessions with ``synchronous_commit = off``
  (``PGOPTIONS``): a crash of the server can lose the last few hundred ms of
  claims and outcomes, which the leases then redeliver (at-least-once holds);

and the raw-SQL limit at batch 8 on both schemas, to show how much of a gain
is the schema's rather than the engine's.

Then the limit of the burst's execution half: ``burst_schedules`` due runs
drained by two raw loops (``bench.raw executor``) at batch 32 and 100 (twice
each), timed
from their start to the last ``finished_at`` (on the migrated schema).
"""

from __future__ import annotations

import sys
from typing import Any

from . import fixtures
from .b_executor import OURS_ANY, OURS_DONE, OURS_PENDING, measure
from .context import DB, TEMPLATE, Context, db_now, wait_until
from .procs import Proc, django_env, replica
from .stats import ratios, summary

LEAN = "bench_lean"
ADMIN_INDEXES = (
    "pgsched_run_recent_idx",
    "pgsched_run_unsuccessful_idx",
    "pgsched_run_by_queue_idx",
    "pgsched_run_one_off_idx",
)
CELLS = (
    ("default_c8", DB, "ours", 8, None),
    ("lean_c8", LEAN, "ours", 8, None),
    ("async_c8", DB, "ours", 8, "-c synchronous_commit=off"),
    ("raw_b8", DB, "raw", 8, None),
    ("raw_lean_b8", LEAN, "raw", 8, None),
)

LABELS = {
    "default_c8": "django-pgsched as it is, concurrency 8",
    "lean_c8": "… without the 4 run-list indexes",
    "async_c8": "… with synchronous_commit = off on its sessions",
    "raw_b8": "raw SQL, batch 8",
    "raw_lean_b8": "raw SQL, batch 8, without those 4 indexes",
}


def _cell(ctx: Context, db: str, system: str, size: int, options: str | None) -> dict[str, Any]:
    p = ctx.profile
    dsn = ctx.cluster.url(db)
    with ctx.connect(db) as conn:
        fixtures.reset(conn)
        fixtures.add_pending_runs(conn, int(4000 * (p.exec_warm + p.exec_window + 6)))
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
    extra = {"PGOPTIONS": options} if options else {}
    if system == "ours":
        log = ctx.log(f"variant-{db}-{size}")
        proc = replica(dsn, log, loops="executor", concurrency=size, environ=extra)
    else:
        argv = [sys.executable, "-m", "bench.raw", "executor", dsn, "--batch", str(size)]
        proc = Proc(argv, env=django_env(dsn, **extra), log=ctx.log(f"variant-raw-{db}"))
    with ctx.connect(db) as conn:
        try:
            return measure(
                ctx,
                proc,
                conn,
                done=OURS_DONE,
                any_done=OURS_ANY,
                pending=OURS_PENDING,
                warm=p.exec_warm,
                window=p.exec_window,
            )
        finally:
            proc.stop()


def drain(ctx: Context, batch: int, loops: int = 2) -> float:
    """Seconds for ``loops`` raw executor loops to claim and complete the burst's runs."""
    n = ctx.profile.burst_schedules
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.add_pending_runs(conn, n)
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
        started = db_now(conn)
        argv = [sys.executable, "-m", "bench.raw", "executor", ctx.dsn, "--batch", str(batch)]
        procs = [
            Proc(argv, env=django_env(ctx.dsn), log=ctx.log("burst-raw")) for _ in range(loops)
        ]
        try:

            def drained() -> bool:
                row = conn.execute(
                    "SELECT NOT EXISTS (SELECT 1 FROM pgsched_job_run WHERE finished_at IS NULL)"
                ).fetchone()
                return bool(row and row[0])

            wait_until(drained, timeout=300, interval=0.2, what="the raw burst")
        finally:
            for proc in procs:
                proc.stop()
        row = conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - %s) FROM pgsched_job_run", (started,)
        ).fetchone()
    return float(row[0]) if row else float("nan")


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    ctx.cluster.create_database(LEAN, template=TEMPLATE)
    with ctx.connect(LEAN) as conn:
        conn.execute(f"DROP INDEX {', '.join(ADMIN_INDEXES)}")
    reps: dict[str, list[float]] = {key: [] for key, *_ in CELLS}
    times = min(ctx.profile.reps, 3)
    for rep in range(times):
        for key, db, system, size, options in CELLS:
            result = _cell(ctx, db, system, size, options)
            reps[key].append(result["rate"])
            ctx.say(f"variants rep {rep + 1}: {key}: {result['rate']:.0f}/s")
    out: dict[str, Any] = {
        "cells": {
            key: {"label": LABELS[key], "unit": "runs/s", **summary(v)} for key, v in reps.items()
        },
        "ratios": {},
    }
    for a, b in (("lean_c8", "default_c8"), ("async_c8", "default_c8"), ("raw_lean_b8", "raw_b8")):
        out["ratios"][f"{a}/{b}"] = {"of": a, "to": b, **ratios(reps[a], reps[b])}
    for batch in (32, 100):
        seconds = [drain(ctx, batch) for _ in range(min(ctx.profile.reps, 2))]
        out[f"burst_raw_b{batch}"] = {"unit": "s", **summary(seconds)}
        ctx.say(f"variants: raw burst drain, 2 loops at batch {batch}: {seconds}")
    return out
