"""Start lateness, by the database's clock: ``attempt.started_at − run.fire_after`` (attempt 1).

Three scenarios, each against real ``runscheduler`` processes (all loops):

- **sparse**: ``sparse_schedules`` interval schedules for ``sparse_seconds``.
  Occurrences are whole seconds (a CHECK), so schedules cannot be staggered
  within a second: the headline variant staggers them over 20 s (interval 20 s,
  anchor i mod 20, so 10 runs fall due each second); the ``1s`` variant is
  every schedule every second (all of them due at the same instant, each second).
  The first 5 s are a warm-up and not counted.
- **due now**: a schedule created due now (interval 1 h, anchor and
  ``next_fire_at`` = the current second), inserted with SQL (its trigger
  NOTIFYs the planners, as ``Schedule.objects.create`` does); measured from its
  ``created_at`` to its run's start. Samples 0.2–0.6 s apart.
- **burst**: ``burst_schedules`` schedules all due at the same second T (a
  daily six-field cron at T's time of day, so the burst happens once), two
  replicas; time from T until every run started, and the lateness distribution.
"""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now, wait_until
from .machine import load
from .procs import Proc, replica, wait_ready
from .stats import percentile, summary

ROLES = ("planner", "executor", "maintenance", "listener")


def _start(ctx: Context, conn: psycopg.Connection[Any], n: int, concurrency: int) -> list[Proc]:
    procs = [replica(ctx.dsn, ctx.log(f"replica-{i}"), concurrency=concurrency) for i in range(n)]
    try:
        wait_ready(conn, procs, ROLES)
    except BaseException:
        _stop(procs)
        raise
    time.sleep(1.0)
    return procs


def _stop(procs: list[Proc]) -> None:
    for proc in procs:
        proc.stop()


def _distribution(ms: list[float]) -> dict[str, Any]:
    return {
        "samples": len(ms),
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms) if ms else None,
    }


def lateness_ms(
    conn: psycopg.Connection[Any], since: datetime, until: datetime
) -> tuple[list[float], int]:
    """Lateness of attempt 1 of runs due in [since, until); and how many such runs never started."""
    rows = conn.execute(
        """
        SELECT extract(epoch FROM a.started_at - r.fire_after) * 1000
          FROM pgsched_job_run r
          LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1
         WHERE r.fire_after >= %s AND r.fire_after < %s
        """,
        (since, until),
    ).fetchall()
    started = [float(r[0]) for r in rows if r[0] is not None]
    return started, len(rows) - len(started)


def sparse(ctx: Context, every: int, stagger: int) -> dict[str, Any]:
    p = ctx.profile
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.settle(conn)
        procs = _start(ctx, conn, 1, p.sparse_concurrency)
        try:
            anchor = db_now(conn).replace(microsecond=0) + timedelta(seconds=3)
            fixtures.add_interval_schedules(
                conn, p.sparse_schedules, every_s=every, anchor=anchor, stagger_s=stagger
            )
            since = anchor + timedelta(seconds=5)
            until = since + timedelta(seconds=p.sparse_seconds)
            time.sleep(max(0.0, (until - db_now(conn)).total_seconds()) + 2.0)
        finally:
            _stop(procs)
        ms, missing = lateness_ms(conn, since, until)
    return {**_distribution(ms), "not_started": missing, "load": load()}


