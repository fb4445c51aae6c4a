"""Metrics follow the committed database work; health endpoints reflect the loops."""

from __future__ import annotations

import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.db import connection
from django.test import TestCase
from prometheus_client.parser import text_string_to_metric_families

from django_pgsched import api, enqueue
from django_pgsched.engine.executor import Executor
from django_pgsched.engine.maintenance import Reaper
from django_pgsched.engine.planner import Planner
from django_pgsched.engine.runner import Runner
from django_pgsched.models import JobRun, Schedule
from django_pgsched.ops.metrics import DatabaseCollector, Metrics, make_server
from tests.conftest import at

T = at("2026-03-01 12:00:00")

CONTRACT = {
    "pgsched_schedule_occurrences_total",
    "pgsched_schedule_skipped_occurrences_total",
    "pgsched_runs_due_backlog",
    "pgsched_clock_skew_seconds",
    "pgsched_runs_finished_total",
    "pgsched_run_duration_seconds",
    "pgsched_leases_lost_total",
    "pgsched_leases_reaped_total",
}


@pytest.fixture
def metrics():
    m = Metrics()
    m.registry.register(DatabaseCollector())
    m.connect()
    yield m
    m.disconnect()


def samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    result = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for sample in family.samples:
            result[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return result


def value(m: Metrics, name: str, **labels: str) -> float:
    return samples(m).get((name, tuple(sorted(labels.items()))), 0.0)


def test_skipped_counter_equals_the_database_after_an_outage(db, metrics):
    s = Schedule.objects.create(
        name="hourly-probe",
        job="tests.noop",
        cron="0 * * * * *",
        misfire_policy="skip",
        next_fire_at=T - timedelta(hours=3),
    )
    Planner().run_once(now=T)
    s.refresh_from_db()
    labels = {"queue": "default", "job": "tests.noop", "kind": "cron"}
    assert s.skipped_occurrences == 179
    assert (
        value(metrics, "pgsched_schedule_skipped_occurrences_total", **labels, policy="skip")
        == s.skipped_occurrences
    )
    assert value(metrics, "pgsched_schedule_occurrences_total", **labels) == JobRun.objects.count()
    # the ledger's counter moves by the same occurrences, with their reason
    assert (
        value(metrics, "pgsched_schedule_ledger_occurrences_total", **labels, reason="misfire_skip")
        == sum(s.skipped_ranges.values_list("count", flat=True))
        == 179
    )


def test_run_outcomes_and_reaped_leases_are_counted(db, metrics):
    enqueue("tests.noop")
    enqueue("tests.fail", max_attempts=1)
    Executor(concurrency=2, inline=True).run_once()
    assert (
        value(
            metrics,
            "pgsched_runs_finished_total",
            queue="default",
            job="tests.noop",
            status="succeeded",
        )
        == 1
    )
    assert (
        value(
            metrics,
            "pgsched_runs_finished_total",
            queue="default",
            job="tests.fail",
            status="failed",
        )
        == 1
    )
    assert (
        value(metrics, "pgsched_run_duration_seconds_count", queue="default", job="tests.noop") == 1
    )
    lost = enqueue("tests.noop", max_attempts=1)
    Executor(concurrency=1)._exchange(__import__("django.db").db.connection, None, 1)
    JobRun.objects.filter(pk=lost.pk).update(claim_expires_at=T)
    Reaper().run_once()
    assert value(metrics, "pgsched_leases_reaped_total") == 1
    assert (
        value(
            metrics,
            "pgsched_runs_finished_total",
            queue="default",
            job="tests.noop",
            status="failed",
        )
        == 1
    )


def test_backlog_and_skew_are_read_from_the_database(transactional_db, metrics):
    enqueue("tests.noop")
    enqueue("tests.noop", run_at=at("2099-01-01 00:00:00"))  # not due: not backlog
    Schedule.objects.create(name="ok", job="tests.noop", cron="* * * * *")
    Schedule.objects.create(name="bad", job="tests.noop", cron="* * * * *")
    Schedule.objects.filter(name="bad").update(status="broken", last_error="cron: ...")
    current = samples(metrics)
    assert current[("pgsched_runs_due_backlog", ())] == 1
    assert current[("pgsched_schedules_broken", ())] == 1
    assert abs(current[("pgsched_clock_skew_seconds", ())]) < 5  # same host, same clock


def fetch(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_endpoints_serve_every_contract_metric_and_health(transactional_db, metrics):
    runner = Runner(loops=["planner"])
    server = make_server(0, runner, metrics, host="127.0.0.1")
    port = server.server_address[1]
    import threading

    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        Planner().run_once()
        enqueue("tests.noop")
        Executor(concurrency=1, inline=True).run_once()
        code, body = fetch(port, "/metrics")
        assert code == 200
        names = {f.name for f in text_string_to_metric_families(body)}
        assert {n.removesuffix("_total") for n in CONTRACT} <= names, names
        assert fetch(port, "/readyz")[0] == 200
        runner.state.last_tick["planner"] = runner.state.started  # as if it just ticked
        assert fetch(port, "/healthz") == (200, "planner: ok\n")
        runner.state.last_tick["planner"] -= 3600  # a stalled loop fails the probe
        assert fetch(port, "/healthz") == (503, "planner: stalled\n")
        assert fetch(port, "/nope")[0] == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_tenant_is_a_label_only_when_asked_for(db, metrics):
    """Off by default (cardinality); METRICS_TENANT_LABEL labels the runs' counter and histogram."""
    labelled = Metrics(tenant_label=True)
    labelled.connect()
    try:
        enqueue("tests.noop", tenant="acme")
        enqueue("tests.fail", max_attempts=1)
        Executor(concurrency=2, inline=True).run_once()
        lost = enqueue("tests.noop", max_attempts=1, tenant="globex")
        Executor(concurrency=1)._exchange(connection, None, 1)
        JobRun.objects.filter(pk=lost.pk).update(claim_expires_at=T)
        Reaper().run_once()
        running = enqueue("tests.noop", tenant="initech")
        Executor(concurrency=1)._exchange(connection, None, 1)
        with TestCase.captureOnCommitCallbacks(execute=True):
            running.refresh_from_db()
            api.cancel_runs([(running.pk, running.claimed_by)], note="test")
    finally:
        labelled.disconnect()
    finished = "pgsched_runs_finished_total"
    assert not any("tenant" in dict(labels) for _, labels in samples(metrics))
    assert value(metrics, finished, queue="default", job="tests.noop", status="succeeded") == 1
    run = {"queue": "default", "job": "tests.noop"}
    assert value(labelled, finished, **run, status="succeeded", tenant="acme") == 1
    assert (
        value(labelled, finished, queue="default", job="tests.fail", status="failed", tenant="")
        == 1
    )
    assert value(labelled, finished, **run, status="failed", tenant="globex") == 1  # reaped
    assert value(labelled, finished, **run, status="cancelled", tenant="initech") == 1
    assert value(labelled, "pgsched_run_duration_seconds_count", **run, tenant="acme") == 1


def test_the_metrics_server_listens_on_loopback_unless_told(db, metrics):
    server = make_server(0, Runner(loops=["planner"]), metrics)
    try:
        assert server.server_address[0] == "127.0.0.1"  # like runserver
    finally:
        server.server_close()


def test_tenant_gauges_only_with_the_tenant_label(db, metrics, settings):
    """Live leases and due runs per tenant, and the paused tenants, read at scrape time
    from the runs' partial indexes; off without METRICS_TENANT_LABEL (cardinality)."""
    from django_pgsched.models import Tenant

    Tenant.objects.create(key="globex", paused=True, pause_reason="unpaid")
    for _ in range(3):
        enqueue("tests.noop", tenant="acme")
    enqueue("tests.noop", tenant="initech")
    Executor(concurrency=1)._exchange(connection, None, 1)  # one leased, not finished
    leased = JobRun.objects.get(status="running")
    assert not any(name.startswith("pgsched_tenant_") for name, _ in samples(metrics))
    settings.PGSCHED = {"METRICS_TENANT_LABEL": True}
    due = {t: value(metrics, "pgsched_tenant_runs_due", tenant=t) for t in ("acme", "initech")}
    assert sum(due.values()) == 3 and due[leased.tenant] == (2 if leased.tenant == "acme" else 0)
    assert value(metrics, "pgsched_tenant_runs_running", tenant=leased.tenant) == 1
    assert value(metrics, "pgsched_tenant_paused", tenant="globex") == 1
    JobRun.objects.filter(pk=leased.pk).update(claim_expires_at=T)  # the lease expired
    assert ("pgsched_tenant_runs_running", (("tenant", leased.tenant),)) not in samples(metrics)
