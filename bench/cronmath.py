"""The cron maths alone: ``Planner._decide`` (timetable + ``policies.decide``) for N schedules.

Run with Django set up (``python -m bench.cronmath N``); prints one JSON line.
Every schedule is ``0 * * * *`` with its next fire at the top of this hour,
as in the planner benchmark. Three ways:

- ``memoised``: the planner's own path, a memo per batch of 500 (one decision
  per distinct lattice and from-time, then dictionary hits);
- ``per_schedule``: a decision per schedule (the parsed timetable still cached);
- ``cold``: a parse and a decision per schedule (the parse cache cleared each
  time), timed on a sample and scaled to N.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 100_000
    import django

    django.setup()
    from django_pgsched.engine.planner import Planner, _Row
    from django_pgsched.engine.rows import DueSchedule
    from django_pgsched.timing import timetable

    planner = Planner()
    now = datetime.now(UTC)
    top = now.replace(minute=0, second=0, microsecond=0)

    def row(i: int) -> _Row:
        due = DueSchedule(
            db_now=now, id=i, name=f"s{i}", job="tests.noop", cron="0 * * * *", interval=None,
            anchor=None, next_fire_at=top, misfire_policy="latest", catch_up_limit=10,
            misfire_grace=None, max_attempts=None, timeout=None, queue=None,
        )  # fmt: skip
        return _Row(due, i)

    rows = [row(i) for i in range(count)]
    out: dict[str, Any] = {"schedules": count}

    started = time.perf_counter()
    memo: dict[Any, Any] = {}
    for i, r in enumerate(rows):
        if i % planner.batch == 0:
            memo = {}
        planner._decide(r, now, memo)
    out["memoised"] = time.perf_counter() - started

    started = time.perf_counter()
    for r in rows:
        planner._decide(r, now, {})
    out["per_schedule"] = time.perf_counter() - started

    sample = min(count, 2000)
    started = time.perf_counter()
    for r in rows[:sample]:
        timetable._cron.cache_clear()
        planner._decide(r, now, {})
    out["cold"] = (time.perf_counter() - started) * count / sample
    out["cold_sample"] = sample
    assert all(r.decision is not None for r in rows)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
