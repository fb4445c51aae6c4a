"""Side by side with celery beat: N schedules firing every minute, what each scheduler produces.

For each size N (quick: 1k, 10k; full: 1k, 10k, 50k, 100k), three cells, one
after the other, each with N every-minute schedules (``* * * * *``, UTC):

- **celery beat** 5.x with django-celery-beat's ``DatabaseScheduler`` (in its own
  venv, ``bench/peers/celerybeat_peer.py``), its tables in a database of the
  private cluster, sending to the machine's Redis (a database of its own,
  ``PGSCHED_BENCH_REDIS``, default ``redis://127.0.0.1:6379/13``, flushed before
  and after: nothing else in that Redis is touched). One shared crontab, as in
  the admin; beat started as its documentation says (``-l INFO``).
- **django-pgsched, 1 replica** and **2 replicas**: ``runscheduler --loops
  planner``. Beat only sends; the planner only creates the runs (no executor),
  so both produce the same thing: an occurrence handed to whatever executes it.

A cell starts one second after a minute boundary (by the database's clock):
fill, start the scheduler, then observe the first ``beat_minutes`` boundaries
B₁ … B_M that follow, until a minute after the last. What is measured:

- **produced**: beat's messages, counted **from the broker** (a consumer pops
  the Redis list and timestamps each message with its ``periodic_task_name``
  header), and our runs, counted in ``pgsched_job_run``;
- **lateness** against the boundary: a message's arrival minus the boundary it
  serves (the first boundary after that task's previous send: beat coalesces
  what it missed into one send), a run's ``created_at`` minus its
  ``scheduled_for`` (negative: made before the boundary);
- per boundary: how many of the N were produced, and when the last one was;
- CPU of the scheduler process(es) and of the server (``/proc``), peak RSS,
  commits per second in the scheduler's database (``pg_stat_database``);
- for ours, the planner's passes per boundary (runs made in one pass share
  ``created_at``) and the size, dead rows and vacuums of ``pgsched_schedule``
  and its due index, sampled every ten seconds.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from . import fixtures
from .context import Context, db_now, server_cpu_seconds
from .machine import load
from .procs import Proc, replica, wait_ready
from .stats import percentile

VENV = "celerybeat"
PEER = "celerybeat_peer"
PEER_DB = "peer_beat"
REDIS = os.environ.get("PGSCHED_BENCH_REDIS", "redis://127.0.0.1:6379/13")
CRON = "* * * * *"
MINUTE = timedelta(minutes=1)
SAMPLE_EVERY = 10.0  # seconds between table-size samples and RSS readings


def _align(conn: psycopg.Connection[Any]) -> datetime:
    """Sleep until one second past the next minute boundary (unless just past one)."""
    now = db_now(conn)
    if now.second >= 3:
        start = now.replace(second=1, microsecond=0) + MINUTE
        time.sleep((start - now).total_seconds())
    return db_now(conn)


def _boundaries(started: datetime, minutes: int) -> list[datetime]:
    first = started.replace(second=0, microsecond=0) + MINUTE
    return [first + i * MINUTE for i in range(minutes)]


def _commits(conn: psycopg.Connection[Any], db: str) -> int:
    row = conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,)
    ).fetchone()
    return int(row[0]) if row else 0


SIZES = """
SELECT c.relname, pg_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       coalesce(s.autovacuum_count, 0), coalesce(s.autoanalyze_count, 0)
  FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.relname IN ('pgsched_schedule', 'pgsched_schedule_due_idx', 'pgsched_schedule_pkey',
                     'pgsched_job_run')
"""


# the planner's two statements, by their first words (queries.sql), so far: calls, ms, and
# what does not depend on the machine's load: buffers hit, read, dirtied, WAL full pages, bytes
STATEMENTS = """
SELECT CASE WHEN query LIKE 'WITH clock AS%%' THEN 'claim' ELSE 'apply' END,
       sum(calls), sum(total_exec_time), sum(shared_blks_hit), sum(shared_blks_read),
       sum(shared_blks_dirtied), sum(wal_fpi), sum(wal_bytes)
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND (query LIKE 'WITH clock AS%%pgsched_schedule%%' OR query LIKE 'WITH job_default AS%%')
 GROUP BY 1
