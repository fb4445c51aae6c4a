"""Network faults through the TCP proxy, and a PostgreSQL crash-restart under load.

- Blackhole mid-transaction: replica ``a`` reaches the server through the
  proxy and holds its planner transaction open (failpoint); the proxy then
  forwards nothing either way. The server ends a's idle transaction
  (``idle_in_transaction_session_timeout``), its row locks go, and ``b`` plans
  those schedules. After healing, a reconnects. Witness: bytes held by the
  proxy, the server's idle-in-transaction termination in its log.
- ``pg_ctl restart -m immediate`` under load. Witness:
  ``pg_postmaster_start_time()`` moved.
"""

from __future__ import annotations

import time

import pytest

from .harness import FaultProxy, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]


def test_blackhole_mid_planner_transaction(scenario: Scenario) -> None:
    scenario.add_schedules(20, prefix="fast", cron="* * * * * *")
    scenario.snapshot_baseline()
    proxy = FaultProxy(scenario.cluster.port)
    try:
        log_before = scenario.cluster.log.read_text(errors="replace")
        a = scenario.start(
            "a",
            database_url=proxy.url(scenario.dbname),
            # long enough for the blackhole to land inside the transaction, shorter than the
            # 2 s idle-in-transaction timeout so that only the blackhole can trigger it
            failpoints="planner.after_claim=sleep(1.5)",
        )
        b = scenario.start("b")
        wait_until(lambda: a.failpoint_hits(), 20, "a's planner to hold its transaction")
        proxy.blackhole()
        time.sleep(4.5)  # > IDLE_IN_TRANSACTION_TIMEOUT (2 s): the server ends a's transaction
        held = proxy.held
        proxy.heal()
        assert held > 0, "nothing was held: the blackhole did not cut a's traffic"
        server_log = scenario.cluster.log.read_text(errors="replace")[len(log_before) :]
        assert "idle-in-transaction timeout" in server_log, server_log[-2000:]
        wait_until(lambda: "retrying in" in a.log(), 30, "a to notice and retry")
        scenario.settle(timeout=60)
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        assert b.proc.returncode == 0
        scenario.assert_clean()
        assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0
    finally:
        proxy.close()


def test_postgres_immediate_restart_under_load(scenario: Scenario) -> None:
    scenario.add_schedules(30, prefix="fast", cron="* * * * * *")
    scenario.add_schedules(5, prefix="long", cron="*/2 * * * * *", kwargs={"seconds": 1.0})
    scenario.snapshot_baseline()
    for name in ("a", "b", "c"):
        scenario.start(name, concurrency=4)
    time.sleep(3)
    started = scenario.cluster.postmaster_start_time()
    scenario.conn.close()
    scenario.cluster.restart("immediate")
    scenario.reconnect()
    assert scenario.cluster.postmaster_start_time() > started  # witness
    time.sleep(3)
    scenario.settle(timeout=90)
    assert scenario.fleet.stop_all() == [0, 0, 0], scenario.fleet.logs()
    scenario.assert_clean()
    assert scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule") == 0