def due_now(ctx: Context) -> dict[str, Any]:
    p = ctx.profile
    created_ms: list[float] = []
    fire_ms: list[float] = []
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.settle(conn)
        procs = _start(ctx, conn, 1, p.sparse_concurrency)
        try:
            time.sleep(1.0)
            for i in range(p.due_now_samples):
                row = conn.execute(
                    """
                    INSERT INTO pgsched_schedule
                           (name, job, kwargs, "interval", anchor, status, next_fire_at,
                            misfire_policy, catch_up_limit, skipped_occurrences, source,
                            last_error, updated_at)
                    SELECT 'due-now-' || %s, 'tests.noop', '{}', interval '1 hour', t, 'active',
                           t, 'latest', 10, 0, 'database', '', now()
                      FROM (SELECT date_trunc('second', now()) AS t) s
                    RETURNING id
                    """,
                    (i,),
                ).fetchone()
                assert row is not None

                def started(schedule_id: int = row[0]) -> bool:
                    found = conn.execute(
                        "SELECT 1 FROM pgsched_job_run WHERE schedule_id = %s"
                        " AND started_at IS NOT NULL",
                        (schedule_id,),
                    ).fetchone()
                    return found is not None

                wait_until(started, timeout=30, interval=0.01, what="the due-now run to start")
                time.sleep(random.uniform(0.2, 0.6))
        finally:
            _stop(procs)
        for since_created, since_fire in conn.execute(
            """
            SELECT extract(epoch FROM a.started_at - s.created_at) * 1000,
                   extract(epoch FROM a.started_at - r.fire_after) * 1000
              FROM pgsched_schedule s
              JOIN pgsched_job_run r ON r.schedule_id = s.id
              JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1
             WHERE s.name LIKE 'due-now-%%'
            """
        ):
            created_ms.append(float(since_created))
            fire_ms.append(float(since_fire))
    return {
        **_distribution(created_ms),
        "since_fire_after": _distribution(fire_ms),
        "load": load(),
    }


def burst(ctx: Context) -> dict[str, Any]:
    p = ctx.profile
    n = p.burst_schedules
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.settle(conn)
        procs = _start(ctx, conn, 2, p.burst_concurrency)
        try:
            due = db_now(conn).replace(microsecond=0) + timedelta(seconds=12)
            cron = f"{due.second} {due.minute} {due.hour} * * *"
            fixtures.add_cron_schedules(conn, n, cron=cron, next_fire_at=due, prefix="burst")
            conn.execute("ANALYZE pgsched_schedule")
            margin = (due - db_now(conn)).total_seconds()  # the set-up must end well before T

            def all_started() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM pgsched_job_run WHERE started_at IS NOT NULL"
                ).fetchone()
                return row is not None and row[0] >= n

            try:
                wait_until(all_started, timeout=180 + 12, interval=1.0, what="the burst")
            except TimeoutError:
                pass
        finally:
            _stop(procs)
        ms, _unstarted = lateness_ms(conn, due, due + timedelta(seconds=1))
        row = conn.execute(
            "SELECT extract(epoch FROM max(created_at) - %s) FROM pgsched_job_run", (due,)
        ).fetchone()
    planned = float(row[0]) if row and row[0] is not None else None
    return {
        **_distribution(ms),
        "all_started_after_s": (max(ms) / 1000) if len(ms) == n else None,
        "not_started": n - len(ms),
        "planned_after_s": planned,
        "setup_margin_s": margin,
        "load": load(),
    }


def _reps(ctx: Context, name: str, fn: Any, times: int) -> dict[str, Any]:
    results = []
    for rep in range(times):
        results.append(fn())
        r = results[-1]
        ctx.say(
            f"lateness {name} rep {rep + 1}: p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, "
            f"max {r['max']:.1f} ms"
        )
    keys = ("p50", "p99", "max", "all_started_after_s")
    return {
        "unit": "ms",
        **{k: summary([r[k] for r in results]) for k in keys if k in results[0]},
        "reps": results,
    }


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    return {
        "sparse": _reps(
            ctx, "sparse (20 s, staggered)", lambda: sparse(ctx, 20, 20), p.lateness_reps
        ),
        "sparse_1s": _reps(
            ctx, "sparse (all every 1 s)", lambda: sparse(ctx, 1, 0), p.lateness_reps
        ),
        "due_now": _reps(ctx, "due now", lambda: due_now(ctx), 1),
        "burst": _reps(ctx, "burst", lambda: burst(ctx), p.burst_reps),
    }