"""


class Window:
    """Wait for the boundaries; read CPU, RSS, commits (and ours: table sizes) meanwhile."""

    def __init__(self, ctx: Context, db: str, procs: list[Proc], boundaries: list[datetime]):
        self.ctx, self.db, self.procs, self.boundaries = ctx, db, procs, boundaries
        self.rss: list[float] = []
        self.samples: list[dict[str, Any]] = []

    def run(self, conn: psycopg.Connection[Any], *, sizes: bool) -> dict[str, Any]:
        first, end = self.boundaries[0], self.boundaries[-1] + MINUTE
        time.sleep(max(0.0, (first - db_now(conn)).total_seconds()))
        cpu0 = [p.cpu_seconds() for p in self.procs]
        server0 = server_cpu_seconds(self.ctx.cluster)
        commits0, t0 = _commits(conn, self.db), db_now(conn)
        while (now := db_now(conn)) < end:
            for proc in self.procs:
                if not proc.alive():
                    raise RuntimeError(f"{' '.join(proc.argv)} exited; see {proc.log}")
            self.rss.append(sum(p.rss_mb() for p in self.procs))
            if sizes:
                rows = conn.execute(SIZES).fetchall()
                statements = conn.execute(STATEMENTS).fetchall()
                self.samples.append(
                    {
                        "at": (now - first).total_seconds(),
                        **{r[0]: [int(x) for x in r[1:]] for r in rows},
                        **{r[0]: [float(x) for x in r[1:]] for r in statements},
                    }
                )
            time.sleep(min(SAMPLE_EVERY, max(0.0, (end - now).total_seconds())))
        seconds = (db_now(conn) - t0).total_seconds()
        cpu = sum(p.cpu_seconds() for p in self.procs) - sum(cpu0)
        return {
            "seconds": seconds,
            "cpu_cores": cpu / seconds,
            "cpu_cores_per_process": cpu / seconds / max(1, len(self.procs)),
            "server_cpu_cores": (server_cpu_seconds(self.ctx.cluster) - server0) / seconds,
            "commits_per_s": (_commits(conn, self.db) - commits0) / seconds,
            "rss_mb_max": max(self.rss, default=None),
            "rss_mb_max_per_process": max(self.rss, default=0.0) / max(1, len(self.procs)),
        }


def _distribution(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50": percentile(values, 50) if values else None,
        "p99": percentile(values, 99) if values else None,
        "max": max(values) if values else None,
        "min": min(values) if values else None,
    }


def _summary(
    n: int, boundaries: list[datetime], late: dict[datetime, list[float]]
) -> dict[str, Any]:
    everything = [x for b in boundaries for x in late.get(b, [])]
    return {
        "schedules": n,
        "boundaries": [b.isoformat() for b in boundaries],
        "produced_per_min": len(everything) / len(boundaries),
        "expected_per_min": n,
        "missing": n * len(boundaries) - len(everything),
        "lateness_s": _distribution(everything),
        "per_boundary": [_distribution(late.get(b, [])) for b in boundaries],
    }


# -- celery beat -------------------------------------------------------------------------


def attribute(lines: list[tuple[float, str]], since: float) -> dict[float, list[float]]:
    """Lateness of each send by the boundary it serves (epoch seconds of the boundary).

    A send serves the first boundary after the same task's previous send (or
    after ``since``, when the tasks were created): beat sends once for all the
    boundaries it missed since. A send with no boundary since the previous one
    (none expected) is not counted.
    """
    previous: dict[str, float] = {}
    late: dict[float, list[float]] = {}
    for at, name in sorted(lines):
        after = previous.get(name, since)
        boundary = (after // 60 + 1) * 60
        previous[name] = at
        if boundary <= at:
            late.setdefault(boundary, []).append(at - boundary)
    return late


def beat_cell(ctx: Context, n: int) -> dict[str, Any]:
    p = ctx.profile
    ctx.peer_run(VENV, PEER, "flush", REDIS, db=PEER_DB)
    with ctx.connect(PEER_DB) as conn:
        conn.execute(
            "TRUNCATE django_celery_beat_periodictask, django_celery_beat_crontabschedule,"
            " django_celery_beat_periodictasks CASCADE"
        )
        for table in ("periodictask", "crontabschedule"):
            conn.execute(f"VACUUM ANALYZE django_celery_beat_{table}")
        conn.execute("CHECKPOINT")
        started = _align(conn)
        ctx.peer_run(VENV, PEER, "fill", str(n), db=PEER_DB)
        sends = ctx.log(f"beat-{n}-sends").with_suffix(".txt")
        consumer = ctx.peer_proc(VENV, PEER, "consume", REDIS, str(sends), db=PEER_DB, stdout=True)
        if consumer.readline() != "ready":
            raise RuntimeError(f"the broker consumer did not start; see {consumer.log}")
        beat = ctx.peer_proc(VENV, PEER, "beat", REDIS, p.beat_loglevel, db=PEER_DB)
        boundaries = _boundaries(started, p.beat_minutes)
        try:
            window = Window(ctx, PEER_DB, [beat], boundaries).run(conn, sizes=False)
        finally:
            beat.stop()
            time.sleep(1.0)  # let the consumer pop what beat sent last
            consumer.stop()
            ctx.peer_run(VENV, PEER, "flush", REDIS, db=PEER_DB)
    lines = []
    for line in Path(sends).read_text().splitlines():
        at, name = line.split(" ", 1)
        lines.append((float(at), name))
    by_epoch = attribute(lines, started.timestamp())
    late = {b: by_epoch.get(b.timestamp(), []) for b in boundaries}
    return {**_summary(n, boundaries, late), **window, "sends_total": len(lines), "load": load()}


# -- django-pgsched ----------------------------------------------------------------------

OURS = """
SELECT scheduled_for, extract(epoch FROM created_at - scheduled_for), created_at
  FROM pgsched_job_run
 WHERE scheduled_for >= %s AND scheduled_for <= %s
