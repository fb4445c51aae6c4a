"""Diagnostic: what an idle planner claim reads after each minute of every-minute schedules.

``python -m bench.margin [N] [MINUTES] [--savepoint] [--autovacuum]``: a private
cluster, N schedules ``* * * * *``, and the planner in this process planning one
boundary after another (``Planner().run_once(now=...)``, so the minutes need not
be waited for). After each minute it runs the planner's claim under ``EXPLAIN
(ANALYZE, BUFFERS)`` at a time when nothing is due, twice, and prints the
buffers it read and the schedule table's dead rows. Buffers do not depend on
the machine's load, so the figures are comparable between runs and machines.

Autovacuum is off for ``pgsched_schedule`` unless ``--autovacuum`` (its timing
would decide the figures). ``--savepoint`` runs the planner's batch statement in
a savepoint, as the planner did before: each advanced schedule's old version then
carries a MultiXact, which index scans cannot mark dead, so every claim reads
every version advanced since the last vacuum (the shrinking margin of issue 16).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from . import fixtures
from .cluster import private_cluster
from .context import Context
from .profiles import QUICK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.margin", description=__doc__)
    parser.add_argument("schedules", type=int, nargs="?", default=50_000)
    parser.add_argument("minutes", type=int, nargs="?", default=4)
    parser.add_argument("--savepoint", action="store_true", help="the batch in a savepoint")
    parser.add_argument("--autovacuum", action="store_true", help="leave autovacuum on")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="pgsched-margin-"))
    with private_cluster() as cluster:
        ctx = Context(cluster=cluster, profile=QUICK, logs=logs, venvs=logs)
        ctx.migrate_template()
        ctx.fresh_database()
        os.environ["PGSCHED_BENCH_DSN"] = ctx.dsn
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        import django

        django.setup()
        from django.db import transaction

        from django_pgsched.engine import queries
        from django_pgsched.engine.planner import Planner

        if args.savepoint:
            apply = Planner._apply

            def in_a_savepoint(self: Planner, conn: Any, rows: Any) -> list[int]:
                with transaction.atomic(using=self.using):
                    return apply(self, conn, rows)

            Planner._apply = in_a_savepoint  # type: ignore[method-assign]
        with ctx.connect() as conn:
            if not args.autovacuum:
                conn.execute("ALTER TABLE pgsched_schedule SET (autovacuum_enabled = off)")
            row = conn.execute(
                "SELECT date_trunc('minute', clock_timestamp()) + interval '1 minute'"
            ).fetchone()
            assert row is not None
            first: datetime = row[0]
            fixtures.add_cron_schedules(conn, args.schedules, cron="* * * * *", next_fire_at=first)
            fixtures.settle(conn)
            claim = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.get("planner_claim")

            def idle_claim(at: datetime) -> tuple[float, int]:
                params = {"now": at, "lookahead": timedelta(seconds=5), "batch": 500}
                found = conn.execute(claim, params).fetchone()
                assert found is not None
                plan = found[0][0]
                return plan["Execution Time"], plan["Plan"]["Shared Hit Blocks"]

            planner = Planner()
            variant = "in a savepoint" if args.savepoint else "as it is"
            print(f"{args.schedules:,} every-minute schedules, the planner {variant}")
            for k in range(args.minutes):
                boundary = first + timedelta(minutes=k)
                started, passes = time.perf_counter(), 0
                while planner.run_once(now=boundary - timedelta(seconds=4)).schedules:
                    passes += 1
                seconds = time.perf_counter() - started
                ms, hit = idle_claim(boundary + timedelta(seconds=30))
                ms2, hit2 = idle_claim(boundary + timedelta(seconds=31))
                dead = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pgsched_schedule'"
                ).fetchone()
                print(
                    f"minute {k + 1}: {passes} passes in {seconds:.1f} s; an idle claim then "
                    f"read {hit:,} buffers ({ms:.1f} ms), again {hit2:,} ({ms2:.1f} ms); "
                    f"{dead[0] if dead else '?':,} dead schedule rows"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
