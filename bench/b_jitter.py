"""The 100k burst with and without jitter: does jitter flatten the peak claim rate?

Each variant: ``burst_schedules`` cron schedules all due at the same second T
(a daily six-field cron at T's time of day), two replicas with all loops, as in
``b_lateness.burst``; the jittered variant gives every schedule
``jitter = 60 s``. Measured by the database's clock from the attempt rows:

- claims per second since T (attempt 1's ``started_at``), and its peak;
- the time from T until every run started;
- start lateness from ``fire_after`` (jitter is not lateness).

``scripts/bench --quick --only jitter`` (an extra cell, not in the default run);
``python -m bench.plot_jitter RESULT.json OUT.png`` draws the two timelines.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from . import fixtures
from .b_lateness import _distribution, _start, _stop, lateness_ms
from .context import Context, db_now, wait_until
from .machine import load

JITTER_S = 60


def _burst(ctx: Context, jitter_s: int) -> dict[str, Any]:
    p = ctx.profile
    n = p.burst_schedules
    with ctx.connect() as conn:
        fixtures.reset(conn)
        fixtures.settle(conn)
        procs = _start(ctx, conn, 2, p.burst_concurrency)
        try:
            due = db_now(conn).replace(microsecond=0) + timedelta(seconds=12)
            cron = f"{due.second} {due.minute} {due.hour} * * *"
            fixtures.add_cron_schedules(
                conn, n, cron=cron, next_fire_at=due, prefix="burst", jitter_s=jitter_s
            )
            conn.execute("ANALYZE pgsched_schedule")
            margin = (due - db_now(conn)).total_seconds()  # the set-up must end well before T

            def all_started() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM pgsched_job_run WHERE started_at IS NOT NULL"
                ).fetchone()
                return row is not None and row[0] >= n

            try:
                wait_until(all_started, timeout=240 + 12 + jitter_s, interval=1.0, what="burst")
            except TimeoutError:
                pass
            time.sleep(2)
        finally:
            _stop(procs)
        per_second = {
            int(second): count
            for second, count in conn.execute(
                """
                SELECT floor(extract(epoch FROM a.started_at - %s)), count(*)
                  FROM pgsched_attempt a
                 WHERE a.number = 1
                 GROUP BY 1 ORDER BY 1
                """,
                (due,),
            )
        }
        ms, unstarted = lateness_ms(conn, due, due + timedelta(seconds=jitter_s + 1))
        spread, planned = conn.execute(
            "SELECT extract(epoch FROM max(fire_after) - min(fire_after)),"
            "       extract(epoch FROM max(created_at) - %s) FROM pgsched_job_run",
            (due,),
        ).fetchone() or (None, None)
    last = max(per_second) if per_second else None
    return {
        **_distribution(ms),
        "jitter_s": jitter_s,
        "claims_per_second": per_second,
        "peak_claims_per_second": max(per_second.values(), default=0),
        "all_started_after_s": (last + 1) if last is not None and len(ms) == n else None,
        "not_started": unstarted,
        "fire_after_spread_s": float(spread) if spread is not None else None,
        "planned_after_s": float(planned) if planned is not None else None,  # < 0: ahead of T
        "setup_margin_s": margin,
        "first_claim_s": min(per_second, default=None),
        "load": load(),
    }


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    out = {}
    for name, jitter_s in (("none", 0), ("jitter_60s", JITTER_S)):
        r = out[name] = _burst(ctx, jitter_s)
        ctx.say(
            f"burst {name}: peak {r['peak_claims_per_second']} claims/s, all started after "
            f"{r['all_started_after_s']} s, lateness p99 {r['p99']} ms"
        )
    return out