"""


def ours_cell(ctx: Context, n: int, replicas: int) -> dict[str, Any]:
    p = ctx.profile
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.settle(conn)
        started = _align(conn)
        boundaries = _boundaries(started, p.beat_minutes)
        fixtures.add_cron_schedules(conn, n, cron=CRON, next_fire_at=boundaries[0])
        conn.execute("ANALYZE pgsched_schedule")
        procs = [
            replica(ctx.dsn, ctx.log(f"beatcell-ours-{n}-{replicas}-{i}"), loops="planner")
            for i in range(replicas)
        ]
        try:
            wait_ready(conn, procs, ("planner",))
            window = Window(ctx, "bench", procs, boundaries)
            measured = window.run(conn, sizes=True)
        finally:
            for proc in procs:
                proc.stop()
        rows = conn.execute(OURS, (boundaries[0], boundaries[-1])).fetchall()
    late: dict[datetime, list[float]] = {}
    passes: dict[datetime, set[datetime]] = {}
    for scheduled_for, seconds, created in rows:
        late.setdefault(scheduled_for, []).append(float(seconds))
        passes.setdefault(scheduled_for, set()).add(created)
    planner = [_passes(sorted(passes.get(b, ()))) for b in boundaries]
    return {
        **_summary(n, boundaries, late),
        **measured,
        "planner_passes": planner,
        "table_samples": window.samples,
        "load": load(),
    }


def _passes(starts: list[datetime]) -> dict[str, Any]:
    """The planner's passes that made one boundary's runs: how many, and how far apart."""
    gaps = [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(starts)]
    return {
        "passes": len(starts),
        "span_s": (starts[-1] - starts[0]).total_seconds() if starts else None,
        "gap_ms_p50": percentile(gaps, 50) if gaps else None,
        "gap_ms_max": max(gaps) if gaps else None,
    }


def versions(ctx: Context) -> dict[str, str]:
    """The versions in beat's venv (and the Redis server's)."""
    dists = ("celery", "django-celery-beat", "kombu", "redis", "Django", "psycopg")
    script = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({d: m.version(d) for d in sys.argv[1:]}))"
    )
    done = subprocess.run(
        [ctx.peer_python(VENV), "-c", script, *dists], capture_output=True, text=True, check=True
    )
    found: dict[str, str] = json.loads(done.stdout)
    return found


def run(ctx: Context) -> dict[str, Any]:
    p = ctx.profile
    ctx.fresh_database()
    ctx.cluster.create_database(PEER_DB)
    ctx.peer_run(VENV, PEER, "setup", db=PEER_DB)
    out: dict[str, Any] = {
        "minutes": p.beat_minutes,
        "redis": REDIS,
        "beat_loglevel": p.beat_loglevel,
        "versions": versions(ctx),
        "sizes": {},
    }
    for n in p.beat_sizes:
        cells: dict[str, Any] = {}
        try:
            cells["beat"] = beat_cell(ctx, n)
        except Exception as exc:  # e.g. no Redis here: ours are still measured
            ctx.say(f"beat {n}: failed: {exc}")
            cells["beat"] = {"error": f"{type(exc).__name__}: {exc}"}
        else:
            _say(ctx, f"celery beat, {n:,}", cells["beat"])
        for r in p.beat_replicas:
            cells[f"ours_{r}"] = ours_cell(ctx, n, r)
            _say(ctx, f"django-pgsched {r} replica(s), {n:,}", cells[f"ours_{r}"])
        out["sizes"][str(n)] = cells
    return out


def _say(ctx: Context, label: str, cell: dict[str, Any]) -> None:
    late = cell["lateness_s"]
    ctx.say(
        f"beat cell: {label}: {cell['produced_per_min']:,.0f}/min of {cell['expected_per_min']:,}, "
        f"lateness p50 {late['p50'] if late['p50'] is not None else float('nan'):.2f} s, "
        f"max {late['max'] if late['max'] is not None else float('nan'):.2f} s, "
        f"CPU {cell['cpu_cores']:.2f} + server {cell['server_cpu_cores']:.2f} cores, "
        f"RSS {cell['rss_mb_max'] or 0:.0f} MB, {cell['commits_per_s']:.1f} commits/s"
    )
