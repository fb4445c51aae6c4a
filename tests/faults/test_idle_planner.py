"""An idle planner sleeps (up to ``PLANNER_IDLE_WAIT``) and still starts a new schedule at once.

A real replica whose only schedule next falls due in an hour: its planner sleeps until
that schedule enters the lookahead, at most ``PLANNER_IDLE_WAIT`` seconds at a time.
A schedule created then, and one moved earlier by SQL, must still be planned at once:
each change notifies ``pgsched_schedule`` and wakes the planner. Each first run must
start well inside ``PLANNER_IDLE_WAIT``. (That the planner sleeps at all is
``tests/integration/test_planner_idle.py``'s; the idle benchmark counts its claims.)
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from django_pgsched.engine.runner import PLANNER_IDLE_WAIT

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

FIRST_START = """
SELECT extract(epoch FROM min(started_at) - %s::timestamptz) FROM pgsched_job_run
 WHERE schedule_id = %s AND started_at IS NOT NULL
"""


def test_a_sleeping_planner_wakes_for_a_new_or_moved_schedule(scenario: Scenario) -> None:
    now = scenario.db_now()
    # every second, but its next occurrence stored an hour ahead (as after a pause)
    (hourly,) = scenario.add_schedules(
        1, prefix="later", cron="* * * * * *", first=now.replace(microsecond=0) + timedelta(hours=1)
    )
    scenario.snapshot_baseline()
    a = scenario.start("a")
    time.sleep(PLANNER_IDLE_WAIT + 1)  # idle: the planner is in a long sleep now
    assert a.alive and scenario.one("SELECT count(*) FROM pgsched_job_run") == 0

    created = scenario.db_now()
    (fresh,) = scenario.add_schedules(1, prefix="fresh", cron="* * * * * *")
    scenario.track([fresh])
    late = wait_until(
        lambda: scenario.one(FIRST_START, [created, fresh]), 10, "the new schedule's first run"
    )
    assert late < PLANNER_IDLE_WAIT / 2, late

    moved_at = scenario.db_now()
    scenario.sql(
        "UPDATE pgsched_schedule SET next_fire_at = date_trunc('second', now())"
        " + interval '2 seconds' WHERE id = %s",
        [hourly],
    )
    late = wait_until(
        lambda: scenario.one(FIRST_START, [moved_at, hourly]), 10, "the moved schedule's run"
    )
    assert late < 2 + PLANNER_IDLE_WAIT / 2, late

    scenario.settle(timeout=30)
    assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
    scenario.assert_clean()
