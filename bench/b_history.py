"""The history page of one tenant and one day: one month of runs against many (issue 10's goal).

Two databases: one with ``history_month_rows`` finished runs in the current
month (UTC), spread evenly over it and over ``history_tenants`` tenants; the
other with as many in each of ``history_months`` months up to this one. After
VACUUM ANALYZE, the page of one tenant's day (in the current month) is timed
in both, in alternating rounds so that the machine's load weighs on both
alike (``bench.history_probe``: Django's test client, the X-Tenant resolver,
``history_requests`` requests in all, each another tenant's day). The ratio
is many months over one (median request time), and the buffers the page's
statement touches (``EXPLAIN (ANALYZE, BUFFERS)``, which load does not
move). Whether ``pgsched_job_run`` is partitioned (and into how many
partitions) is recorded with each measurement.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from . import fixtures
from .context import TEMPLATE, Context
from .machine import load
from .procs import Proc, django_env
from .stats import summary

RESOLVER = {"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}
ONE = "bench_history_one"  # the database with one month of runs
CHUNK = 2000  # rows per INSERT


def month_start(day: date, back: int) -> date:
    """The first day of the month ``back`` months before ``day``'s."""
    index = day.year * 12 + day.month - 1 - back
    return date(index // 12, index % 12 + 1, 1)


def add_month(conn: psycopg.Connection[Any], first: date, rows: int, tenants: int) -> None:
    """``rows`` finished runs spread over the month starting ``first``, round robin over tenants."""
    last = month_start(first, -1)
    seconds = (last - first).days * 86400
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    ensure = conn.execute("SELECT to_regproc('pgsched_ensure_months') IS NOT NULL").fetchone()
    if ensure and ensure[0]:  # monthly partitions: a plain INSERT does not create the month
        conn.execute("SELECT pgsched_ensure_months(ARRAY[%s]::timestamptz[])", [start])
    # in statements of CHUNK rows (autocommit: a transaction each), so that a per-row
    # lock (the partitioned table's idempotency trigger) stays within the lock table
    for lo in range(1, rows + 1, CHUNK):
        conn.execute(
            """
            INSERT INTO pgsched_job_run
                   (schedule_name, scheduled_for, idempotency_key, job, kwargs, queue, status,
                    fire_after, attempts, max_attempts, timeout, started_at, finished_at, note,
                    tenant)
            SELECT 'report-' || (g %% 7), t, 'history:' || %(first)s || ':' || g, 'tests.noop',
                   '{}', 'default',
                   CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'succeeded' END,
                   t, 1, 3, interval '5 minutes', t, t + interval '20 milliseconds', '',
                   'tenant-' || (g %% %(tenants)s)
              FROM generate_series(%(lo)s::int, %(hi)s::int) g,
                   LATERAL (SELECT %(first)s::timestamptz
                                   + make_interval(secs => (g::bigint * %(seconds)s / %(rows)s)))
                        AS s(t)
            """,
            {
                "first": start,
                "lo": lo,
                "hi": min(rows, lo + CHUNK - 1),
                "rows": rows,
                "tenants": tenants,
                "seconds": seconds,
            },
        )


def layout(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgsched_job_run'::regclass"
    ).fetchone()
    size = conn.execute(  # a partitioned table's own size is 0: add its partitions'
        "SELECT pg_total_relation_size('pgsched_job_run')"
        " + coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits"
        " WHERE inhparent = 'pgsched_job_run'::regclass), 0)"
    ).fetchone()
    return {"partitions": row[0] if row else 0, "bytes": int(size[0]) if size else None}


def probe(ctx: Context, dsn: str, day: date, label: str, requests: int) -> dict[str, Any]:
    p = ctx.profile
    argv = [
        sys.executable,
        "-m",
        "bench.history_probe",
        str(requests),
        str(p.history_tenants),
        day.isoformat(),
    ]
    proc = Proc(
        argv,
        env=django_env(dsn, PGSCHED_BENCH_OVERRIDES=json.dumps(RESOLVER)),
        log=ctx.log(f"history-{label}"),
        stdout=True,
    )
    line = proc.readline()
    proc.stop()
    if not line:
        raise RuntimeError(f"the history probe failed; see {proc.log}")
    result: dict[str, Any] = json.loads(line)
    result["load"] = load()
    return result


def combined(rounds: list[dict[str, Any]], conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """The rounds' requests as one sample; the last round's plan and buffers."""
    seconds = [s for r in rounds for s in r["seconds"]]
    last = rounds[-1]
    return {
        "timing": summary(seconds),
        "round_medians": [summary(r["seconds"])["median"] for r in rounds],
        "buffers": last["buffers"],
        "buffers_by_round": [r["buffers"] for r in rounds],
        "execution_ms": last["execution_ms"],
        "planning_ms": last["planning_ms"],
        "plan": last["plan"],
        "results_per_page": last["results_per_page"],
        "statuses": sorted({s for r in rounds for s in r["statuses"]}),
        "loads": [r["load"] for r in rounds],
        **layout(conn),
    }


def run(ctx: Context) -> dict[str, Any]:
    """Two databases, one month and many; probed in alternation (the machine's load moves)."""
    ctx.fresh_database()
    ctx.cluster.create_database(ONE, template=TEMPLATE)
    p = ctx.profile
    today = datetime.now(UTC).date()
    this_month = month_start(today, 0)
    day = this_month + timedelta(days=min(14, (today - this_month).days))
    with ctx.connect(ONE) as conn:
        add_month(conn, this_month, p.history_month_rows, p.history_tenants)
        fixtures.settle(conn, "pgsched_job_run")
    with ctx.connect() as conn:
        for back in range(p.history_months):
            add_month(conn, month_start(today, back), p.history_month_rows, p.history_tenants)
        fixtures.settle(conn, "pgsched_job_run")
    rounds = 4
    per_round = max(10, p.history_requests // rounds)
    one: list[dict[str, Any]] = []
    many: list[dict[str, Any]] = []
    for i in range(rounds):
        one.append(probe(ctx, ctx.cluster.url(ONE), day, f"one-month-{i}", per_round))
        many.append(probe(ctx, ctx.dsn, day, f"many-months-{i}", per_round))
    with ctx.connect(ONE) as conn:
        one_month = combined(one, conn)
    with ctx.connect() as conn:
        many_months = combined(many, conn)
    ctx.cluster.sql("postgres", f'DROP DATABASE IF EXISTS "{ONE}" WITH (FORCE)')
    for label, result in (("1 month", one_month), (f"{p.history_months} months", many_months)):
        ctx.say(
            f"history: {label}: {result['timing']['median'] * 1000:.2f} ms, "
            f"{result['buffers']} buffers, {result['partitions']} partitions"
        )
    return {
        "unit": "s",
        "day": day.isoformat(),
        "month_rows": p.history_month_rows,
        "months": p.history_months,
        "tenants": p.history_tenants,
        "one_month": one_month,
        "many_months": many_months,
        "ratio": many_months["timing"]["median"] / one_month["timing"]["median"],
        "buffers_ratio": many_months["buffers"] / max(1, one_month["buffers"]),
    }
