"""Eight replicas racing on many schedules that share one cron minute (``0 * * * *``).

The schedules' first occurrence is the current hour's minute 0, on time thanks
to a grace longer than the hour, so every schedule is due at once and all eight
planners and executors race for them. Zero duplicates, every occurrence run
exactly once, and, since nothing faulted, zero reaped runs and zero retries.
"""

from __future__ import annotations

import time

import pytest

from .harness import wait_until
from .scenario import Scenario

OVERRIDES = {"MISFIRE_GRACE": 7200, "EXECUTOR_POLL_INTERVAL": 0.5}


def herd(scenario: Scenario, n: int, replicas: int, timeout: float) -> None:
    fleet = [
        scenario.start(f"r{i}", ready=False, concurrency=4, overrides=OVERRIDES)
        for i in range(replicas)
    ]
    for replica in fleet:
        replica.wait_ready(120)
    now = scenario.db_now()
    hour = now.replace(minute=0, second=0, microsecond=0)
    began = time.monotonic()
    ids = scenario.add_schedules(n, prefix="herd", cron="0 * * * *", first=hour)
    scenario.snapshot_baseline()
    scenario.sql("SELECT pg_notify('pgsched_schedule', 'herd')")
    wait_until(
        lambda: (
            scenario.one(
                "SELECT count(*) FROM pgsched_job_run "
                "WHERE scheduled_for = %s AND status = 'succeeded'",
                [hour],
            )
            == n
        ),
        timeout,
        f"{n} runs to succeed",
        interval=0.5,
    )
    elapsed = time.monotonic() - began
    print(f"\nherd: {n} schedules x {replicas} replicas: all succeeded in {elapsed:.1f}s")
    assert scenario.fleet.stop_all(60) == [0] * replicas, scenario.fleet.logs()
    # every schedule advanced to the occurrence after the last one it planned: the
    # next hour's, or the one after it when the test ran into the next hour's lookahead
    # (one run per occurrence: assert_clean)
    behind = scenario.one(
        "SELECT count(*) FROM pgsched_schedule s WHERE s.id = ANY(%s)"
        " AND s.next_fire_at IS DISTINCT FROM (SELECT max(r.scheduled_for)"
        " FROM pgsched_job_run r WHERE r.schedule_id = s.id) + interval '1 hour'",
        [ids],
    )
    assert behind == 0, f"{behind} schedule(s) not advanced past their last occurrence"
    scenario.assert_clean()
    assert scenario.reaped() == 0, "runs were reaped although nothing faulted"
    assert scenario.one("SELECT count(*) FROM pgsched_attempt WHERE number > 1") == 0
    assert scenario.one("SELECT count(*) FROM pgsched_attempt WHERE status <> 'succeeded'") == 0
    workers = scenario.one("SELECT count(DISTINCT worker) FROM pgsched_attempt")
    assert workers >= 2, "the replicas did not share the work"


@pytest.mark.faults
@pytest.mark.timeout(240)
def test_eight_replicas_race_on_a_few_thousand_schedules(scenario: Scenario) -> None:
    herd(scenario, 2000, 8, timeout=150)


@pytest.mark.full
@pytest.mark.timeout(1800)
def test_eight_replicas_race_on_100k_schedules(scenario: Scenario) -> None:
    herd(scenario, 100_000, 8, timeout=1500)
