"""Claims through NATS JetStream beside SKIP LOCKED (PGSCHED["CLAIMS"]), in one run.

``python -m bench.b_broker`` starts a private PostgreSQL cluster (bench/cluster.py)
and a private ``nats-server -js`` on a loopback port, then for each transport
(``postgres``, ``nats``; interleaved, ``--reps`` times):

- **throughput**: ``--replicas`` (4) real ``runscheduler --loops executor``
  processes at ``--concurrency`` each drain a queue of due no-op runs (filled
  with SQL; with ``nats`` the outbox triggers are on, so the fill writes the
  outbox, and the window starts once the replicas' publishers have published
  it all: this cell measures claiming; the lateness cell measures the whole
  path, publishing included). Over a
  window, counted in the database: runs/s (``finished_at``), PostgreSQL
  transactions per run (``pg_stat_database.xact_commit``), WAL bytes per run,
  database CPU per run (the cluster's processes, ``/proc``) and the
  replicas' CPU per run.
- **lateness**: the same replicas with all loops and ``--schedules`` interval
  schedules (20 s apart in phase, so ``schedules / 20`` runs fall due each
  second): start lateness ``attempt.started_at − run.fire_after`` of attempt 1.
- **saturation** (``--saturation``): the ``postgres`` throughput cell at
  growing concurrency, to find where the primary stops giving more runs/s
  (runs/s and the database's share of the machine's CPU).
- **replica counts** (``--replica-counts 2,4,6,8``): the throughput cell of
  both transports at each replica count, to find where (if anywhere) the
  broker path overtakes ``SKIP LOCKED``, with each path's CPU per run on the
  primary and in the replicas.

The machine is shared and has two cores: read the ratios of one run, not the
absolute figures; the JSON goes to ``bench/results/<UTC>-broker.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from tests.natsutil import NatsServer

from . import fixtures
from .cluster import private_cluster
from .context import Context, db_now, server_cpu_seconds, wait_until, wal_lsn
from .machine import load
from .procs import Proc, replica, stop_all, wait_ready
from .profiles import QUICK
from .stats import percentile

RESULTS = Path(__file__).resolve().parent / "results"
TRIGGERS = ("pgsched_run_outbox_insert", "pgsched_run_outbox_update")


def outbox(conn: psycopg.Connection[Any], on: bool) -> None:
    verb = "ENABLE" if on else "DISABLE"
    for name in TRIGGERS:
        conn.execute(f"ALTER TABLE pgsched_job_run {verb} TRIGGER {name}")


def reset(conn: psycopg.Connection[Any]) -> None:
    fixtures.reset(conn)
    conn.execute("TRUNCATE pgsched_claim_outbox")


def commits(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database"
        " WHERE datname = current_database()"
    ).fetchone()
    assert row is not None
    return int(row[0])


def overrides(transport: str, nats_url: str, tag: str) -> str:
    claims: dict[str, Any] = {"TRANSPORT": transport}
    if transport == "nats":
        claims |= {
            "NATS_URL": nats_url,
            "STREAM": f"BENCH_{tag}",
            "SUBJECT_PREFIX": f"bench.{tag}.runs",
        }
    return json.dumps({"CLAIMS": claims, "RETENTION": None})


def start(
    ctx: Context,
    conn: psycopg.Connection[Any],
    n: int,
    *,
    loops: str,
    concurrency: int,
    settings: str,
    roles: tuple[str, ...],
) -> list[Proc]:
    procs = [
        replica(ctx.dsn, ctx.log(f"replica-{i}"), loops=loops, concurrency=concurrency,
                overrides=settings)
        for i in range(n)
    ]  # fmt: skip
    try:
        wait_ready(conn, procs, roles)
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return procs


def throughput(
    ctx: Context, transport: str, nats_url: str, *, replicas: int, concurrency: int,
    count: int, warm: float, window: float,
) -> dict[str, Any]:  # fmt: skip
    tag = uuid.uuid4().hex[:8]
    with ctx.connect() as conn:
        conn.autocommit = True
        reset(conn)
        outbox(conn, transport == "nats")
        fixtures.add_pending_runs(conn, count)
        fixtures.settle(conn, "pgsched_job_run", "pgsched_attempt", "pgsched_claim_outbox")
        roles = ("executor",) if transport == "postgres" else ("executor", "publisher")
        procs = start(
            ctx, conn, replicas, loops="executor", concurrency=concurrency,
            settings=overrides(transport, nats_url, tag), roles=roles,
        )  # fmt: skip
        try:
            wait_until(
                lambda: bool(conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM pgsched_job_run WHERE finished_at IS NOT NULL)"
                ).fetchone()[0]),  # type: ignore[index]
                timeout=90, what="the first completion",
            )  # fmt: skip
            if transport == "nats":
                # the queue was filled at once: let the publishers publish it first, so
                # that the window measures claiming (publishing is in the lateness cell)
                wait_until(
                    lambda: not conn.execute(
                        "SELECT EXISTS (SELECT 1 FROM pgsched_claim_outbox)"
                    ).fetchone()[0],  # type: ignore[index]
                    timeout=180, what="the outbox to be published",
                )  # fmt: skip
            time.sleep(warm)
            t0, wal0, x0 = db_now(conn), wal_lsn(conn), commits(conn)
            s0 = server_cpu_seconds(ctx.cluster)
            c0 = sum(p.cpu_seconds() for p in procs)
            time.sleep(window)
            t1, wal1, x1 = db_now(conn), wal_lsn(conn), commits(conn)
            s1 = server_cpu_seconds(ctx.cluster)
            c1 = sum(p.cpu_seconds() for p in procs)
            left = conn.execute(
                "SELECT count(*) FROM pgsched_job_run WHERE status = 'pending'"
            ).fetchone()[0]  # type: ignore[index]
        finally:
            for proc in procs:
                proc.stop()
        done = int(
            conn.execute(
                "SELECT count(*) FROM pgsched_job_run WHERE finished_at >= %s AND finished_at < %s",
                (t0, t1),
            ).fetchone()[0]  # type: ignore[index]
        )
        outbox(conn, False)
    seconds = (t1 - t0).total_seconds()
    return {
        "transport": transport,
        "replicas": replicas,
        "concurrency": concurrency,
        "rate": done / seconds,
        "completed": done,
        "seconds": seconds,
        "drained": left == 0,
        "xact_per_run": (x1 - x0) / done if done else None,
        "wal_per_run": (wal1 - wal0) / done if done else None,
        "db_cpu_ms_per_run": 1000 * (s1 - s0) / done if done else None,
        "db_cpu_share": (s1 - s0) / seconds / (os.cpu_count() or 1),
        "replica_cpu_ms_per_run": 1000 * (c1 - c0) / done if done else None,
        "load": load(),
    }


def lateness(
    ctx: Context, transport: str, nats_url: str, *, replicas: int, concurrency: int,
    schedules: int, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    tag = uuid.uuid4().hex[:8]
    with ctx.connect() as conn:
        conn.autocommit = True
        reset(conn)
        outbox(conn, transport == "nats")
        roles = ("planner", "executor")
        procs = start(
            ctx, conn, replicas, loops="planner,executor,maintenance", concurrency=concurrency,
            settings=overrides(transport, nats_url, tag), roles=roles,
        )  # fmt: skip
        try:
            time.sleep(2)
            now = db_now(conn)
            anchor = now.replace(microsecond=0)
            conn.execute(
                """
                INSERT INTO pgsched_schedule (name, job, kwargs, "interval", anchor, next_fire_at,
                       misfire_policy, catch_up_limit, updated_at)
                SELECT 'late-' || g, 'tests.noop', '{}', interval '20 seconds',
                       %(anchor)s + (g %% 20) * interval '1 second', NULL, 'skip', 10, now()
                  FROM generate_series(1, %(n)s) g
                """,
                {"anchor": anchor, "n": schedules},
            )
            conn.execute("SELECT pg_notify('pgsched_schedule', '')")
            time.sleep(5)  # warm-up
            since = db_now(conn)
            x0, s0, wal0 = commits(conn), server_cpu_seconds(ctx.cluster), wal_lsn(conn)
            time.sleep(seconds)
            until = db_now(conn)
            x1, s1, wal1 = commits(conn), server_cpu_seconds(ctx.cluster), wal_lsn(conn)
            time.sleep(3)  # let the last due runs start
        finally:
            for proc in procs:
                proc.stop()
        rows = conn.execute(
            """
            SELECT extract(epoch FROM a.started_at - r.fire_after) * 1000
              FROM pgsched_job_run r
              LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1
             WHERE r.fire_after >= %s AND r.fire_after < %s
            """,
            (since, until),
        ).fetchall()
        conn.execute("DELETE FROM pgsched_schedule")
        outbox(conn, False)
    ms = [float(r[0]) for r in rows if r[0] is not None]
    runs = len(rows)
    return {
        "transport": transport,
        "runs": runs,
        "never_started": runs - len(ms),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else None,
        "xact_per_run": (x1 - x0) / runs if runs else None,
        "wal_per_run": (wal1 - wal0) / runs if runs else None,
        "db_cpu_ms_per_run": 1000 * (s1 - s0) / runs if runs else None,
        "load": load(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.b_broker", description=__doc__)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--count", type=int, default=60000, help="runs queued per cell")
    parser.add_argument("--warm", type=float, default=3.0)
    parser.add_argument("--window", type=float, default=12.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--schedules", type=int, default=400)
    parser.add_argument("--lateness-seconds", type=float, default=20.0)
    parser.add_argument("--saturation", default="", help="concurrencies, e.g. 1,4,16,32")
    parser.add_argument("--skip-lateness", action="store_true")
    parser.add_argument(
        "--skip-throughput", action="store_true", help="leave out the --replicas cells"
    )
    parser.add_argument(
        "--replica-counts",
        default="",
        help="the throughput cells again at each replica count, both transports, e.g. 2,4,6,8"
        " (where, if anywhere, the broker overtakes SKIP LOCKED)",
    )
    parser.add_argument(
        "--saturation-transports", default="postgres", help="postgres, or postgres,nats"
    )
    args = parser.parse_args(argv)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out: dict[str, Any] = {"started": stamp, "args": vars(args), "throughput": [],
                           "lateness": [], "saturation": [], "replicas": []}  # fmt: skip
    logs = Path(tempfile.mkdtemp(prefix="pgsched-bench-broker-"))
    nats_root = logs / "nats"
    try:
        with private_cluster() as cluster, NatsServer(nats_root).start() as nats:
            ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=logs)
            ctx.say(f"logs in {logs}; nats at {nats.url}")
            ctx.migrate_template()
            ctx.fresh_database()
            out["postgres"] = cluster.settings()
            for rep in range(args.reps):
                for transport in ("postgres", "nats") if not args.skip_throughput else ():
                    r = throughput(
                        ctx, transport, nats.url, replicas=args.replicas,
                        concurrency=args.concurrency, count=args.count, warm=args.warm,
                        window=args.window,
                    )  # fmt: skip
                    out["throughput"].append(r)
                    ctx.say(f"throughput rep {rep + 1} {transport}: {json.dumps(r)}")
                if not args.skip_lateness:
                    for transport in ("postgres", "nats"):
                        r = lateness(
                            ctx, transport, nats.url, replicas=args.replicas,
                            concurrency=args.concurrency, schedules=args.schedules,
                            seconds=args.lateness_seconds,
                        )  # fmt: skip
                        out["lateness"].append(r)
                        ctx.say(f"lateness rep {rep + 1} {transport}: {json.dumps(r)}")
            counts = [int(x) for x in args.replica_counts.split(",") if x]
            for rep in range(args.reps if counts else 0):
                for n in counts:
                    for transport in ("postgres", "nats"):
                        r = throughput(
                            ctx, transport, nats.url, replicas=n,
                            concurrency=args.concurrency, count=args.count, warm=args.warm,
                            window=args.window,
                        )  # fmt: skip
                        out["replicas"].append(r)
                        ctx.say(f"replicas {n} rep {rep + 1} {transport}: {json.dumps(r)}")
            for c in [int(x) for x in args.saturation.split(",") if x]:
                count = max(args.count, int(args.count * c / args.concurrency))
                for transport in args.saturation_transports.split(","):
                    r = throughput(
                        ctx, transport, nats.url, replicas=args.replicas, concurrency=c,
                        count=count, warm=args.warm, window=args.window,
                    )  # fmt: skip
                    out["saturation"].append(r)
                    ctx.say(f"saturation {transport} c{c}: {json.dumps(r)}")
    finally:
        stop_all()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{stamp}-broker.json"
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(report(out))
    print(f"\nresults: {path}", file=sys.stderr)
    return 0


def _median(values: list[float | None]) -> float | None:
    clean = sorted(v for v in values if v is not None)
    if not clean:
        return None
    middle = len(clean) // 2
    return clean[middle] if len(clean) % 2 else (clean[middle - 1] + clean[middle]) / 2


def report(out: dict[str, Any]) -> str:
    """The comparison table (medians over the repetitions), Markdown."""
    lines = [
        "Medians of the repetitions; runs/s as median (min–max).",
        "",
        "| transport | runs/s | PG xacts/run | WAL bytes/run | DB CPU ms/run | replicas CPU ms/run"
        " | lateness p50 / p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for transport in ("postgres", "nats"):
        t = [r for r in out["throughput"] if r["transport"] == transport]
        late = [r for r in out["lateness"] if r["transport"] == transport]

        def med(rows: list[dict[str, Any]], key: str) -> float | None:
            return _median([r[key] for r in rows])

        def f(v: float | None, digits: int = 0) -> str:
            return "-" if v is None else f"{v:,.{digits}f}"

        rates = [r["rate"] for r in t]
        spread = f" ({min(rates):,.0f}–{max(rates):,.0f})" if rates else ""
        lines.append(
            f"| {transport} | {f(med(t, 'rate'))}{spread} | {f(med(t, 'xact_per_run'), 2)}"
            f" | {f(med(t, 'wal_per_run'))} | {f(med(t, 'db_cpu_ms_per_run'), 3)}"
            f" | {f(med(t, 'replica_cpu_ms_per_run'), 2)}"
            f" | {f(med(late, 'p50_ms'))} / {f(med(late, 'p99_ms'))} |"
        )
    if out.get("saturation"):
        lines += ["", "| transport | concurrency × replicas | runs/s | DB CPU share"
                  " | DB CPU ms/run | WAL bytes/run |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for r in out["saturation"]:
            drained = " (queue drained: a lower bound)" if r["drained"] else ""
            lines.append(
                f"| {r['transport']} | {r['concurrency']} × {r['replicas']}"
                f" | {r['rate']:,.0f}{drained} | {100 * r['db_cpu_share']:.0f}%"
                f" | {r['db_cpu_ms_per_run']:.3f} | {r['wal_per_run']:,.0f} |"
            )
    if out.get("replicas"):
        lines += ["", "By replica count (medians of the repetitions; nats ÷ postgres in the"
                  " same run):", "",
                  "| replicas × concurrency | postgres runs/s | nats runs/s | nats ÷ postgres"
                  " | DB CPU ms/run pg / nats | replicas CPU ms/run pg / nats"
                  " | DB CPU share pg / nats |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for n in sorted({r["replicas"] for r in out["replicas"]}):
            cells = {
                t: [r for r in out["replicas"] if r["replicas"] == n and r["transport"] == t]
                for t in ("postgres", "nats")
            }

            def m(t: str, key: str, cells: dict[str, list[dict[str, Any]]] = cells) -> float | None:
                return _median([r[key] for r in cells[t]])

            pg, nats = m("postgres", "rate"), m("nats", "rate")
            ratio = f"{nats / pg:.2f}" if pg and nats else "-"
            emptied = any(r["drained"] for rows in cells.values() for r in rows)
            mark = " (a queue drained: lower bounds)" if emptied else ""
            lines.append(
                f"| {n} × {cells['postgres'][0]['concurrency']} | {pg or 0:,.0f} | {nats or 0:,.0f}"
                f" | {ratio}{mark}"
                f" | {m('postgres', 'db_cpu_ms_per_run') or 0:.3f} /"
                f" {m('nats', 'db_cpu_ms_per_run') or 0:.3f}"
                f" | {m('postgres', 'replica_cpu_ms_per_run') or 0:.3f} /"
                f" {m('nats', 'replica_cpu_ms_per_run') or 0:.3f}"
                f" | {100 * (m('postgres', 'db_cpu_share') or 0):.0f}% /"
                f" {100 * (m('nats', 'db_cpu_share') or 0):.0f}% |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
