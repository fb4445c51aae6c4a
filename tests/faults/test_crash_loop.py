"""A crash-looping run: its job SIGKILLs whichever replica runs it.

Each claim counts an attempt; each crash leaves the lease to expire and the
reaper records a ``lost`` attempt. A supervisor restarts the dead replicas.
After ``max_attempts`` (8) the run is ``failed``, never attempted a ninth
time, and the other schedules kept firing throughout.
"""

from __future__ import annotations

import pytest

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


def test_a_run_that_kills_its_replica_fails_at_attempt_8(scenario: Scenario) -> None:
    scenario.add_schedules(5, prefix="steady", cron="* * * * * *")
    scenario.snapshot_baseline()
    replicas = [scenario.start(name, concurrency=2) for name in ("a", "b")]
    for replica in replicas:
        scenario.fleet.supervise(replica, max_restarts=12)
    run_id = scenario.add_run("faults.crash", timeout=1.0, max_attempts=8)
    wait_until(
        lambda: scenario.run_state(run_id)[0] == "failed",
        180,
        "the crash-looping run to fail",
        interval=0.25,
        diagnose=lambda: scenario.describe(run_id),
    )
    status, attempts, _ = scenario.run_state(run_id)
    assert (status, attempts) == ("failed", 8)
    assert scenario.attempts(run_id) == ["lost"] * 8
    starts = [row for row in scenario.ledger(run_id) if row[2] == "start"]
    assert [row[0] for row in starts] == list(range(1, 9))  # witness: 8 deliveries, 8 crashes
    deaths = [code for _, code in scenario.fleet.exits]
    assert deaths.count(-9) >= 8, deaths
    # the survivors restart cleanly and the rest of the workload never stopped
    wait_until(lambda: len(scenario.fleet.live()) == 2, 30, "the supervisor to restart replicas")
    for replica in scenario.fleet.live():
        replica.wait_ready()
    scenario.settle(timeout=60)
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()
    assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0
