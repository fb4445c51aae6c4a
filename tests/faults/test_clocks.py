"""Clocks: replicas whose wall clocks are an hour off, and a database whose clock jumps.

- Replica skew ±1 h (time-machine in the replica's ``sitecustomize``): due
  times follow the database, so no run starts before its occurrence and none
  starts an hour late; no duplicates, nothing lost. Witness: each replica's
  ``pgsched_clock_skew_seconds`` reports its skew.
- Database time jumps (libfaketime under the private server's postgres
  processes): back 10 minutes, then forward an hour. Backwards, nothing is
  planned twice (the high-water mark ``next_fire_at`` and the unique index);
  forwards is an outage whose skipped occurrences are counted exactly.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from .cluster import wait_for_server
from .harness import metric_sum, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def test_replica_clocks_an_hour_off_do_not_move_due_times(scenario: Scenario) -> None:
    scenario.add_schedules(10, prefix="fast", cron="* * * * * *")
    scenario.add_schedules(3, prefix="every5", interval=5)
    scenario.snapshot_baseline()
    ahead = scenario.start("ahead", skew=3600)
    behind = scenario.start("behind", skew=-3600)
    time.sleep(6)
    for replica, skew in ((ahead, 3600), (behind, -3600)):
        measured = metric_sum(replica.scrape(), "pgsched_clock_skew_seconds")
        assert abs(measured - skew) < 30, (replica.worker_id, measured)  # witness
        assert "off the database's" in replica.log()
    scenario.settle(timeout=30)
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    scenario.assert_clean()
    early, late, workers = scenario.sql(
        """SELECT count(*) FILTER (WHERE a.started_at < r.scheduled_for),
                  count(*) FILTER (WHERE a.started_at > r.scheduled_for + interval '60 seconds'),
                  count(DISTINCT a.worker)
             FROM pgsched_attempt a JOIN pgsched_job_run r ON r.id = a.job_run_id"""
    )[0]
    assert (early, late) == (0, 0)
    assert workers == 2
    assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0


def test_database_clock_jumps_back_then_forward(scenario: Scenario) -> None:
    if not scenario.cluster.faketime:
        pytest.skip("libfaketime is not installed (Debian package libfaketime)")
    overrides = {"MISFIRE_GRACE": 10}
    try:
        scenario.add_schedules(4, prefix="skip", cron="* * * * * *", policy="skip")
        scenario.add_schedules(4, prefix="latest", cron="* * * * * *", policy="latest")
        scenario.add_schedules(4, prefix="catch", interval=60, policy="catch_up", catch_up_limit=5)
        scenario.snapshot_baseline()
        for name in ("a", "b"):
            scenario.start(name, overrides=overrides)
        time.sleep(3)
        high_water = scenario.one("SELECT max(scheduled_for) FROM pgsched_job_run")
        scenario.cluster.set_clock_offset(-600)
        wait_until(lambda: scenario.clock_offset() < -500, 10, "the database clock to jump back")
        time.sleep(4)
        # nothing planned twice, and nothing planned at all while behind the high-water mark
        assert (
            scenario.one(
                "SELECT count(*) FROM pgsched_job_run "
                "WHERE scheduled_for > %s + interval '2 seconds'",
                [high_water],
            )
            == 0
        )
        violations = scenario.check(allow_overlap=True)
        assert not violations, "\n".join(map(str, violations[:20]))
        scenario.cluster.set_clock_offset(3600)
        wait_until(lambda: scenario.clock_offset() > 3500, 10, "the database clock to jump forward")
        time.sleep(5)
        scenario.settle(timeout=60, grace=10)
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        # leases in flight at the jump expired by the new clock: their runs may run twice
        scenario.assert_clean(allow_overlap=True)
        skipped = dict(
            scenario.sql(
                "SELECT misfire_policy, sum(skipped_occurrences) FROM pgsched_schedule GROUP BY 1"
            )
        )
        assert skipped["skip"] > 4 * 3500 and skipped["latest"] > 4 * 3500, skipped
        assert skipped["catch_up"] >= 4 * (60 - 5 - 2), skipped
        assert scenario.one(
            "SELECT max(n) FROM (SELECT count(*) n FROM pgsched_job_run r JOIN pgsched_schedule s "
            "ON s.id = r.schedule_id WHERE s.misfire_policy = 'latest' AND r.scheduled_for BETWEEN "
            "%s AND %s GROUP BY r.schedule_id) t",
            [high_water + timedelta(minutes=1), high_water + timedelta(minutes=59)],
        ) in (1, None)
    finally:
        scenario.cluster.set_clock_offset(0)
        # Each server process caches the offset for a second, and a backend starts
        # from what its postmaster cached, so the next scenario could be handed a
        # clock an hour ahead (the likely cause of a CI run where the scenario
        # after this one saw nothing planned for 20 s). Restart, so that every
        # process reads the file afresh; Scenario() also checks the clock.
        scenario.fleet.close()
        scenario.conn.close()
        scenario.cluster.restart("fast")
        wait_for_server(scenario.cluster)
        scenario.reconnect()
