"""A schedule that silently stopped is counted by ``pgsched_schedules_stalled``; the count clears.

Real replicas, their own metrics ports. Two every-second schedules; one is moved to a
queue no replica serves (an operator's typo, a deploy that dropped a worker pool): it
stays ``active``, its runs are planned and never start. No error is logged anywhere;
the gauge is the only signal. The scenario reads it from a replica's ``/metrics``
(``reason="not_running"`` = 1, the healthy schedule not counted), then starts a replica
that serves the queue and waits for the count to clear, and ends with the invariants.
"""

from __future__ import annotations

import pytest

from django_pgsched.ops.metrics import STALLS_EVERY

from .harness import Replica, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

STALLED = 'pgsched_schedules_stalled{reason="not_running"}'
NOT_PLANNED = 'pgsched_schedules_stalled{reason="not_planned"}'


def stalled(replica: Replica) -> tuple[float, float]:
    samples = replica.scrape()
    return samples.get(STALLED, -1.0), samples.get(NOT_PLANNED, -1.0)


def test_the_stalled_gauge_fires_for_a_silent_stop_and_clears_on_recovery(
    scenario: Scenario,
) -> None:
    (healthy,) = scenario.add_schedules(1, prefix="healthy", cron="* * * * * *", grace=1)
    (quiet,) = scenario.add_schedules(1, prefix="quiet", cron="* * * * * *", grace=1)
    scenario.sql("UPDATE pgsched_schedule SET queue = 'reports' WHERE id = %s", [quiet])
    scenario.snapshot_baseline()
    a = scenario.start("a", args=["--queues", "default"])

    # two occurrences due past their grace and none started: 'quiet' is stalled
    wait_until(
        lambda: (
            scenario.one(
                "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s"
                " AND fire_after < clock_timestamp() - interval '4 seconds'",
                [quiet],
            )
            >= 2
        ),
        30,
        "two of the quiet schedule's runs to be overdue",
    )
    assert (
        scenario.one(
            "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s"
            " AND started_at IS NOT NULL",
            [quiet],
        )
        == 0
    )
    # the replica read the gauge when it registered it (at its start): the next read is
    # at most STALLS_EVERY seconds later
    wait_until(
        lambda: stalled(a) == (1.0, 0.0),  # 'quiet', and only it
        STALLS_EVERY + 15,
        "the gauge to count the quiet schedule",
        interval=1.0,
        diagnose=a.log,
    )
    assert (
        scenario.one(
            "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s"
            " AND started_at IS NOT NULL",
            [healthy],
        )
        > 0
    )

    # recovery: a replica serves the queue; the quiet schedule's runs start again
    scenario.start("b", args=["--queues", "reports"])
    wait_until(
        lambda: (
            scenario.one(
                "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s"
                " AND started_at IS NOT NULL",
                [quiet],
            )
            > 0
        ),
        30,
        "the quiet schedule's runs to start",
    )
    # read again at most STALLS_EVERY seconds after the read that counted it
    wait_until(
        lambda: stalled(a) == (0.0, 0.0), STALLS_EVERY + 15, "the gauge to clear", interval=1.0
    )

    scenario.settle(timeout=30)
    assert sorted(scenario.fleet.stop_all()) == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()
