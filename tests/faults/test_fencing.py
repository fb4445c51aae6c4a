"""Fencing: a replica that lost its lease while frozen cannot write.

- A replica pauses (failpoint ``executor.before_record=sleep``) with a finished
  job's outcome in hand and is then SIGSTOPped, past its lease; another replica reaps and
  re-runs the job; then the frozen one is thawed and tries to record. Its
  write must be refused (I5). Negative control: the same with the token
  predicates stripped from the executor's SQL (``PGSCHED_FAULT_NOFENCE``) must
  make the checker report exactly an I5 violation.
- A plain SIGSTOP past the lease, then SIGCONT: the frozen replica abandons
  its run by its own monotonic clock; its result is never recorded.
"""

from __future__ import annotations

import signal
import time

import pytest

from .harness import wait_until
from .invariants import by_invariant
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

# 1.5 s of work, timeout 2 s: the lease is 4 s and is renewed after 1.33 s
WORK = {"seconds": 1.5}


def freeze_then_thaw(scenario: Scenario, *, nofence: bool) -> int:
    # The failpoint pauses a's executor with the outcome in hand; SIGSTOP then freezes the
    # whole process inside that pause. (The failpoint action "stop" is not used: the
    # engine's thread can still send its write a few ms after it; see the report.)
    a = scenario.start(
        "a", concurrency=1, failpoints="executor.before_record=sleep(4.5)", nofence=nofence
    )
    run_id = scenario.add_run(kwargs=WORK, timeout=2.0, max_attempts=3)
    wait_until(lambda: a.failpoint_hits(), 20, "a to pause before recording")
    a.signal(signal.SIGSTOP)
    wait_until(lambda: a.stopped_state() == "T", 5, "a to be stopped")  # witness: state T
    assert scenario.ledger(run_id) == [(1, "a", "start"), (1, "a", "end")]
    scenario.start("b", concurrency=1)
    # b's reaper recovers the expired lease; b runs attempt 2
    wait_until(
        lambda: (
            scenario.run_state(run_id)[:2] == ("running", 2)
            and (2, "b", "start") in scenario.ledger(run_id)
        ),
        30,
        "b to re-claim and start the run",
        diagnose=lambda: scenario.describe(run_id),
    )
    a.signal(signal.SIGCONT)
    wait_until(
        lambda: scenario.run_state(run_id)[0] == "succeeded", 30, "the run to finish", interval=0.1
    )
    time.sleep(2.0)  # let b try its own write too
    assert scenario.attempts(run_id)[0] == "lost"
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    return run_id


def test_a_frozen_replicas_late_write_is_refused(scenario: Scenario) -> None:
    run_id = freeze_then_thaw(scenario, nofence=False)
    assert scenario.attempts(run_id) == ["lost", "succeeded"]
    assert scenario.one("SELECT worker FROM pgsched_attempt WHERE job_run_id = %s AND number = 2",
                        [run_id]) == "b"  # fmt: skip
    a_log = scenario.fleet.replicas[0].log()
    assert f"run {run_id}: lease lost before its outcome was recorded" in a_log
    scenario.assert_clean()


def test_negative_control_without_fencing_the_checker_reports_i5(scenario: Scenario) -> None:
    freeze_then_thaw(scenario, nofence=True)
    violations = scenario.check()
    assert set(by_invariant(violations)) == {"I5"}, "\n".join(map(str, violations))
    assert any("while worker b held the lease" in v.detail for v in violations), violations


def test_sigstop_past_the_lease_then_sigcont(scenario: Scenario) -> None:
    a = scenario.start("a", concurrency=1)
    run_id = scenario.add_run(kwargs={"seconds": 1.8}, timeout=2.0, max_attempts=3)
    wait_until(lambda: (1, "a", "start") in scenario.ledger(run_id), 20, "a to start the job")
    a.signal(signal.SIGSTOP)
    wait_until(lambda: a.stopped_state() == "T", 5, "a to be stopped")
    b = scenario.start("b", concurrency=1)
    wait_until(
        lambda: scenario.run_state(run_id)[0] == "succeeded", 30, "b to recover and finish the run"
    )
    a.signal(signal.SIGCONT)
    time.sleep(2.0)  # a wakes, distrusts its lease by its monotonic clock and drops the result
    assert scenario.attempts(run_id) == ["lost", "succeeded"]
    assert (
        scenario.one(
            "SELECT worker FROM pgsched_attempt WHERE job_run_id = %s AND number = 2", [run_id]
        )
        == "b"
    )
    assert "lease no longer trusted" in a.log() or "lease lost" in a.log(), a.log()[-2000:]
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    assert b.proc.returncode == 0
    # the pause made a's delivery overlap b's: allowed (and expected) only because we froze a
    scenario.assert_clean(allow_overlap=True)
