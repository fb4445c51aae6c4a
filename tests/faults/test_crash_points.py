"""kill -9 at every named failpoint of the planner, executor and maintenance loops.

A supervised victim replica is started again and again, each incarnation armed
to SIGKILL itself at the next failpoint, while a survivor keeps executing (and
planning, for the executor's failpoints). Witness: each armed incarnation
exited -9 after writing the failpoint's line. Then the victim runs clean, the
fleet settles (I8) and the checker must find nothing: no duplicate, no lost
occurrence, runs recovered with ``lost`` attempts and fenced writes only.
"""

from __future__ import annotations

import pytest

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

PLANNER = ["planner.after_claim", "planner.before_commit", "planner.after_commit"]
EXECUTOR = [
    "executor.after_claim",
    "executor.before_job",
    "executor.after_job",
    "executor.before_record",
    "executor.after_record",
    "executor.before_renew",
]
MAINTENANCE = ["reaper.between_steps", "retention.before_delete"]
OVERRIDES = {"RETENTION": 3, "RETENTION_INTERVAL": 1}


def leave_an_expired_lease(scenario: Scenario) -> None:
    """What a replica killed mid-run leaves behind: a running run whose lease has expired."""
    scenario.sql(
        """
        INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue, status,
               fire_after, attempts, max_attempts, timeout, claimed_by, worker, started_at,
               claim_expires_at)
        VALUES (date_trunc('second', clock_timestamp()), 'faults:' || gen_random_uuid(),
                'faults.work', '{"seconds": 0.1}', 'default', 'running', clock_timestamp(), 1, 3,
                interval '1 s', gen_random_uuid(), 'gone', clock_timestamp() - interval '10 s',
                clock_timestamp() - interval '1 s')
        """
    )


def rolling_kills(scenario: Scenario, points: list[str], survivor_loops: str) -> None:
    scenario.add_schedules(20, prefix="fast", cron="* * * * * *")
    # long enough to be renewed (lease 4 s, renewed after a third) and to be held when killed
    scenario.add_schedules(4, prefix="long", cron="*/2 * * * * *", kwargs={"seconds": 1.6})
    scenario.snapshot_baseline()
    # The survivor has no maintenance loop, so only the victim reaps and prunes until it
    # runs clean. For the planner's failpoints it does not plan either: the planner's
    # failpoints fire only when its claim won rows, and of two planners passing once a
    # second, the one whose pass comes first after each whole second wins every claim
    # until their phases drift past each other (the victim lost for 80 s in one CI run).
    survivor = scenario.start(
        "survivor", concurrency=4, args=["--loops", survivor_loops], overrides=OVERRIDES
    )
    armed = iter(points)

    def next_point(previous: object, restarts: int) -> dict[str, object]:
        point = next(armed, None)
        if point == "reaper.between_steps":
            leave_an_expired_lease(scenario)  # or the reaper may find nothing to step between
        return {"failpoints": f"{point}=kill" if point else ""}

    victim = scenario.start(
        "victim", ready=False, concurrency=4, failpoints=f"{next(armed)}=kill", overrides=OVERRIDES
    )
    scenario.fleet.supervise(victim, max_restarts=len(points), on_restart=next_point)
    wait_until(
        lambda: len(scenario.fleet.exits) == len(points),
        timeout=40 + 8 * len(points),
        what="every armed incarnation to die",
        interval=0.2,
        diagnose=lambda: (
            f"exits {scenario.fleet.exits}; last incarnation "
            f"{scenario.fleet.replicas[-1].worker_id}:\n{scenario.fleet.replicas[-1].log()[-3000:]}"
        ),
    )
    clean = scenario.fleet.replicas[-1]
    clean.wait_ready()
    # witnesses: every armed incarnation died by SIGKILL right after its failpoint fired
    incarnations = [r for r in scenario.fleet.replicas if r.worker_id.startswith("victim")]
    for replica, point in zip(incarnations, points, strict=False):
        assert replica.proc.returncode == -9, (replica.worker_id, replica.log()[-2000:])
        hits = replica.failpoint_hits()
        assert hits and hits[-1].split()[2:] == [point, "kill"], (replica.worker_id, hits)
    assert [code for _, code in scenario.fleet.exits] == [-9] * len(points)

    scenario.settle(timeout=60)
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    assert survivor.proc.returncode == 0
    scenario.assert_clean()
    assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0


def test_kill_9_at_each_planner_and_maintenance_failpoint(scenario: Scenario) -> None:
    rolling_kills(scenario, PLANNER + MAINTENANCE, survivor_loops="executor")


def test_kill_9_at_each_executor_failpoint(scenario: Scenario) -> None:
    rolling_kills(scenario, EXECUTOR, survivor_loops="planner,executor")
    # the runs the dead incarnations held were recovered: a 'lost' attempt, then another try
    lost = scenario.sql(
        "SELECT DISTINCT job_run_id FROM pgsched_attempt WHERE status = 'lost' ORDER BY 1"
    )
    assert lost, "no run was recovered from a killed executor"
    for (run_id,) in lost:
        statuses = scenario.attempts(run_id)
        assert statuses[-1] in ("succeeded", "lost"), (run_id, statuses)
