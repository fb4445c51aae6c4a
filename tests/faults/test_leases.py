"""Leases without a pause: the reaper racing a completion, and jobs that outlive their timeout.

- Reaper vs completion (River #1302): a run's lease is backdated so the reaper
  picks it as a candidate; the reaper then sleeps between its read and its
  write (failpoint ``reaper.between_steps=sleep``) while the owner completes
  the run. The reaper's re-checking write must touch nothing.
- A cooperative job past its timeout stops, is recorded ``timed_out`` and
  retried, and no two of its deliveries overlap.
- A job that ignores cancellation keeps running after its timeout while its
  retry starts elsewhere: overlapping deliveries of one run (see the report).
"""

from __future__ import annotations

import time

import pytest

from .harness import wait_until
from .invariants import by_invariant
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def test_the_reaper_does_not_undo_a_completion_it_raced(scenario: Scenario) -> None:
    reaper = scenario.start(
        "reaper", args=["--loops", "maintenance"], failpoints="reaper.between_steps=sleep(3)"
    )
    scenario.start("owner", concurrency=1, args=["--loops", "planner,executor"])
    run_id = scenario.add_run(kwargs={"seconds": 1.5}, timeout=3.0, max_attempts=3)
    wait_until(lambda: (1, "owner", "start") in scenario.ledger(run_id), 20, "the job to start")
    # make the live lease look expired (River's technique: backdate, do not sleep)
    scenario.sql(
        "UPDATE pgsched_job_run SET claim_expires_at = clock_timestamp() - interval '1 second' "
        "WHERE id = %s",
        [run_id],
    )
    wait_until(lambda: reaper.failpoint_hits(), 10, "the reaper to read the candidate")  # witness
    wait_until(lambda: scenario.run_state(run_id)[0] == "succeeded", 10, "the owner to finish")
    time.sleep(3.5)  # the reaper wakes and tries its write
    assert scenario.attempts(run_id) == ["succeeded"]
    assert scenario.reaped() == 0
    assert "recovered" not in reaper.log()
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    # the backdating was the test's own write to a leased run: the only one allowed
    violations = scenario.check()
    assert [v for v in violations if "from outside the loops" not in v.detail] == []
    assert len(violations) == 1


def test_a_cooperative_job_past_its_timeout_is_retried_without_overlap(
    scenario: Scenario,
) -> None:
    for name in ("a", "b"):
        scenario.start(name, concurrency=2)
    run_id = scenario.add_run(kwargs={"seconds": 5, "cooperative": True}, timeout=1.0,
                              max_attempts=3)  # fmt: skip
    wait_until(lambda: scenario.run_state(run_id)[0] == "failed", 40, "the run to fail")
    assert scenario.attempts(run_id) == ["timed_out"] * 3
    assert scenario.reaped() == 0
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()


def test_a_job_ignoring_cancellation_past_its_timeout_does_not_overlap_its_retry(
    scenario: Scenario,
) -> None:
    for name in ("a", "b"):
        scenario.start(name, concurrency=2)
    run_id = scenario.add_run(kwargs={"seconds": 3, "cooperative": False}, timeout=1.0,
                              max_attempts=2)  # fmt: skip
    wait_until(lambda: scenario.run_state(run_id)[0] == "failed", 40, "the run to fail")
    time.sleep(3)  # let the abandoned threads finish and ledger their ends
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    violations = scenario.check()
    assert not violations, by_invariant(violations)
