"""Zoned schedules fired by real replicas across real transitions, under each DST policy.

The database clock is the authority and cannot be moved here, so each schedule's
``next_fire_at`` is moved instead: to shortly before the most recent spring and
autumn transition of Europe/Berlin and America/New_York (found from the
database's ``now()``, so the test does not age). With ``catch_up`` and a year
of grace every occurrence from there on is still "on time", so two replicas
plan and run them at once. The patterns are restricted to the transition's
local day, so nothing else is due. Expected runs and skipped counts come from
the brute-force oracle (tests/zone_oracle.py), not from the implementation.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_pgsched.ledger.models import SkippedRange
from django_pgsched.models import JobRun, Schedule, db_now
from django_pgsched.timing import jitter, timetable, zones
from tests import zone_oracle
from tests.testapp.models import Witness

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(240)]
DAY = timedelta(days=1)


def last_transitions(zone_name: str, now: datetime) -> list[zones.Transition]:
    """The zone's most recent forward and backward transitions before ``now``."""
    lo = zones.from_datetime(now - timedelta(days=366))
    found = zones.transitions(zones.get_zone(zone_name), lo, zones.from_datetime(now))
    forward = [t for t in found if t.change > 0][-1]
    back = [t for t in found if t.change < 0][-1]
    return [forward, back]


def test_replicas_fire_exactly_the_promised_runs_across_transitions(replicas):
    now = db_now()
    expected: dict[str, tuple[list[datetime], int]] = {}
    for zone_name in ("Europe/Berlin", "America/New_York"):
        for tr in last_transitions(zone_name, now):
            at = zones.to_datetime(tr.at)
            local = zones.to_datetime(tr.at + min(tr.before, tr.after)).replace(tzinfo=None)
            day = f"{local.hour} {local.day} {local.month} *"
            policies = (
                [("shift", "first"), ("skip", "first")]
                if tr.change > 0
                else [("shift", "first"), ("shift", "second"), ("shift", "both")]
            )
            for pattern in (f"*/30 * {day}", f"0 30 {day}"):
                walk = zone_oracle.walk(
                    timetable.cron(pattern).fields, ZoneInfo(zone_name), at - DAY, at + DAY
                )
                for gap, fold in policies:
                    name = f"{zone_name}:{at:%m%d}:{pattern}:{gap}:{fold}"
                    Schedule.objects.create(
                        name=name,
                        job="tests.witness",
                        cron=pattern,
                        timezone=zone_name,
                        dst_gap=gap,
                        dst_fold=fold,
                        misfire_policy="catch_up",
                        catch_up_limit=1000,
                        misfire_grace=timedelta(days=366),
                        next_fire_at=at - timedelta(hours=3),
                    )
                    expected[name] = walk.result(gap, fold, at - DAY, at + DAY)
    total = sum(len(runs) for runs, _ in expected.values())
    assert total > 600  # every schedule has runs or skips to check

    # no maintenance loop: its retention would delete these months-old ledger ranges
    started = [
        replicas(name, "--concurrency", "8", "--loops", "planner,executor") for name in ("a", "b")
    ]
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if JobRun.objects.filter(status="succeeded").count() >= total:
            break
        time.sleep(0.5)
    time.sleep(2)  # a second planner pass would show a duplicate now, if it made one
    assert [r.stop() for r in started] == [0, 0], [r.log()[-3000:] for r in started]

    for name, (runs, skipped) in expected.items():
        s = Schedule.objects.get(name=name)
        got = list(
            JobRun.objects.filter(schedule=s).order_by("scheduled_for").values_list(
                "scheduled_for", flat=True
            )
        )  # fmt: skip
        assert got == runs, name
        assert s.skipped_occurrences == skipped, name
        ledger = SkippedRange.objects.filter(schedule=s).values_list("reason", "count")
        assert sum(n for _, n in ledger) == skipped and {r for r, _ in ledger} <= {"dst_gap"}, name
        assert s.next_fire_at is not None and s.next_fire_at > now, name
    assert JobRun.objects.count() == JobRun.objects.filter(status="succeeded").count() == total
    assert Witness.objects.count() == Witness.objects.values("run_id").distinct().count() == total


def test_two_replicas_give_the_same_jitter(replicas):
    """Replica a plans an occurrence, then (its runs deleted) replica b plans it again."""
    n = 1000
    t = db_now().replace(microsecond=0) - timedelta(minutes=1)  # due: planned at once
    Schedule.objects.bulk_create(
        Schedule(
            name=f"jitter-{i}",
            job="tests.noop",
            cron=f"{t.second} {t.minute} {t.hour} * * *",
            jitter=timedelta(seconds=60),
            misfire_policy="catch_up",
            misfire_grace=timedelta(hours=1),
            next_fire_at=t,
        )
        for i in range(n)
    )
    seen = []
    for name in ("a", "b"):
        replica = replicas(name, "--loops", "planner")
        deadline = time.monotonic() + 60
        while JobRun.objects.count() < n and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replica.stop() == 0
        seen.append(dict(JobRun.objects.values_list("idempotency_key", "fire_after")))
        JobRun.objects.all().delete()
        Schedule.objects.update(next_fire_at=t)
    assert len(seen[0]) == n and seen[0] == seen[1]
    for key, fire_after in seen[0].items():
        schedule_id = int(key.split(":")[1])
        assert fire_after == t + jitter.offset(schedule_id, t, timedelta(seconds=60), t + DAY)
        assert key == jitter.occurrence_key(schedule_id, t)
    assert len(set(seen[0].values())) > n * 0.99  # spread over the minute, not stacked
