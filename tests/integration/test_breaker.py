"""The circuit breaker's statements against real PostgreSQL: transitions, holding back and
releasing a destination's waiting runs, the half-open probe, the write budget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings

from django_pgsched.context import RunContext
from django_pgsched.delivery import breaker
from django_pgsched.models import Breaker, JobRun

URL = "https://hooks.example.com/in"
DEST = "https://hooks.example.com:443"


def run_row(url: str = URL, *, tenant: str = "", fire_in: float = 0, **fields) -> JobRun:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        now = cursor.fetchone()[0]
    when = now + timedelta(seconds=fire_in)
    fields.setdefault("status", "pending")
    return JobRun.objects.create(
        schedule_name="s",
        scheduled_for=when.replace(microsecond=0),
        idempotency_key=f"k-{JobRun.objects.count()}-{when.timestamp()}",
        job="pgsched.http",
        kwargs={"url": url},
        queue="default",
        fire_after=when,
        max_attempts=3,
        timeout=timedelta(seconds=60),
        tenant=tenant,
        **fields,
    )


def ctx(run_id: int, attempt: int = 1, max_attempts: int = 3, tenant: str = "") -> RunContext:
    return RunContext(
        job_run_id=run_id,
        job="pgsched.http",
        schedule_name="s",
        scheduled_for=datetime.now(UTC),
        attempt=attempt,
        max_attempts=max_attempts,
        idempotency_key="k",
        worker="w",
        tenant=tenant,
    )


@pytest.fixture
def fast_breaker():
    with override_settings(PGSCHED={"HTTP": {"BREAKER_THRESHOLD": 3, "BREAKER_COOLDOWN": 30}}):
        yield


def test_the_database_computes_the_destination(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pgsched_http_destination(u) FROM unnest(%s::text[]) u",
            [
                [
                    "https://Hooks.Example.COM/in?x=1",
                    "http://example.com.:8080",
                    "HTTPS://[2001:db8::1]/a",
                    "http://example.com",
                    "not a url",
                ]
            ],
        )
        values = [row[0] for row in cursor.fetchall()]
    assert values == [
        "https://hooks.example.com:443",
        "http://example.com:8080",
        "https://[2001:db8::1]:443",
        "http://example.com:80",
        None,
    ]


def test_it_opens_at_the_threshold_and_holds_back_the_waiting_runs(db, fast_breaker):
    failing = run_row()
    waiting = [run_row(fire_in=i) for i in range(3)]
    later = run_row(fire_in=3 * 86400)  # far ahead: not held, not moved
    other = run_row("https://other.example.com/")
    other_tenant = run_row(tenant="acme")
    admission = breaker.admit(ctx(failing.pk), url=URL)
    assert admission.allowed and admission.state == "closed" and admission.destination == DEST
    for _ in range(2):
        assert breaker.record_failure(ctx(failing.pk), "HTTP 500", url=URL).state == "closed"
    failure = breaker.record_failure(ctx(failing.pk), "HTTP 500", url=URL)
    assert failure.state == "open" and failure.changed
    # the run that opened it is the probe: it tries again when the cool-down ends
    assert failure.not_before(last_attempt=False, probe=False) == failure.retry_at
    row = Breaker.objects.get()
    assert (row.destination, row.failures, row.opened) == (DEST, 3, 1)
    for run in waiting:
        run.refresh_from_db()
        assert run.fire_after == row.park_until  # held back, nothing failed
        assert run.status == "pending" and run.attempts == 0
    for run in (later, other, other_tenant, failing):
        before = run.fire_after
        run.refresh_from_db()
        assert run.fire_after == before
    # while open, a run that is claimed anyway is deferred without an attempt
    admission = breaker.admit(ctx(waiting[0].pk), url=URL)
    assert not admission.allowed
    defer = breaker.hold_back(admission)
    assert not defer.attempted and defer.until == row.park_until
    # a run in flight when it opened waits with the held runs
    late = breaker.record_failure(ctx(waiting[1].pk), "timeout", url=URL)
    assert not late.changed and late.not_before(last_attempt=False, probe=False) == row.park_until


def test_the_probe_closes_it_and_releases_the_held_runs(db, fast_breaker):
    failing = run_row()
    held = run_row(fire_in=1)
    for _ in range(3):
        breaker.record_failure(ctx(failing.pk), "HTTP 503", url=URL)
    Breaker.objects.update(retry_at=datetime.now(UTC) - timedelta(seconds=1))  # cool-down over
    probe = breaker.admit(ctx(failing.pk, attempt=2), url=URL)
    assert probe.allowed and probe.probe and probe.state == "half_open"
    assert not breaker.admit(ctx(held.pk), url=URL).allowed  # one probe at a time
    assert breaker.record_success(ctx(failing.pk, attempt=2), url=URL) == 1
    row = Breaker.objects.get()
    assert (row.state, row.failures, row.park_until) == ("closed", 0, None)
    held.refresh_from_db()
    assert held.fire_after <= datetime.now(UTC) + timedelta(seconds=2)
    assert breaker.admit(ctx(held.pk), url=URL).allowed


def test_a_failed_probe_reopens_with_a_longer_cool_down(db, fast_breaker):
    failing = run_row()
    for _ in range(3):
        breaker.record_failure(ctx(failing.pk), "HTTP 500", url=URL)
    first = Breaker.objects.get()
    Breaker.objects.update(retry_at=datetime.now(UTC) - timedelta(seconds=1))
    assert breaker.admit(ctx(failing.pk, attempt=2), url=URL).probe
    again = breaker.record_failure(ctx(failing.pk, attempt=2), "HTTP 500", url=URL)
    assert again.state == "open" and again.changed
    row = Breaker.objects.get()
    assert row.cooldown == 2 * first.cooldown and row.probe_run_id is None
    assert row.opened == 1  # re-opened, not opened anew


def test_a_probe_that_never_reports_is_given_up(db, fast_breaker):
    a, b = run_row(), run_row()
    for _ in range(3):
        breaker.record_failure(ctx(a.pk), "HTTP 500", url=URL)
    Breaker.objects.update(retry_at=datetime.now(UTC) - timedelta(seconds=1))
    assert breaker.admit(ctx(a.pk), url=URL, probe_window=timedelta(seconds=60)).probe
    assert not breaker.admit(ctx(b.pk), url=URL).allowed
    Breaker.objects.update(retry_at=datetime.now(UTC) - timedelta(seconds=1))  # a's replica died
    taken = breaker.admit(ctx(b.pk), url=URL)
    assert taken.probe and Breaker.objects.get().probe_run_id == b.pk


def test_the_last_attempt_designates_another_run_as_the_probe(db, fast_breaker):
    failing = run_row()
    oldest, newer = run_row(fire_in=1), run_row(fire_in=2)
    for _ in range(2):
        breaker.record_failure(ctx(failing.pk), "HTTP 500", url=URL)
    failure = breaker.record_failure(ctx(failing.pk, attempt=3, max_attempts=3), "x", url=URL)
    assert failure.not_before(last_attempt=True, probe=False) is None
    oldest.refresh_from_db()
    newer.refresh_from_db()
    assert oldest.fire_after == failure.retry_at  # the next probe
    assert newer.fire_after == failure.park_until


def test_a_success_on_a_healthy_destination_writes_nothing(db, fast_breaker):
    run = run_row()
    admission = breaker.admit(ctx(run.pk), url=URL)
    assert admission.state == "closed" and admission.failures == 0
    assert not Breaker.objects.exists()  # a healthy destination has no row at all


def test_the_hold_reads_the_destination_index(db, fast_breaker):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN " + breaker.HOLD_SQL,
            {
                "tenant": "",
                "destination": DEST,
                "park_until": datetime.now(UTC),
                "retry_at": datetime.now(UTC),
                "run": 0,
                "limit": 10,
                "hold": True,
                "designate": False,
            },
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pgsched_run_http_destination_idx" in plan


def test_python_jobs_use_the_breaker_by_name(db, fast_breaker):
    from django_pgsched.outcomes import Defer, Fail

    run = run_row()
    context = ctx(run.pk)
    for _ in range(3):
        with pytest.raises((RuntimeError, Fail)), breaker.circuit(context, "smtp:mail"):
            raise RuntimeError("connection refused")
    row = Breaker.objects.get(destination="smtp:mail")
    assert row.state == "open"
    with pytest.raises(Defer) as info, breaker.circuit(context, "smtp:mail"):
        pass
    assert not info.value.attempted
    Breaker.objects.update(retry_at=datetime.now(UTC) - timedelta(seconds=1))
    with breaker.circuit(context, "smtp:mail") as admission:
        assert admission.probe
    assert Breaker.objects.get(destination="smtp:mail").state == "closed"


def test_an_operator_reset_closes_it(db, fast_breaker):
    run = run_row()
    held = run_row(fire_in=1)
    for _ in range(3):
        breaker.record_failure(ctx(run.pk), "HTTP 500", url=URL)
    assert breaker.reset(Breaker.objects.get().pk) == 1
    assert Breaker.objects.get().state == "closed"
    held.refresh_from_db()
    assert held.fire_after <= datetime.now(UTC) + timedelta(seconds=2)


def test_the_claim_never_reads_a_breaker_and_the_admission_asks_once(db, fast_breaker):
    """The breaker is the delivery's own step: no claim statement joins pgsched_breaker,
    and each attempt's admission is one read (a write only to start a probe)."""
    from django.test.utils import CaptureQueriesContext

    from django_pgsched.engine import queries as named

    for statement in (named.EXECUTOR_PASS, named.EXECUTOR_PASS_BY_ID):
        assert "pgsched_breaker" not in statement.sql and "pgsched.http" not in statement.sql
    run = run_row()
    with CaptureQueriesContext(connection) as queries:
        admission = breaker.admit(ctx(run.pk), url=URL)
    assert admission.allowed and admission.destination == DEST and len(queries) == 1
    for _ in range(3):
        breaker.record_failure(ctx(run.pk), "HTTP 500", url=URL)
    with CaptureQueriesContext(connection) as queries:
        admission = breaker.admit(ctx(run.pk), url=URL)
    assert not admission.allowed and len(queries) == 1
    assert breaker.admit(ctx(run.pk, tenant="acme"), url=URL).allowed  # another tenant's
