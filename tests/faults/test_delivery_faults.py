"""HTTP deliveries under faults: kill -9 mid-request, PostgreSQL restarted mid-request.

Real replicas (``runscheduler`` subprocesses) deliver to a real HTTP server on
127.0.0.1 run by the test, which logs every request it receives. The promise
checked from the server's side: at most one extra delivery per run, and every
delivery of a run carries the same ``webhook-id`` (the run's idempotency key),
so a receiver that deduplicates on it acts once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.webhook_server import WebhookServer

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    s = WebhookServer()
    yield s
    s.stop()


def http_overrides(server: WebhookServer) -> dict[str, Any]:
    return {"HTTP": {"ALLOW_NETWORKS": ["127.0.0.1/32"], "ALLOW_PORTS": [server.port]}}


def deliveries(server: WebhookServer, path: str) -> list[str]:
    return [r.headers.get("webhook-id", "") for r in server.requests_to(path)]


def errors(scenario: Scenario, run_id: int) -> list[tuple[Any, ...]]:
    return scenario.sql(
        "SELECT number, status, error, detail FROM pgsched_attempt WHERE job_run_id = %s"
        " ORDER BY number",
        [run_id],
    )


def key_of(scenario: Scenario, run_id: int) -> str:
    return str(scenario.one("SELECT idempotency_key FROM pgsched_job_run WHERE id = %s", [run_id]))


def test_kill_9_mid_request_delivers_again_once_with_the_same_webhook_id(
    scenario: Scenario, server: WebhookServer
) -> None:
    held = server.hold("/hold")
    run_id = scenario.add_run(
        "pgsched.http", kwargs={"url": server.url("/hold"), "body": {"n": 1}}, timeout=3
    )
    a = scenario.start("a", overrides=http_overrides(server))
    wait_until(lambda: deliveries(server, "/hold"), 30, "a's request", diagnose=scenario.fleet.logs)
    a.kill9()  # the request left; its answer never reaches anyone
    held.set()  # the server answers from now on
    scenario.start("b", overrides=http_overrides(server))
    wait_until(
        lambda: scenario.run_state(run_id)[0] == "succeeded",
        60,
        "the run redelivered by b",
        diagnose=lambda: f"{errors(scenario, run_id)}\n{scenario.describe(run_id)}",
    )
    ids = deliveries(server, "/hold")
    assert ids == [key_of(scenario, run_id)] * 2, ids  # one extra, the same webhook-id
    assert scenario.attempts(run_id) == ["lost", "succeeded"], errors(scenario, run_id)
    scenario.assert_clean()


def test_postgres_restart_mid_request_costs_at_most_one_extra_delivery(
    scenario: Scenario, server: WebhookServer
) -> None:
    held = server.hold("/hold")
    runs = [
        scenario.add_run(
            "pgsched.http", kwargs={"url": server.url("/hold"), "body": {"n": i}}, timeout=4
        )
        for i in range(4)
    ]
    scenario.start("a", overrides=http_overrides(server))
    wait_until(
        lambda: len(server.requests_to("/hold")) >= 4,
        30,
        "the four requests in flight",
        diagnose=scenario.fleet.logs,
    )
    scenario.conn.close()
    scenario.cluster.restart("immediate")  # while every request waits for its answer
    scenario.reconnect()
    held.set()
    wait_until(
        lambda: all(scenario.run_state(r)[0] == "succeeded" for r in runs),
        90,
        "every run to succeed after the restart",
        diagnose=lambda: "\n".join(scenario.describe(r) for r in runs),
    )
    by_key: dict[str, int] = {}
    for webhook_id in deliveries(server, "/hold"):
        by_key[webhook_id] = by_key.get(webhook_id, 0) + 1
    assert set(by_key) == {key_of(scenario, r) for r in runs}
    assert all(1 <= n <= 2 for n in by_key.values()), by_key
    scenario.assert_clean()
