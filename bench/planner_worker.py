"""One planner replica for the planner benchmark: ``Planner().run_once()`` in a loop.

Run with the project's Python and ``DJANGO_SETTINGS_MODULE=bench.settings``.
It sets Django up and opens its connection, prints ``ready``, starts when the
harness writes a line (so replicas start together and start-up is not timed),
plans until a pass finds nothing due, and prints one JSON line: its start and
end (``time.monotonic()``, comparable between processes on Linux), passes,
schedules advanced, runs created, and the seconds spent in the cron maths
(``Planner._decide``, timed around each call). ``--profile FILE`` writes a
cProfile of the loop.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.planner_worker")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args(argv)

    import django

    django.setup()
    from django_pgsched.engine import db
    from django_pgsched.engine.planner import Planner

    planner = Planner(batch=args.batch)
    decide_seconds = 0.0
    original = planner._decide

    def timed_decide(*a: Any, **kw: Any) -> None:
        nonlocal decide_seconds
        t = time.perf_counter()
        original(*a, **kw)
        decide_seconds += time.perf_counter() - t

    planner._decide = timed_decide  # type: ignore[method-assign]
    with db.session("planner") as conn:
        conn.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()

    profiler = cProfile.Profile() if args.profile else None
    passes = schedules = created = 0
    started = time.monotonic()
    if profiler:
        profiler.enable()
    while True:
        result = planner.run_once()
        passes += 1
        schedules += result.schedules
        created += result.created
        if not result.schedules:
            break
    finished = time.monotonic()
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    print(
        json.dumps(
            {
                "started": started,
                "finished": finished,
                "passes": passes,
                "schedules": schedules,
                "created": created,
                "decide_seconds": decide_seconds,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
