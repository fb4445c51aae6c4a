"""HTTP delivery (``pgsched.http``): throughput beside a plain urllib3 loop, RSS, the breaker.

- **Throughput.** A receiver (``bench.sink``, asyncio, its own process) on
  127.0.0.1. Cell ``ours_c32``: a ``runscheduler --loops executor --concurrency
  32`` delivering a queue of due ``pgsched.http`` runs (signed, vetted, evidence
  kept), completions counted from the database over a window. Cell
  ``loop_c32``: ``bench.http_loop``, 32 threads POSTing the same body with
  urllib3, a new connection per request as each delivery opens one;
  ``loop_c32_keepalive`` reuses connections, for reference. The goal is the
  ratio ``ours_c32/loop_c32`` (the scheduler's cost around a request).
- **Soak.** One replica delivering ``delivery_soak_rate`` requests a second from
  interval schedules; RSS sampled every 5 s, growth from the sample after a
  warm-up to the end.
- **Breaker.** ``breaker_runs`` runs due at once to a destination that answers
  500, one replica (concurrency 8), a constant cool-down. Row writes to
  ``pgsched_job_run`` (inserts, updates, deletes: ``pg_stat_user_tables``,
  flushed when the replica exits) over the whole window, divided by runs ×
  cool-downs elapsed since the breaker opened. The same with the breaker off,
  for contrast.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from typing import Any

import psycopg

from tests.pgcluster import free_port

from . import fixtures
from .b_executor import OURS_ANY, OURS_DONE, OURS_PENDING, measure
from .context import Context, db_now, wait_until
from .machine import load
from .procs import Proc, django_env, replica, wait_ready
from .stats import ratios, summary

CONCURRENCY = 32
JSON_BODY = {"type": "bench.event", "data": {"id": 1}}
SECRET = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWY="  # 32 bytes, bench only


def overrides(port: int, **http: Any) -> str:
    return json.dumps(
        {
            "HTTP": {
                "ALLOW_NETWORKS": ["127.0.0.1/32"],
                "ALLOW_PORTS": [port],
                "SIGNING_SECRETS": {"bench": SECRET},
                **http,
            },
            "RETRY_BACKOFF_BASE": 0.5,
            "RETRY_BACKOFF_MAX": 1,
        }
    )


def add_http_runs(
    conn: psycopg.Connection[Any], count: int, url: str, *, max_attempts: int = 3
) -> None:
    """``count`` due ``pgsched.http`` one-off runs to ``url`` (signed, a small JSON body)."""
    kwargs = json.dumps({"url": url, "body": JSON_BODY, "signing_secret": "bench"})
    fixtures.ensure_months(conn, timedelta(hours=1), timedelta(0))
    conn.execute(
        """
        INSERT INTO pgsched_job_run
               (scheduled_for, idempotency_key, job, kwargs, queue, status, fire_after,
                attempts, max_attempts, timeout, note)
        SELECT date_trunc('second', now()) - interval '1 hour',
               'bench:' || g, 'pgsched.http', %(kwargs)s::jsonb, 'default', 'pending',
               now() - interval '1 hour' + g * interval '1 microsecond',
               0, %(max_attempts)s, interval '30 seconds', ''
          FROM generate_series(1, %(count)s::int) g
        """,
        {"kwargs": kwargs, "count": count, "max_attempts": max_attempts},
    )


def _loop(ctx: Context, url: str, *, keepalive: bool) -> dict[str, Any]:
    p = ctx.profile
    argv = [
        sys.executable, "-m", "bench.http_loop", url, "--concurrency", str(CONCURRENCY),
        "--warm", str(p.exec_warm), "--window", str(p.exec_window),
    ]  # fmt: skip
    if keepalive:
        argv.append("--keepalive")
    log = ctx.log("http-loop-keepalive" if keepalive else "http-loop")
    proc = Proc(argv, env=django_env(ctx.dsn), log=log)
    if proc.popen.wait(p.exec_warm + p.exec_window + 60) != 0:
        raise RuntimeError(f"bench.http_loop failed; see {log}")
    proc.stop()
    line = log.read_text().strip().splitlines()[-1]
    result: dict[str, Any] = json.loads(line)
    result["load"] = load()
    return result


def _ours(ctx: Context, port: int, url: str, estimate: float) -> dict[str, Any]:
    p = ctx.profile
    count = int(estimate * (p.exec_warm + p.exec_window + 6) * 1.3) + 500
    with ctx.connect() as conn:
        fixtures.reset(conn)
        add_http_runs(conn, count, url)
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
        proc = replica(
            ctx.dsn,
            ctx.log("delivery-ours"),
            loops="executor",
            concurrency=CONCURRENCY,
            overrides=overrides(port),
        )
        result = measure(
            ctx,
            proc,
            conn,
            done=OURS_DONE,
            any_done=OURS_ANY,
            pending=OURS_PENDING,
            warm=p.exec_warm,
            window=p.exec_window,
        )
        failed = conn.execute(
            "SELECT count(*) FROM pgsched_job_run WHERE status <> 'succeeded'"
            " AND finished_at IS NOT NULL"
        ).fetchone()
        result["not_succeeded"] = int(failed[0]) if failed else None
    return result


def throughput(ctx: Context, port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/ok"
    cells: dict[str, list[dict[str, Any]]] = {
        "ours_c32": [],
        "loop_c32": [],
        "loop_c32_keepalive": [],
    }
    estimate = 800.0
    for rep in range(ctx.profile.reps):
        ctx.say(f"delivery throughput, repetition {rep + 1}/{ctx.profile.reps}")
        loop = _loop(ctx, url, keepalive=False)
        cells["loop_c32"].append(loop)
        cells["loop_c32_keepalive"].append(_loop(ctx, url, keepalive=True))
        ours = _ours(ctx, port, url, max(estimate, loop["rate"]))
        estimate = max(estimate, ours["rate"] * 1.5)
        cells["ours_c32"].append(ours)
        ctx.say(
            f"  ours {ours['rate']:.0f}/s, loop {loop['rate']:.0f}/s, keep-alive "
            f"{cells['loop_c32_keepalive'][-1]['rate']:.0f}/s"
        )
    rates = {key: [c["rate"] for c in runs] for key, runs in cells.items()}
    return {
        "unit": "deliveries/s",
        "cells": {
            key: {"rate": summary(values), "reps": cells[key]} for key, values in rates.items()
        },
        "ratios": {
            "ours_c32/loop_c32": ratios(rates["ours_c32"], rates["loop_c32"]),
            "ours_c32/loop_c32_keepalive": ratios(rates["ours_c32"], rates["loop_c32_keepalive"]),
        },
    }


def soak(ctx: Context, port: int) -> dict[str, Any]:
    """RSS of a replica delivering steadily (interval schedules of pgsched.http)."""
    p = ctx.profile
    ctx.fresh_database()
    samples: list[tuple[float, float]] = []
    url = f"http://127.0.0.1:{port}/ok"
    kwargs = json.dumps({"url": url, "body": JSON_BODY, "signing_secret": "bench"})
    with ctx.connect() as conn:
        proc = replica(ctx.dsn, ctx.log("delivery-soak"), concurrency=16, overrides=overrides(port))
        try:
            wait_ready(conn, [proc], ("planner", "executor", "maintenance", "listener"))
            anchor = db_now(conn).replace(microsecond=0) + timedelta(seconds=2)
            conn.execute(
                """
                INSERT INTO pgsched_schedule
                       (name, job, kwargs, "interval", anchor, status, misfire_policy,
                        catch_up_limit, next_fire_at, skipped_occurrences, source, last_error,
                        updated_at)
                SELECT 'soak-' || g, 'pgsched.http', %(kwargs)s::jsonb, interval '1 second',
                       %(anchor)s, 'active', 'skip', 10, %(anchor)s, 0, 'database', '', now()
                  FROM generate_series(1, %(n)s::int) g
                """,
                {"kwargs": kwargs, "anchor": anchor, "n": p.delivery_soak_rate},
            )
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < p.delivery_soak_seconds:
                samples.append((round(elapsed, 1), round(proc.rss_mb(), 2)))
                time.sleep(5.0)
            samples.append((round(time.monotonic() - started, 1), round(proc.rss_mb(), 2)))
        finally:
            proc.stop()
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM pgsched_job_run"
        ).fetchone()
        assert row is not None
    warm_at = min(60.0, p.delivery_soak_seconds / 4)
    warm = next((rss for t, rss in samples if t >= warm_at), samples[-1][1])
    end = samples[-1][1]
    return {
        "unit": "MB",
        "seconds": p.delivery_soak_seconds,
        "rate": p.delivery_soak_rate,
        "runs_succeeded": int(row[0]),
        "runs_created": int(row[1]),
        "rss_warm": warm,
        "rss_end": end,
        "rss_max": max(rss for _t, rss in samples),
        "growth_pct": (end - warm) / warm * 100,
        "samples": samples,
        "load": load(),
    }


WRITES = (
    "SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
    " WHERE relname = %s"
)


def _writes(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(WRITES, [table]).fetchone()
    return int(row[0]) if row else 0


def breaker(ctx: Context, port: int, *, enabled: bool) -> dict[str, Any]:
    """Writes a dead destination costs, per waiting run and cool-down."""
    p = ctx.profile
    ctx.fresh_database()
    cooldown = p.breaker_cooldown
    http = {"BREAKER_COOLDOWN": cooldown, "BREAKER_COOLDOWN_MAX": cooldown}
    if not enabled:
        http["BREAKER_THRESHOLD"] = 0
    with ctx.connect() as conn:
        add_http_runs(conn, p.breaker_runs, f"http://127.0.0.1:{port}/fail", max_attempts=8)
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt")
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        time.sleep(1.5)
        before = {t: _writes(conn, t) for t in ("pgsched_job_run", "pgsched_attempt")}
        proc = replica(
            ctx.dsn,
            ctx.log(f"delivery-breaker-{'on' if enabled else 'off'}"),
            loops="executor,maintenance",
            concurrency=8,
            overrides=overrides(port, **http),
        )
        started = time.monotonic()
        opened_after = None
        try:
            if enabled:

                def opened() -> bool:
                    row = conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM pgsched_breaker WHERE opened > 0)"
                    ).fetchone()
                    return bool(row and row[0])

                wait_until(opened, timeout=60, what="the breaker to open")
                opened_after = time.monotonic() - started
            time.sleep(p.breaker_seconds)
        finally:
            proc.stop()
        elapsed = time.monotonic() - started
        time.sleep(1.5)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        after = {t: _writes(conn, t) for t in ("pgsched_job_run", "pgsched_attempt")}
        states = dict(
            conn.execute("SELECT status, count(*) FROM pgsched_job_run GROUP BY status").fetchall()
        )
        breaker_row = conn.execute("SELECT state, opened, failures FROM pgsched_breaker").fetchall()
    window = elapsed - (opened_after or 0)
    cooldowns = window / cooldown
    run_writes = after["pgsched_job_run"] - before["pgsched_job_run"]
    return {
        "runs": p.breaker_runs,
        "cooldown_s": cooldown,
        "seconds": elapsed,
        "opened_after_s": opened_after,
        "cooldowns": cooldowns,
        "job_run_writes": run_writes,
        "attempt_writes": after["pgsched_attempt"] - before["pgsched_attempt"],
        "writes_per_run_per_cooldown": run_writes / (p.breaker_runs * cooldowns),
        "run_statuses": states,
        "breaker": [list(r) for r in breaker_row],
        "load": load(),
    }


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    port = free_port()
    sink = Proc([sys.executable, "-m", "bench.sink", str(port)], env=django_env(ctx.dsn),
                log=ctx.log("sink"))  # fmt: skip
    try:
        wait_until(lambda: "listening" in sink.log.read_text(), timeout=30, what="the sink")
        result = {
            "throughput": throughput(ctx, port),
            "breaker_on": breaker(ctx, port, enabled=True),
            "breaker_off": breaker(ctx, port, enabled=False),
            "soak": soak(ctx, port),
        }
    finally:
        sink.stop()
    return result
