"""SIGTERM: a drain, a repeated TERM, and TERM then KILL, with the checker afterwards.

Three victims each serve their own queue and hold one long run; a survivor
started afterwards recovers what the abrupt exits left behind.
"""

from __future__ import annotations

import signal
import time

import pytest

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def test_term_drains_repeated_term_exits_at_once_term_then_kill_is_recovered(
    scenario: Scenario,
) -> None:
    drainer = scenario.start("drain", concurrency=1, args=["--queues", "qd"])
    repeat = scenario.start("repeat", concurrency=1, args=["--queues", "qr"])
    killed = scenario.start(
        "killed", concurrency=1, args=["--queues", "qk"], failpoints="runner.on_stop=kill"
    )
    runs = {
        name: scenario.add_run(kwargs={"seconds": 2.5, "cooperative": False}, timeout=4,
                               queue=queue)
        for name, queue in (("drain", "qd"), ("repeat", "qr"), ("killed", "qk"))
    }  # fmt: skip
    for name, run_id in runs.items():
        wait_until(
            lambda run_id=run_id, name=name: (1, name, "start") in scenario.ledger(run_id),
            20,
            f"{name} to start its run",
        )
    began = time.monotonic()
    drainer.signal(signal.SIGTERM)
    for _ in range(5):
        repeat.signal(signal.SIGTERM)
        time.sleep(0.05)
    killed.signal(signal.SIGTERM)
    assert repeat.wait_exit(10) == 1  # the second signal exits 1 at once
    assert killed.wait_exit(10) == -9  # witness: the stop hook fired, then SIGKILL
    assert [line.split()[2] for line in killed.failpoint_hits()] == ["runner.on_stop"]
    assert drainer.wait_exit(20) == 0
    assert time.monotonic() - began < 15  # drained its 2.5 s job, not the whole grace period
    assert scenario.attempts(runs["drain"]) == ["succeeded"]
    assert scenario.ledger(runs["drain"]) == [(1, "drain", "start"), (1, "drain", "end")]
    survivor = scenario.start("survivor", concurrency=2)
    for name in ("repeat", "killed"):
        wait_until(
            lambda name=name: scenario.run_state(runs[name])[0] == "succeeded",
            30,
            f"the survivor to recover {name}'s run",
            diagnose=lambda name=name: scenario.describe(runs[name]),
        )
        assert scenario.attempts(runs[name]) == ["lost", "succeeded"]
    assert scenario.fleet.stop_all() == [0]
    assert survivor.proc.returncode == 0
    scenario.assert_clean()
