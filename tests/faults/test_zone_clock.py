"""Full tier: the database clock moved to just before a real transition, and let run across it.

libfaketime puts the private server's clock 40 s before Europe/Berlin's next
spring (or autumn) transition; two replicas plan and run zoned schedules under
each policy while the database's clock crosses it in real time. The runs in the
80 s around the transition, and the gap-skipped counts, must equal the
brute-force oracle's (tests/zone_oracle.py), with the invariants clean.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_pgsched.timing import timetable, zones
from tests import zone_oracle

from .cluster import wait_for_server
from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]
ZONE = "Europe/Berlin"
LEAD = timedelta(seconds=40)
SCHEDULES = {
    "spring": [
        ("* * * * * *", "shift", "first"),
        ("* * * * * *", "skip", "first"),
        ("*/30 * 2 * * *", "shift", "first"),
        ("*/30 * 2 * * *", "skip", "first"),
        ("0 30 2 * * *", "shift", "first"),
        ("0 30 2 * * *", "skip", "first"),
    ],
    "autumn": [
        ("* * * * * *", "shift", "first"),
        ("* * * * * *", "shift", "second"),
        ("* * * * * *", "shift", "both"),
        ("*/10 * 2 * * *", "shift", "first"),
        ("*/10 * 2 * * *", "shift", "second"),
        ("*/10 * 2 * * *", "shift", "both"),
    ],
}


def next_transition(now: datetime, forward: bool) -> zones.Transition:
    lo = zones.from_datetime(now) + 3600
    found = zones.transitions(zones.get_zone(ZONE), lo, lo + 400 * 86_400)
    return next(t for t in found if (t.change > 0) == forward)


@pytest.mark.parametrize("season", ["spring", "autumn"])
def test_database_clock_crosses_a_real_transition(scenario: Scenario, season: str) -> None:
    if not scenario.cluster.faketime:
        pytest.skip("libfaketime is not installed (Debian package libfaketime)")
    tr = next_transition(scenario.db_now(), forward=season == "spring")
    at = zones.to_datetime(tr.at)
    try:
        scenario.cluster.set_clock_offset((at - LEAD - scenario.db_now()).total_seconds())
        wait_until(
            lambda: abs((scenario.db_now() - (at - LEAD)).total_seconds()) < 10,
            15,
            "the database clock to move before the transition",
        )
        start = (scenario.db_now() + timedelta(seconds=5)).replace(microsecond=0)
        ids = {}
        for pattern, gap, fold in SCHEDULES[season]:
            ids[(pattern, gap, fold)] = scenario.one(
                """
                INSERT INTO pgsched_schedule (name, job, cron, timezone, dst_gap, dst_fold,
                       next_fire_at, misfire_policy, catch_up_limit, updated_at)
                VALUES (%s, 'faults.work', %s, %s, %s, %s, %s, 'catch_up', 1000, now())
                RETURNING id
                """,
                [f"{pattern}/{gap}/{fold}", pattern, ZONE, gap, fold, start],
            )
        scenario.snapshot_baseline()
        for name in ("a", "b"):
            scenario.start(name)
        end = at + LEAD
        wait_until(lambda: scenario.db_now() > end + timedelta(seconds=8), 120, "the crossing")
        scenario.settle(timeout=60)
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        scenario.assert_clean()
        for (pattern, gap, fold), sid in ids.items():
            walk = zone_oracle.walk(timetable.cron(pattern).fields, ZoneInfo(ZONE), start, end)
            expected, skipped = walk.result(gap, fold, start, end)
            got = [
                t
                for (t,) in scenario.sql(
                    "SELECT scheduled_for FROM pgsched_job_run WHERE schedule_id = %s "
                    "AND scheduled_for < %s ORDER BY 1",
                    [sid, end],
                )
            ]
            assert got == expected, (pattern, gap, fold, len(got), len(expected))
            assert (
                scenario.one(
                    "SELECT skipped_occurrences FROM pgsched_schedule WHERE id = %s", [sid]
                )
                == skipped
            ), (pattern, gap, fold)
    finally:
        scenario.cluster.set_clock_offset(0)
        scenario.fleet.close()
        scenario.conn.close()
        scenario.cluster.restart("fast")  # every server process reads the clock file afresh
        wait_for_server(scenario.cluster)
        scenario.reconnect()
