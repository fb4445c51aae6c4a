"""Memory: a replica's RSS over a soak at steady load.

One replica (every loop, concurrency 8) serves ``soak_schedules`` interval
schedules at 1 s (that many runs a second) of ``bench.noop``, which keeps
nothing (``tests.noop`` appends each call to a list for the unit tests). RSS
(``VmRSS``) is sampled every 2 s; growth is measured from the sample after a
30 s warm-up (imports, connections, caches filling) to the end.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from . import fixtures
from .context import Context, db_now
from .machine import load
from .procs import replica, wait_ready

WARM = 30.0


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    samples: list[tuple[float, float]] = []
    with ctx.connect() as conn:
        proc = replica(ctx.dsn, ctx.log("soak"), concurrency=8)
        try:
            wait_ready(conn, [proc], ("planner", "executor", "maintenance", "listener"))
            started = time.monotonic()
            anchor = db_now(conn).replace(microsecond=0) + timedelta(seconds=2)
            fixtures.add_interval_schedules(
                conn, p.soak_schedules, every_s=1, anchor=anchor, job="bench.noop"
            )
            while (elapsed := time.monotonic() - started) < p.soak_seconds:
                samples.append((round(elapsed, 1), round(proc.rss_mb(), 2)))
                time.sleep(2.0)
            samples.append((round(time.monotonic() - started, 1), round(proc.rss_mb(), 2)))
        finally:
            proc.stop()
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM pgsched_job_run"
        ).fetchone()
        assert row is not None
    warm = next((rss for t, rss in samples if t >= WARM), samples[-1][1])
    end = samples[-1][1]
    return {
        "unit": "MB",
        "seconds": p.soak_seconds,
        "runs_succeeded": int(row[0]),
        "runs_created": int(row[1]),
        "rss_start": samples[0][1],
        "rss_warm": warm,
        "rss_end": end,
        "rss_max": max(rss for _t, rss in samples),
        "growth_pct": (end - warm) / warm * 100,
        "samples": samples,
        "load": load(),
    }
