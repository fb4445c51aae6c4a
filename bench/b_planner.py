"""Planner: N schedules due at once (``0 * * * *``, next fire at the top of this hour).

Per repetition, interleaved: the raw-SQL limit (``bench.raw planner``, one
set-based statement per batch of 500, with 1 and/or 2 racing connections),
then 1 and 2 planner replicas (``bench.planner_worker``: separate processes
running ``Planner().run_once()`` until a pass finds nothing due). The clock
starts when every process is connected and told to go, and stops when the
last one finds nothing left. After each run of ours: no duplicate
``(schedule_id, scheduled_for)``, exactly one run per schedule, every schedule
advanced once (to the next hour) with ``last_fire_at`` at the top of this hour.
The cron maths alone (``bench.cronmath``) runs once per repetition.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now
from .machine import load
from .procs import Proc, django_env
from .stats import ratios, summary

CRON = "0 * * * *"


def _prepare(ctx: Context) -> datetime:
    """Fresh schedules, all due at the top of this hour (never within a minute of the next)."""
    with ctx.connect() as conn:
        now = db_now(conn)
        top = now.replace(minute=0, second=0, microsecond=0)
        if top + timedelta(hours=1) - now < timedelta(seconds=90):
            time.sleep((top + timedelta(hours=1, seconds=5) - now).total_seconds())
            now = db_now(conn)
            top = now.replace(minute=0, second=0, microsecond=0)
        fixtures.reset(conn)
        fixtures.add_cron_schedules(
            conn, ctx.profile.planner_schedules, cron=CRON, next_fire_at=top
        )
        fixtures.settle(conn, "pgsched_schedule", "pgsched_job_run")
    return top


def check(conn: psycopg.Connection[Any], top: datetime, count: int) -> dict[str, Any]:
    """Correctness after a run: duplicates, runs per schedule, advance, still due."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM pgsched_job_run),
               (SELECT count(*) - count(DISTINCT (schedule_id, scheduled_for))
                  FROM pgsched_job_run),
               (SELECT count(*) FROM (SELECT schedule_id FROM pgsched_job_run
                                       GROUP BY schedule_id HAVING count(*) <> 1) m),
               (SELECT count(*) FROM pgsched_schedule
                 WHERE next_fire_at = %(next)s AND last_fire_at = %(top)s),
               (SELECT count(*) FROM pgsched_schedule WHERE next_fire_at <= %(top)s)
        """,
        {"top": top, "next": top + timedelta(hours=1)},
    ).fetchone()
    assert row is not None
    runs, duplicates, not_one, advanced, still_due = (int(x) for x in row)
    ok = runs == count and duplicates == 0 and not_one == 0 and advanced == count
    return {
        "runs": runs,
        "duplicates": duplicates,
        "schedules_without_exactly_one_run": not_one,
        "advanced_once": advanced,
        "still_due": still_due,
        "ok": ok and still_due == 0,
    }


def _race(ctx: Context, procs: list[Proc]) -> list[dict[str, Any]]:
    for proc in procs:
        if proc.readline() != "ready":
            raise RuntimeError(f"{' '.join(proc.argv)} did not start; see {proc.log}")
    for proc in procs:
        proc.writeline("go")
    out = []
    for proc in procs:
        line = proc.readline()
        proc.stop()
        if not line:
            raise RuntimeError(f"{' '.join(proc.argv)} failed; see {proc.log}")
        out.append(json.loads(line))
    return out


def run_raw(ctx: Context, conns: int) -> dict[str, Any]:
    top = _prepare(ctx)
    argv = [sys.executable, "-m", "bench.raw", "planner", ctx.dsn, "--conns", str(conns)]
    proc = Proc(
        argv, env=django_env(ctx.dsn), log=ctx.log(f"raw-planner-{conns}"), stdin=True, stdout=True
    )
    (result,) = _race(ctx, [proc])
    with ctx.connect() as conn:
        correctness = check(conn, top, ctx.profile.planner_schedules)
    n = ctx.profile.planner_schedules
    return {
        "rate": n / result["seconds"],
        "seconds": result["seconds"],
        "check": correctness,
        "load": load(),
    }


def run_ours(ctx: Context, replicas: int) -> dict[str, Any]:
    top = _prepare(ctx)
    procs = [
        Proc(
            [sys.executable, "-m", "bench.planner_worker"],
            env=django_env(ctx.dsn),
            log=ctx.log(f"planner-{replicas}-{i}"),
            stdin=True,
            stdout=True,
        )
        for i in range(replicas)
    ]
    results = _race(ctx, procs)
    seconds = max(r["finished"] for r in results) - min(r["started"] for r in results)
    with ctx.connect() as conn:
        correctness = check(conn, top, ctx.profile.planner_schedules)
    created = sum(r["created"] for r in results)
    decide = sum(r["decide_seconds"] for r in results)
    return {
        "rate": created / seconds,
        "seconds": seconds,
        "passes": sum(r["passes"] for r in results),
        "decide_share": decide / (seconds * replicas),
        "check": correctness,
        "load": load(),
    }


def cron_maths(ctx: Context) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.cronmath", str(ctx.profile.planner_schedules)]
    proc = Proc(argv, env=django_env(ctx.dsn), log=ctx.log("cronmath"), stdout=True)
    line = proc.readline()
    proc.stop()
    return json.loads(line) if line else {"error": f"see {proc.log}"}


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    reps: dict[str, list[dict[str, Any]]] = {}
    maths: list[dict[str, Any]] = []
    for rep in range(p.reps):
        for conns in p.raw_planner_conns:
            reps.setdefault(f"raw_{conns}", []).append(result := run_raw(ctx, conns))
            ctx.say(f"planner rep {rep + 1}: raw SQL, {conns} conn(s): {result['rate']:.0f} runs/s")
        for n in p.planner_replicas:
            reps.setdefault(f"ours_{n}", []).append(result := run_ours(ctx, n))
            ctx.say(
                f"planner rep {rep + 1}: {n} replica(s): {result['rate']:.0f} runs/s, "
                f"check {'ok' if result['check']['ok'] else 'FAILED'}"
            )
        maths.append(cron_maths(ctx))
    labels = {
        **{f"raw_{c}": f"raw SQL, {c} connection(s)" for c in p.raw_planner_conns},
        **{f"ours_{n}": f"django-pgsched, {n} replica(s)" for n in p.planner_replicas},
    }
    out: dict[str, Any] = {"cells": {}, "ratios": {}}
    for key, results in reps.items():
        out["cells"][key] = {
            "label": labels[key],
            "unit": "runs/s",
            **summary([r["rate"] for r in results]),
            "seconds": summary([r["seconds"] for r in results]),
            "reps": results,
        }
    for n in p.planner_replicas:
        for conns in p.raw_planner_conns:
            a, b = f"ours_{n}", f"raw_{conns}"
            out["ratios"][f"{a}/{b}"] = {
                "of": a,
                "to": b,
                **ratios([r["rate"] for r in reps[a]], [r["rate"] for r in reps[b]]),
            }
    out["correct"] = all(r["check"]["ok"] for key, rs in reps.items() for r in rs)
    out["cron_maths"] = {
        key: summary([m.get(key, float("nan")) for m in maths])
        for key in ("memoised", "per_schedule", "cold")
    }
    out["decide_share"] = {
        f"ours_{n}": summary([r["decide_share"] for r in reps[f"ours_{n}"]])
        for n in p.planner_replicas
    }
    return out
