"""A replica started while its database cannot be reached waits for it, then runs.

``runscheduler`` used to exit 1 when the database was down at start (its
checks and migrations check connected first). Now the checks, the migrations
check and the settings sync wait with backoff, ``/readyz`` says 503 and
``/healthz`` 200 ("starting") meanwhile, and the loops start once the database
answers. A permanent error (a schedule the database refuses) still ends the
command at once, naming the schedule.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from django_pgsched.engine.stranded import JOB_KEY
from tests.pgcluster import free_port

from .harness import FaultProxy, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def probe(port: int | None, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_a_replica_waits_for_an_unreachable_database_then_starts(scenario: Scenario) -> None:
    proxy = FaultProxy(scenario.cluster.port)
    reachable = proxy.upstream
    proxy.upstream = ("127.0.0.1", free_port())  # nothing listens there: every connect fails
    try:
        replica = scenario.start("patient", ready=False, database_url=proxy.url(scenario.dbname))
        replica.wait_for_log("the database is unreachable", timeout=60)
        wait_until(lambda: probe(replica.metrics_port, "/readyz")[0] == 503, 10, "/readyz 503")
        assert probe(replica.metrics_port, "/healthz") == (
            200,
            "starting: waiting for the database\n",
        )
        assert replica.alive
        proxy.upstream = reachable
        replica.wait_ready(60)
        wait_until(lambda: probe(replica.metrics_port, "/readyz")[0] == 200, 10, "/readyz 200")
        # its executor registers its jobs: shared advisory locks (engine/stranded.py)
        wait_until(
            lambda: scenario.one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
                [JOB_KEY],
            ),
            10,
            "the replica's job registrations",
        )
        assert "Traceback" not in replica.log()
    finally:
        proxy.close()


def test_a_schedule_the_database_refuses_ends_the_start_at_once(scenario: Scenario) -> None:
    replica = scenario.start(
        "refused",
        ready=False,
        # a name the model refuses: the sync used to retry it forever ("DataError")
        overrides={"SCHEDULES": {"x" * 300: {"job": "tests.noop", "cron": "* * * * *"}}},
    )
    code = replica.wait_exit(60)
    assert code != 0
    log = replica.log()
    assert "at most 200 characters" in log and "xxxxxxxx" in log
    assert "retrying" not in log
