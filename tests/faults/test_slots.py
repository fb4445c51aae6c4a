"""Lease rule 1 from the database's side: a replica never holds more live leases than slots.

- A replica frozen (SIGSTOP) past its leases, with nobody reaping, is thawed:
  it gives its runs up by its own clock and claims new ones for the slots its
  job threads free. Its old runs still read ``running`` under its name until
  a reaper comes by; the checker counts a lost run only until its lease
  expired (the reaper dates the ``lost`` attempt then), so I10 holds.
- Negative control: with claims that ignore busy slots
  (``PGSCHED_FAULT_NOSLOTS``) the checker must report I10, and only I10.
"""

from __future__ import annotations

import signal
import time

import pytest

from .harness import wait_until
from .invariants import by_invariant
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

NO_MAINTENANCE = ["--loops", "planner,executor"]


def test_a_thawed_replica_never_holds_more_live_leases_than_slots(scenario: Scenario) -> None:
    a = scenario.start("a", concurrency=2, args=NO_MAINTENANCE)
    # jobs that ignore cancellation, so their threads outlive the thaw by a few seconds;
    # timeout 2 s: a 4 s lease, trusted for 3.7 s
    old = [
        scenario.add_run(kwargs={"seconds": 9.0, "cooperative": False}, timeout=2.0)
        for _ in range(2)
    ]
    wait_until(
        lambda: all((1, "a", "start") in scenario.ledger(r) for r in old), 20, "a to start both"
    )
    a.signal(signal.SIGSTOP)
    wait_until(lambda: a.stopped_state() == "T", 5, "a to be stopped")  # witness: state T
    time.sleep(4.5)  # past both leases
    assert (
        scenario.one(
            "SELECT count(*) FROM pgsched_job_run WHERE id = ANY(%s) AND claim_expires_at < now()",
            [old],
        )
        == 2
    )
    new = [scenario.add_run(kwargs={"seconds": 0.2}, timeout=2.0) for _ in range(2)]
    a.signal(signal.SIGCONT)
    wait_until(
        lambda: all(scenario.run_state(r)[0] == "succeeded" for r in new),
        30,
        "a to run the new runs once its slots free",
        diagnose=lambda: scenario.describe(new[0]),
    )
    # witness: a gave the old runs up, and the database still showed them as a's (nobody reaped)
    assert a.log().count("lease no longer trusted; abandoning it") == 2, a.log()[-2000:]
    assert [scenario.run_state(r)[:2] for r in old] == [("running", 1), ("running", 1)]
    # a slot is a thread: a new run starts only once an old job's thread has ended, so
    # at no instant do more jobs run on a than it has slots (the two old threads end a
    # few milliseconds apart, and the first slot they free may be reused at once)
    events = scenario.sql(
        "SELECT at, phase FROM testapp_ledger WHERE run_id = ANY(%s) AND phase IN ('start', 'end')"
        " ORDER BY at, phase = 'start'",  # an end before a start at the same instant
        [old + new],
    )
    assert len(events) == 8, events
    running = peak = 0
    for _at, phase in events:
        running += 1 if phase == "start" else -1
        peak = max(peak, running)
    assert peak == 2, events
    first_new_start = scenario.sql(
        "SELECT min(at) FROM testapp_ledger WHERE run_id = ANY(%s) AND phase = 'start'", [new]
    )[0][0]
    first_old_end = scenario.sql(
        "SELECT min(at) FROM testapp_ledger WHERE run_id = ANY(%s) AND phase = 'end'", [old]
    )[0][0]
    assert first_old_end <= first_new_start, (first_old_end, first_new_start)
    scenario.start("reaper", args=["--loops", "maintenance"])
    wait_until(
        lambda: all(scenario.attempts(r)[:1] == ["lost"] for r in old), 20, "the reaper to recover"
    )
    scenario.settle(timeout=60)
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()


def test_negative_control_claims_past_the_slots_make_the_checker_report_i10(
    scenario: Scenario,
) -> None:
    scenario.start("a", concurrency=2, env={"PGSCHED_FAULT_NOSLOTS": "1"})
    runs = [scenario.add_run(kwargs={"seconds": 1.0}, timeout=2.0) for _ in range(6)]
    wait_until(
        lambda: all(scenario.run_state(r)[0] == "succeeded" for r in runs), 30, "the runs to finish"
    )
    scenario.settle(timeout=30)
    assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
    violations = scenario.check()
    assert set(by_invariant(violations)) == {"I10"}, "\n".join(map(str, violations))
    assert any("worker a held" in v.detail for v in violations), violations
