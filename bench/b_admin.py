"""The admin's run list with a large history against a small one, in the same run.

``admin_small_rows`` finished runs are generated with ``generate_series``,
VACUUM ANALYZE, the page is timed (``bench.admin_probe``: Django's test client,
a superuser, warm-up then ``admin_requests`` requests); the history then grows
to ``admin_rows`` and the page is timed again. The ratio is large over small
(median request time). If the admin cannot be imported (it is being worked
on), the probe is retried a few times a minute apart.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from . import fixtures
from .context import Context
from .machine import load
from .procs import Proc, django_env
from .stats import summary

RETRIES = 3


def probe(ctx: Context, rows: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.admin_probe", str(ctx.profile.admin_requests)]
    for attempt in range(RETRIES):
        proc = Proc(
            argv,
            env=django_env(ctx.dsn, PGSCHED_BENCH_ADMIN="1"),
            log=ctx.log(f"admin-{rows}"),
            stdout=True,
        )
        line = proc.readline()
        proc.stop()
        if line:
            result: dict[str, Any] = json.loads(line)
            result["timing"] = summary(result["seconds"])
            result["rows"] = rows
            result["load"] = load()
            return result
        ctx.say(f"admin probe failed (attempt {attempt + 1}); see {proc.log}")
        if attempt + 1 < RETRIES:
            time.sleep(60)
    raise RuntimeError(f"the admin probe failed {RETRIES} times; see {proc.log}")


def run(ctx: Context) -> dict[str, Any]:
    ctx.fresh_database()
    p = ctx.profile
    with ctx.connect() as conn:
        fixtures.add_history(conn, p.admin_small_rows)
        fixtures.settle(conn, "pgsched_job_run")
    small = probe(ctx, p.admin_small_rows)
    ctx.say(f"admin: {p.admin_small_rows} runs: {small['timing']['median'] * 1000:.1f} ms")
    started = time.monotonic()
    with ctx.connect() as conn:
        fixtures.add_history(conn, p.admin_rows - p.admin_small_rows, offset=p.admin_small_rows)
        fixtures.settle(conn, "pgsched_job_run")
    generated = time.monotonic() - started
    large = probe(ctx, p.admin_rows)
    ctx.say(f"admin: {p.admin_rows} runs: {large['timing']['median'] * 1000:.1f} ms")
    return {
        "unit": "s",
        "small": small,
        "large": large,
        "generate_seconds": generated,
        "ratio": large["timing"]["median"] / small["timing"]["median"],
    }
