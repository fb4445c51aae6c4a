"""Claims through NATS JetStream (PGSCHED["CLAIMS"] "nats") with real replicas, under faults.

Quick tier (the machine's NATS at 127.0.0.1:4222, a stream of the test's
own): replicas claim through the broker, one is ``kill -9``-ed mid-run while
poison messages arrive. Full tier (``PGSCHED_FULL_FAULTS=1``; servers the
tests start on loopback ports, with store directories of their own): a
replica killed between commit and publish, and after publishing but before
its commit; the broker stopped and started again (fallback to ``SKIP
LOCKED`` and back); a three-node JetStream cluster with the stream
replicated three times, one node killed, then the whole cluster stopped for
30 s. Every scenario ends with the fault suite's invariants
(``invariants.py``): no duplicate occurrence, nothing lost, at most one
extra execution per run in flight at a crash, attempts within bounds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.natsutil import (
    NatsCluster,
    NatsServer,
    claims_settings,
    delete_stream,
    nats_call,
    require_machine_nats,
)

from .harness import Replica, wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


def claims_overrides(claims: dict[str, Any]) -> dict[str, Any]:
    return {"CLAIMS": {**claims, "SWEEP_INTERVAL": 5, "ACK_WAIT": 5, "TIMEOUT": 1}}


def path(replica: Replica) -> str:
    samples = replica.scrape()
    return "broker" if samples.get('pgsched_claims_path{path="broker"}') == 1 else "postgres"


def broker_passes(replica: Replica) -> float:
    return replica.scrape().get('pgsched_claims_passes_total{path="broker"}', 0.0)


def claimed_through_broker(replica: Replica) -> float:
    return replica.scrape().get('pgsched_claims_messages_total{outcome="claimed"}', 0.0)


def succeeded(scenario: Scenario) -> int:
    return int(scenario.one("SELECT count(*) FROM pgsched_job_run WHERE status = 'succeeded'"))


def publish_poison(url: Any, prefix: str) -> None:
    async def publish(js: Any) -> None:
        await js.publish(f"{prefix}.default._", b'{"run": 9999999999}')  # no such run
        await js.publish(f"{prefix}.default._", b"\x00not json")
        await js.publish(f"{prefix}.default._", b'{"run": [1]}')

    nats_call(url, publish)


def test_kill_9_a_consumer_mid_run_with_poison_messages(scenario: Scenario) -> None:
    require_machine_nats()
    claims = claims_settings()
    try:
        scenario.add_schedules(10, prefix="fast", cron="* * * * * *")
        scenario.add_schedules(
            4, prefix="long", cron="*/2 * * * * *", kwargs={"seconds": 1.5}, timeout=2
        )
        scenario.snapshot_baseline()
        overrides = claims_overrides(claims)
        a = scenario.start("a", concurrency=4, overrides=overrides)
        b = scenario.start("b", concurrency=4, overrides=overrides)
        wait_until(lambda: claimed_through_broker(a) > 5, 20, "a to claim through the broker")
        publish_poison(claims["NATS_URL"], claims["SUBJECT_PREFIX"])
        poison = 'pgsched_claims_messages_total{outcome="malformed"}'
        wait_until(
            lambda: a.scrape().get(poison, 0) + b.scrape().get(poison, 0) == 2,
            10,
            "the malformed messages to be dropped",
        )
        # a holds a long run: kill -9 it mid-run (its message is redelivered, its lease reaped)
        held = wait_until(
            lambda: scenario.one(
                "SELECT min(id) FROM pgsched_job_run WHERE status = 'running' AND worker = 'a'"
                " AND job = 'faults.work' AND kwargs->>'seconds' IS NOT NULL"
                " AND started_at > clock_timestamp() - interval '0.4 s'"
            ),
            20,
            "a to hold a long run",
            interval=0.05,
        )
        assert a.kill9() == -9
        before = succeeded(scenario)
        wait_until(lambda: succeeded(scenario) > before + 20, 30, "b to go on alone")
        # the run a held: its message is redelivered and dropped (still leased), its lease
        # expires, the reaper records a lost attempt, and the run goes round again
        wait_until(
            lambda: scenario.attempts(held)[:1] == ["lost"] and len(scenario.attempts(held)) > 1,
            30,
            f"run {held} to be reaped and run again",
            diagnose=lambda: scenario.describe(held),
        )
        a2 = scenario.start("a", concurrency=4, overrides=overrides)
        wait_until(lambda: claimed_through_broker(a2) > 0, 20, "a.2 to claim through the broker")
        assert path(b) == "broker"
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        scenario.settle(timeout=60)
        scenario.assert_clean()
    finally:
        delete_stream(claims["NATS_URL"], claims["STREAM"])


@pytest.mark.full
@pytest.mark.parametrize("point", ["publisher.before_publish", "publisher.after_publish"])
def test_a_replica_killed_between_commit_and_publish(
    scenario: Scenario, tmp_path: Path, point: str
) -> None:
    with NatsServer(tmp_path / "nats").start() as server:
        claims = claims_settings(server.url)
        scenario.add_schedules(20, prefix="fast", cron="* * * * * *")
        scenario.snapshot_baseline()
        overrides = claims_overrides(claims)
        # the victim plans and publishes, and dies at the point
        victim = scenario.start(
            "victim", ready=False, concurrency=2, failpoints=f"{point}=kill", overrides=overrides
        )
        assert victim.wait_exit(40) == -9
        hits = victim.failpoint_hits()
        assert hits and hits[-1].split()[2:] == [point, "kill"], hits
        # the outbox rows of the batch it was publishing stay (its transaction died);
        # no other replica runs yet, so none has taken them
        left = [row[0] for row in scenario.sql("SELECT id FROM pgsched_claim_outbox")]
        assert left
        # the survivor only executes (its publisher takes the rows left too)
        survivor = scenario.start(
            "survivor", concurrency=4, overrides=overrides, args=["--loops", "executor"]
        )
        # the committed runs it did not publish (or published, uncommitted) are published
        # by the next replica's publisher; the stream drops the repeats
        scenario.start("victim", concurrency=2, overrides=overrides)
        before = succeeded(scenario)
        wait_until(lambda: succeeded(scenario) > before + 40, 30, "the fleet to run on")
        assert claimed_through_broker(survivor) > 0
        # the next publisher took every row it left: it published each again (after
        # "publisher.after_publish" the stream drops the repeat of one it had
        # published) or, when the survivor had claimed the run through the first
        # message, deleted it unpublished; exactly once per occurrence: assert_clean
        assert not scenario.one(
            "SELECT count(*) FROM pgsched_claim_outbox WHERE id = ANY(%s)", [left]
        )
        scenario.fleet.stop_all()
        scenario.settle(timeout=60)
        scenario.assert_clean()


@pytest.mark.full
def test_the_broker_stopped_then_back(scenario: Scenario, tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats").start()
    try:
        claims = claims_settings(server.url)
        scenario.add_schedules(20, prefix="fast", cron="* * * * * *")
        scenario.snapshot_baseline()
        overrides = claims_overrides(claims)
        replicas = [scenario.start(n, concurrency=4, overrides=overrides) for n in ("a", "b")]
        wait_until(lambda: all(path(r) == "broker" for r in replicas), 20, "broker path")
        server.stop()
        wait_until(lambda: all(path(r) == "postgres" for r in replicas), 20, "the fallback")
        before = succeeded(scenario)
        wait_until(lambda: succeeded(scenario) > before + 40, 30, "runs while the broker is down")
        lag = replicas[0].scrape().get("pgsched_claims_outbox_due", 0)
        assert lag > 0  # the outbox waits for the broker
        server.start()
        wait_until(lambda: all(path(r) == "broker" for r in replicas), 30, "the return")
        passes = [broker_passes(r) for r in replicas]
        wait_until(
            lambda: replicas[0].scrape().get("pgsched_claims_outbox_due", 1) < 20,
            30,
            "the outbox to drain",
        )
        time.sleep(2)
        assert [broker_passes(r) for r in replicas] > passes
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        scenario.settle(timeout=60)
        scenario.assert_clean()
    finally:
        server.stop()


@pytest.mark.full
@pytest.mark.timeout(400)
def test_a_three_node_cluster_loses_a_node_then_stops_for_30_s(
    scenario: Scenario, tmp_path: Path
) -> None:
    cluster = NatsCluster(tmp_path / "nats").start()
    try:
        claims = claims_settings(cluster.urls, STREAM_REPLICAS=3)
        scenario.add_schedules(20, prefix="fast", cron="* * * * * *")
        scenario.add_schedules(4, prefix="long", cron="*/2 * * * * *", kwargs={"seconds": 1.5})
        scenario.snapshot_baseline()
        overrides = claims_overrides(claims)
        replicas = [scenario.start(n, concurrency=4, overrides=overrides) for n in ("a", "b")]
        wait_until(lambda: all(path(r) == "broker" for r in replicas), 40, "broker path")

        async def replicas_of(js: Any) -> int:
            info = await js.stream_info(claims["STREAM"])
            return 1 + len(info.cluster.replicas or [])

        assert nats_call(cluster.urls, replicas_of) == 3
        # one node dies: the stream (R3) keeps serving from the other two
        cluster.servers[0].kill()
        counts = [claimed_through_broker(r) for r in replicas]
        wait_until(
            lambda: sum(claimed_through_broker(r) for r in replicas) > sum(counts) + 40,
            40,
            "claims through the broker with a node down",
        )
        cluster.servers[0].start()
        # the whole cluster stops for 30 s: fallback, then return
        cluster.stop()
        wait_until(lambda: all(path(r) == "postgres" for r in replicas), 20, "the fallback")
        before = succeeded(scenario)
        time.sleep(30)
        assert succeeded(scenario) > before + 100  # runs went on through SKIP LOCKED
        cluster.start()
        wait_until(lambda: all(path(r) == "broker" for r in replicas), 60, "the return")
        counts = [claimed_through_broker(r) for r in replicas]
        wait_until(
            lambda: sum(claimed_through_broker(r) for r in replicas) > sum(counts) + 20,
            40,
            "claims through the broker again",
        )
        assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
        scenario.settle(timeout=60)
        scenario.assert_clean()
    finally:
        cluster.stop()
