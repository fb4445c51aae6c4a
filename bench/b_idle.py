"""Idle cost per replica: N schedules, none due within the hour, replicas running every loop.

Over a window: transactions committed in the benchmark database
(``pg_stat_database.xact_commit``), WAL written (``pg_current_wal_lsn()``; and,
from ``pg_waldump``, the records by relation, so that autovacuum's work in
other databases is told apart from the replicas'),
transaction ids consumed, statements executed (``pg_stat_statements``, the
bench's own probes excluded) and each replica's CPU (``/proc/<pid>/stat``). A
window with no replica running comes first; its rates are the baseline that
is subtracted (the probes themselves, autovacuum, the stats machinery).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now
from .machine import load
from .procs import Proc, replica, wait_ready

PROBE = "/* bench-probe */"
STARTUP_SECONDS = 15.0  # from the replicas' readiness to the window (see run())
STATEMENTS = f"""{PROBE}
SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE '%%bench-probe%%'
 ORDER BY calls DESC
 LIMIT 12
"""
COUNTERS = f"""{PROBE}
SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
         WHERE datname = current_database()),
       pg_current_wal_lsn() - '0/0'::pg_lsn,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND query NOT LIKE '%%bench-probe%%')
"""


def _counters(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(COUNTERS).fetchone()
    assert row is not None
    return tuple(int(x) for x in row)


def _lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(f"{PROBE} SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def _attribute(conn: psycopg.Connection[Any], records: dict[str, list[int]]) -> dict[str, Any]:
    """Name each record's relation and database; total the bytes in the benchmark database."""
    dbs = dict(conn.execute(f"{PROBE} SELECT oid::text, datname FROM pg_database").fetchall())
    here = conn.execute(f"{PROBE} SELECT current_database()").fetchone()[0]  # type: ignore[index]
    named: dict[str, list[int]] = {}
    ours = 0
    for key, (count, size) in records.items():
        kind, _, rel = key.partition(" ")
        name = "no relation"
        if "/" in rel:
            db, node = rel.split("/")
            relname = f"relfilenode {node}"
            if dbs.get(db) == here:
                row = conn.execute(
                    f"{PROBE} SELECT relname FROM pg_class WHERE pg_relation_filenode(oid) = %s",
                    (int(node),),
                ).fetchone()
                relname = row[0] if row else relname
                # pg_statistic is written by ANALYZE: autovacuum's (a replica's own
                # ANALYZE would be among the window's statements); kept in "records"
                if not relname.startswith("pg_statistic"):
                    ours += size
            name = f"{dbs.get(db, 'shared')}.{relname}"
        entry = named.setdefault(f"{kind} {name}", [0, 0])
        entry[0] += count
        entry[1] += size
    return {
        "bench_db_bytes": ours,
        "records": dict(sorted(named.items(), key=lambda kv: -kv[1][1])),
    }


def window(
    ctx: Context, conn: psycopg.Connection[Any], procs: list[Proc], seconds: float
) -> dict[str, Any]:
    """Rates over ``seconds``, the statements run, and the WAL records written."""
    conn.execute(f"{PROBE} SELECT pg_stat_statements_reset()")
    time.sleep(1.0)  # let the backends flush their pending statistics
    lsn0 = _lsn(conn)
    before, cpu0, t0 = _counters(conn), [p.cpu_seconds() for p in procs], time.monotonic()
    time.sleep(seconds)
    after, cpu1, t1 = _counters(conn), [p.cpu_seconds() for p in procs], time.monotonic()
    lsn1 = _lsn(conn)
    dt = t1 - t0
    xacts, wal, xids, statements = (a - b for a, b in zip(after, before, strict=True))
    top = [(int(calls), text) for calls, text in conn.execute(STATEMENTS).fetchall()]
    records = _attribute(conn, ctx.cluster.wal_records(lsn0, lsn1))
    return {
        "statements": top,
        "wal_records": records["records"],
        "wal_bytes_bench_db_per_s": records["bench_db_bytes"] / dt,
        "seconds": dt,
        "xacts_per_s": xacts / dt,
        "wal_bytes_per_s": wal / dt,
        "xids_per_s": xids / dt,
        "statements_per_s": statements / dt,
        "cpu_per_replica": (sum(cpu1) - sum(cpu0)) / dt / max(1, len(procs)),
    }


def _net(measured: dict[str, Any], base: dict[str, Any], n: int) -> dict[str, Any]:
    out = dict(measured)
    for key in (
        "xacts_per_s",
        "wal_bytes_per_s",
        "wal_bytes_bench_db_per_s",
        "xids_per_s",
        "statements_per_s",
    ):
        out[f"{key}_per_replica"] = max(0.0, measured[key] - base[key]) / n
    return out


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    with ctx.connect() as conn:
        now = db_now(conn)
        top = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
        fixtures.add_cron_schedules(conn, p.idle_schedules, cron="0 * * * *", next_fire_at=top)
        fixtures.settle(conn)
        base = window(ctx, conn, [], p.idle_seconds)
        ctx.say(f"idle: baseline {base['xacts_per_s']:.2f} xacts/s with no replica")
        out: dict[str, Any] = {"baseline": base, "schedules": p.idle_schedules}
        for n in (1, 2):
            procs = [replica(ctx.dsn, ctx.log(f"idle-{n}-{i}"), concurrency=8) for i in range(n)]
            try:
                wait_ready(conn, procs, ("planner", "executor", "maintenance", "listener"))
                # start-up: first passes, the listener's reconciliation, and the
                # statistics of the start-up's sessions, which a backend that then
                # stays idle reports up to 10 s later (PostgreSQL's idle flush): a
                # shorter wait counted start-up transactions as idle ones
                time.sleep(STARTUP_SECONDS)
                measured = _net(window(ctx, conn, procs, p.idle_seconds), base, n)
            finally:
                for proc in procs:
                    proc.stop()
            measured["load"] = load()
            out[f"replicas_{n}"] = measured
            ctx.say(
                f"idle: {n} replica(s): {measured['xacts_per_s_per_replica']:.2f} xacts/s, "
                f"{measured['wal_bytes_per_s_per_replica']:.0f} WAL B/s, "
                f"{measured['statements_per_s_per_replica']:.2f} statements/s per replica"
            )
    return out
