"""The cron maths alone: ``Planner._decide`` (timetable + ``policies.decide``) for N schedules.

Run with Django set up (``python -m bench.cronmath N``); prints one JSON line.
Every schedule is ``0 * * * *`` with its next fire at the top of this hour,
as in the planner benchmark. Three ways:

- ``memoised``: the planner's own path, a memo per batch of 500 (one decision
  per distinct grid and from-time, then dictionary hits);
- ``per_schedule``: a decision per schedule (the parsed timetable still cached);
- ``cold``: a parse and a decision per schedule (the parse cache cleared each
  time), timed on a sample and scaled to N.

And one zoned case: a per-second schedule in Europe/Berlin down for a day
across the spring transition, decided with ``skip`` (86,340 missed, 3,600
skipped by the gap, 66 on time): ``zoned_outage`` is the planner's decision,
``zoned_outage_stepping`` the same range walked occurrence by occurrence (the
baseline a stepping implementation would pay).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
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
            timezone="UTC", dst_gap="shift", dst_fold="first", jitter=timedelta(0),
            unplanned_from=None, unplanned_reason=None, defect=None, tenant_paused=False,
            tenant="", tenant_recorded=False, tenant_min_interval=None, next_due=None,
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
    out.update(zoned_outage())
    print(json.dumps(out), flush=True)
    return 0


def zoned_outage() -> dict[str, Any]:
    from django_pgsched.engine.policies import decide
    from django_pgsched.timing import zoned

    grid = zoned.cron("* * * * * *", "Europe/Berlin", "skip")
    start = datetime(2026, 3, 28, 13, tzinfo=UTC)
    now = datetime(2026, 3, 29, 13, tzinfo=UTC)
    zoned.forget()  # cold: the zone's transitions are found afresh
    grid = zoned.cron("* * * * * *", "Europe/Berlin", "skip")
    started = time.perf_counter()
    decision = decide(
        grid,
        next_fire_at=start,
        now=now,
        lookahead=timedelta(seconds=5),
        grace=timedelta(seconds=60),
        policy="skip",
        catch_up_limit=10,
    )
    decided = time.perf_counter() - started
    assert (decision.skipped, decision.gap_skipped) == (86_340, 3600), decision.skipped
    started = time.perf_counter()
    stepped = sum(1 for _ in grid.occurrences(start, now))
    stepping = time.perf_counter() - started
    assert stepped == 86_400 - 3600 + 3600 - 0  # every real second of the day
    return {"zoned_outage": decided, "zoned_outage_stepping": stepping}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
