"""``pg_terminate_backend`` of a replica's executor, planner, maintenance and listener sessions.

Witness: each termination returned true, and the same ``application_name``
later shows a new backend pid (the loop reconnected). The planner's session is
killed inside its transaction (its failpoint holds it open); the executor's
while a job is in flight, whose outcome must still be recorded; after the
listener's, a new schedule must still fire.
"""

from __future__ import annotations

import pytest

from .harness import Replica, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def backend(scenario: Scenario, replica: Replica, role: str) -> int | None:
    pid: int | None = scenario.one(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
        [f"pgsched {role} {replica.worker_id}"],
    )
    return pid


def terminate(scenario: Scenario, replica: Replica, role: str) -> None:
    old = wait_until(lambda: backend(scenario, replica, role), 20, f"a {role} session")
    assert scenario.one("SELECT pg_terminate_backend(%s)", [old]) is True
    wait_until(
        lambda: (pid := backend(scenario, replica, role)) is not None and pid != old,
        30,
        f"the {role} loop to reconnect",
    )


def test_terminated_sessions_reconnect_and_nothing_is_lost(scenario: Scenario) -> None:
    scenario.add_schedules(10, prefix="fast", cron="* * * * * *")
    scenario.add_schedules(3, prefix="long", cron="*/3 * * * * *", kwargs={"seconds": 1.2})
    scenario.snapshot_baseline()
    a = scenario.start("a", concurrency=4, failpoints="planner.after_claim=sleep(0.4)")
    b = scenario.start("b", concurrency=4)
    # the planner, inside its transaction: the failpoint keeps it open 0.4 s per pass
    wait_until(lambda: a.failpoint_hits(), 20, "a's planner to hold a transaction")
    terminate(scenario, a, "planner")
    # the executor, while one of its jobs runs
    wait_until(
        lambda: scenario.one(
            "SELECT count(*) FROM testapp_ledger l WHERE worker = 'a' AND phase = 'start' AND "
            "NOT EXISTS (SELECT 1 FROM testapp_ledger e WHERE e.run_id = l.run_id "
            "AND e.attempt = l.attempt AND e.phase = 'end')"
        ),
        20,
        "a job in flight on a",
        interval=0.02,
    )
    terminate(scenario, a, "executor")
    terminate(scenario, a, "maintenance")
    terminate(scenario, b, "listener")
    # a schedule created after the listener died still fires (a new listener, or reconciliation)
    (late,) = scenario.add_schedules(1, prefix="late", cron="* * * * * *")
    scenario.track([late])
    wait_until(
        lambda: scenario.one("SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s "
                             "AND status = 'succeeded'", [late]) >= 2,
        20,
        "the new schedule to fire",
    )  # fmt: skip
    scenario.settle(timeout=60)
    assert "terminating connection" in a.log() or "retrying in" in a.log(), a.log()[-3000:]
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()
    assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0
