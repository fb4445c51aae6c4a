"""Overlap policy and start deadline with real replicas: the race, kill -9, the accounting.

Three replicas claim the runs of per-second schedules whose jobs last longer
than the period. With ``overlap = skip`` or ``buffer_one`` no two runs of one
schedule may ever run at once (I13: their attempts in the database and the
jobs' own start/end witness are disjoint), including while a run whose
replica was ``kill -9``ed waits for its lease to expire; every occurrence is
a run or a ledger point (I12), and the ledger says ``overlap`` and
``deadline`` where it should.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import pytest

from .cluster import ROOT
from .harness import FAST, wait_until
from .invariants import ACCOUNTED, by_invariant
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def _running_on(scenario: Scenario, worker: str, ids: list[int]) -> Any:
    """A run of these schedules whose job ``worker`` started and has not ended."""
    return scenario.one(
        """SELECT r.id FROM pgsched_job_run r JOIN testapp_ledger s ON s.run_id = r.id
            WHERE r.schedule_id = ANY(%s) AND r.status = 'running' AND s.worker = %s
              AND s.phase = 'start' AND NOT EXISTS (SELECT FROM testapp_ledger e
                  WHERE e.run_id = s.run_id AND e.attempt = s.attempt AND e.phase = 'end')
            LIMIT 1""",
        [ids, worker],
    )


def _reasons(scenario: Scenario, ids: list[int]) -> dict[str, int]:
    return dict(
        scenario.sql(
            "SELECT reason, sum(count)::int FROM pgsched_skipped_range"
            " WHERE schedule_id = ANY(%s) GROUP BY 1",
            [ids],
        )
    )


def test_three_replicas_never_run_two_runs_of_an_exclusive_schedule_at_once(
    scenario: Scenario,
) -> None:
    # jobs of 1.5 s on a 1 s period; a 2 s timeout: a lease of 4 s
    work = {"seconds": 1.5}
    skip = scenario.add_schedules(3, prefix="skip", cron="* * * * * *", kwargs=work,
                                  timeout=2, overlap="skip")  # fmt: skip
    buffer = scenario.add_schedules(2, prefix="buffer", cron="* * * * * *", kwargs=work,
                                    timeout=2, overlap="buffer_one")  # fmt: skip
    # the one waiting behind a 2.5 s job waits ~1.5 s: past a 1 s deadline it is missed
    late = scenario.add_schedules(1, prefix="late", cron="* * * * * *", kwargs={"seconds": 2.5},
                                  timeout=4, overlap="buffer_one", start_deadline=1)  # fmt: skip
    scenario.snapshot_baseline()
    replicas = [scenario.start(name, concurrency=4) for name in ("a", "b", "c")]
    victim = wait_until(
        lambda: _running_on(scenario, "a", skip), 20, "a skip run's job to start on replica a"
    )
    replicas[0].kill9()  # its run stays 'running' until the lease expires (4 s)
    wait_until(
        lambda: scenario.run_state(victim)[0] == "succeeded", 30, "the killed run to be retried"
    )
    time.sleep(1.0)
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    assert scenario.attempts(victim)[:1] == ["lost"]
    assert _reasons(scenario, skip).get("overlap", 0) >= 3
    assert _reasons(scenario, buffer).get("overlap", 0) >= 1
    assert _reasons(scenario, late).get("deadline", 0) >= 1
    missed = scenario.one(
        "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = ANY(%s) AND status = 'missed'",
        [late],
    )
    assert missed == _reasons(scenario, late)["deadline"]
    violations = scenario.check()
    assert not violations, by_invariant(violations) | {"first": [str(v) for v in violations[:5]]}
    print(f"\naccounted: {ACCOUNTED[-1]}")
    # negative control: one run started while the previous one still ran is I13 (and the
    # backdated claim makes its worker hold one slot more: I10)
    # the latest attempt of a skip schedule that followed another run's finished attempt
    # is moved to 10 ms before that one finished
    pair = scenario.sql(
        """SELECT job_run_id, number, previous_end
             FROM (SELECT a.job_run_id, a.number, a.started_at, r.id AS run_id,
                          lag(a.finished_at) OVER w AS previous_end,
                          lag(r.id) OVER w AS previous_run
                     FROM pgsched_job_run r JOIN pgsched_attempt a ON a.job_run_id = r.id
                    WHERE r.schedule_id = ANY(%s) AND a.finished_at IS NOT NULL
                   WINDOW w AS (PARTITION BY r.schedule_id ORDER BY a.started_at)) p
            WHERE previous_end IS NOT NULL AND previous_run <> run_id
            ORDER BY started_at DESC LIMIT 1""",
        [skip],
    )
    assert pair, "the skip schedules finished no two runs one after the other"
    run_id, number, previous_end = pair[0]
    scenario.sql(
        "UPDATE pgsched_attempt SET started_at = %s - interval '10 ms'"
        " WHERE job_run_id = %s AND number = %s",
        [previous_end, run_id, number],
    )
    broken = scenario.check()
    found = {v.invariant for v in broken}
    assert "I13" in found and found <= {"I10", "I13"}, broken[:5]


@pytest.mark.full
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", [1, 2])
def test_exclusive_schedules_under_kill_9_and_backfill(scenario: Scenario, seed: int) -> None:
    """Full tier: a minute of kill -9 (supervised restarts), backfills, every invariant."""
    rng = random.Random(seed)
    seconds = float(os.environ.get("PGSCHED_SOAK_SECONDS", "60"))
    work = {"seconds": 1.5}
    skip = scenario.add_schedules(6, prefix="skip", cron="* * * * * *", kwargs=work,
                                  timeout=2, overlap="skip")  # fmt: skip
    buffer = scenario.add_schedules(4, prefix="buffer", cron="*/2 * * * * *", kwargs=work,
                                    timeout=2, overlap="buffer_one")  # fmt: skip
    late = scenario.add_schedules(4, prefix="late", cron="* * * * * *", kwargs={"seconds": 2.5},
                                  timeout=4, overlap="buffer_one", start_deadline=1)  # fmt: skip
    scenario.add_schedules(6, prefix="allow", cron="* * * * * *", kwargs={"seconds": 0.2})
    scenario.snapshot_baseline()
    replicas = [scenario.start(name, concurrency=6) for name in ("a", "b", "c")]
    for replica in replicas:
        scenario.fleet.supervise(replica, max_restarts=50)
    deadline = time.monotonic() + seconds
    faults = []
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(2, 5))
        live = scenario.fleet.live()
        if rng.random() < 0.3:  # a backfill of the last few seconds of a skip schedule
            sid = rng.choice(skip)
            _backfill(scenario, sid, rng.randint(3, 10))
            faults.append(f"backfill:{sid}")
        elif live:
            victim = rng.choice(live)
            victim.kill9()
            faults.append(f"kill:{victim.worker_id}")
    print(f"\nexclusive soak seed {seed}: {len(faults)} faults: {' '.join(faults)}")
    scenario.fleet.stop_supervising()
    scenario.settle(timeout=120)
    scenario.fleet.stop_all(60)
    violations = scenario.check()
    print(f"accounted: {ACCOUNTED[-1]}")
    print(f"ledger: skip {_reasons(scenario, skip)} buffer_one {_reasons(scenario, buffer)} "
          f"deadline {_reasons(scenario, late)}")  # fmt: skip
    assert not violations, f"seed {seed}: " + "\n".join(map(str, violations[:30]))


def _backfill(scenario: Scenario, schedule_id: int, seconds: int) -> None:
    """``manage.py pgsched_backfill`` of the schedule's last ``seconds`` (as an operator would)."""
    name, nfa = scenario.sql(
        "SELECT name, next_fire_at FROM pgsched_schedule WHERE id = %s", [schedule_id]
    )[0]
    start = nfa - timedelta(seconds=seconds + 2)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PGSCHED_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": "tests.faults.replica_settings",
        "DATABASE_URL": scenario.url,
        "PGSCHED_TEST_OVERRIDES": json.dumps(FAST),
    }
    done = subprocess.run(
        [sys.executable, "-m", "django", "pgsched_backfill", name, "--start",
         start.isoformat(), "--end", nfa.isoformat()],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
