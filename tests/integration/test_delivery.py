"""pgsched.http against a real HTTP(S) server on 127.0.0.1, through the real executor.

Every test asserts on the server's own log as well as on our record of the
attempt. No test talks to an address outside this machine: host names go
through the test resolver (tests/resolver.py), never real DNS.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import standardwebhooks
from django.core.exceptions import ValidationError
from django.db import connection

from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun
from tests import resolver
from tests.delivery_helpers import (
    OLD_SECRET,
    SECRET,
    attempts,
    deliver,
    delivering,
)
from tests.webhook_server import WebhookServer


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    s = WebhookServer()
    yield s
    s.stop()


@pytest.fixture
def tls_server() -> Iterator[WebhookServer]:
    s = WebhookServer(tls=True)
    yield s
    s.stop()


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def test_a_signed_delivery_verifies_with_the_reference_library(db, server):
    with delivering(server):
        run = deliver(
            server.url("/ok?a=1"),
            body={"event": "invoice.paid", "amount": 12},
            headers={"X-Tenant": "acme"},
            signing_secret="main",
        )
    assert run.status == "succeeded"
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/ok?a=1"
    assert request.body == b'{"event":"invoice.paid","amount":12}'
    headers = request.headers
    assert headers["webhook-id"] == run.idempotency_key
    assert headers["content-type"] == "application/json"
    assert headers["x-tenant"] == "acme"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    # an independent implementation (the standardwebhooks package) accepts it ...
    payload = standardwebhooks.Webhook(SECRET).verify(request.body, headers)
    assert payload == {"event": "invoice.paid", "amount": 12}
    # ... and rejects a tampered body or another key
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(request.body + b" ", headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OLD_SECRET).verify(request.body, headers)
    (attempt,) = attempts(run)
    detail = attempt.detail
    assert attempt.status == "succeeded"
    assert detail["status"] == 200 and detail["address"] == f"127.0.0.1:{server.port}"
    assert detail["body_excerpt"] == "ok" and detail["body_truncated"] is False
    assert set(detail["timings_ms"]) == {"connect", "first_byte", "total"}
    assert detail["headers"]["content-length"] == "2"
    assert detail["webhook_timestamp"] == int(headers["webhook-timestamp"])


def test_a_rotating_secret_signs_with_every_key(db, server):
    with delivering(server):
        deliver(server.url("/ok"), body="plain text", signing_secret="rotating")
    (request,) = server.requests
    assert request.headers["content-type"] == "text/plain; charset=utf-8"
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (SECRET, OLD_SECRET):
        standardwebhooks.Webhook(secret).verify(request.body, request.headers, json_parse=False)


def test_unsigned_requests_still_carry_the_webhook_id(db, server):
    with delivering(server):
        run = deliver(server.url("/ok"), method="PUT")
    (request,) = server.requests
    assert request.method == "PUT" and request.headers["webhook-id"] == run.idempotency_key
    assert "webhook-signature" not in request.headers


def test_https_pins_the_vetted_address_and_checks_the_certificate_for_the_name(db, tls_server):
    with delivering(tls_server):
        run = deliver(tls_server.url("/ok", host="hooks.test"))
        assert run.status == "succeeded", attempts(run)[0].error
        (request,) = tls_server.requests
        assert request.headers["host"] == f"hooks.test:{tls_server.port}"
        assert resolver.CALLS == ["hooks.test"]  # one lookup, by our resolver; none by urllib3
        # a name the certificate does not cover fails the TLS check (and is retried)
        resolver.NAMES["wrong.test"] = [["127.0.0.1"]]
        bad = deliver(tls_server.url("/ok", host="wrong.test"))
    assert bad.status == "retrying"
    (attempt,) = attempts(bad)
    assert attempt.detail["error"] == "tls" and "wrong.test" in attempt.detail["message"]
    assert len(tls_server.requests) == 1  # nothing was sent over the failed handshake


def test_a_slow_server_past_the_timeout_fails_the_attempt_and_retries(db, server):
    with delivering(server):
        run = deliver(server.url("/slow?s=5"), timeout=1, max_attempts=2)
    assert run.status == "retrying"
    (attempt,) = attempts(run)
    assert attempt.status == "failed"
    assert attempt.detail["error"] in ("read_timeout", "deadline")
    assert attempt.detail["status"] is None
    assert len(server.requests_to("/slow")) == 1


def test_a_server_that_hangs_after_the_headers_is_cut_at_the_deadline(db, server):
    with delivering(server):
        # 2 s: on a loaded machine 1 s could pass before the headers were read
        run = deliver(server.url("/hang-after-headers"), timeout=2)
    (attempt,) = attempts(run)
    assert run.status == "retrying" and attempt.status == "failed"
    assert attempt.detail["status"] == 200 and attempt.detail["error"] == "deadline"
    assert "while reading the body" in attempt.error


def test_a_body_dripping_one_byte_a_second_is_cut_at_the_deadline(db, server):
    with delivering(server):
        started = time.monotonic()
        run = deliver(server.url("/drip?n=60"), timeout=2)
        elapsed = time.monotonic() - started
    (attempt,) = attempts(run)
    assert attempt.detail["error"] == "deadline" and run.status == "retrying"
    assert elapsed < 30  # not the minute the server would take (a loose sanity bound)


def test_a_50_mb_response_is_read_only_up_to_the_excerpt(db, server):
    with delivering(server, RESPONSE_EXCERPT_BYTES=1024):
        run = deliver(server.url("/huge?mb=50"))
    assert run.status == "succeeded"
    (attempt,) = attempts(run)
    assert len(attempt.detail["body_excerpt"]) == 1024 and attempt.detail["body_truncated"]
    time.sleep(0.2)
    assert server.huge_bytes_sent and server.huge_bytes_sent[0] < 50 * 1024 * 1024


def test_429_with_retry_after_3_defers_then_200_succeeds(db, server):
    server.script("/rate", [(429, {"Retry-After": "3"}, b"slow down"), (200, {}, b"ok")])
    with delivering(server):
        run = deliver(server.url("/rate"), max_attempts=1)
        assert run.status == "retrying" and run.attempts == 1
        assert run.max_attempts == 2  # a deferral does not use up the only attempt
        (attempt,) = attempts(run)
        assert attempt.status == "deferred" and "Retry-After 3" in attempt.error
        wait = (run.fire_after - db_now()).total_seconds()
        assert 1.5 < wait <= 3.0
        Executor(concurrency=1, inline=True).run_once()  # not due yet: nothing happens
        assert len(server.requests_to("/rate")) == 1
        Executor(concurrency=1, inline=True).run_once(now=run.fire_after + timedelta(seconds=0.1))
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert [a.status for a in attempts(run)] == ["deferred", "succeeded"]
    first, second = server.requests_to("/rate")
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == run.idempotency_key


def test_503_with_an_http_date_defers_to_that_date(db, server):
    when = (datetime.now(UTC) + timedelta(minutes=10)).replace(microsecond=0)
    server.script("/busy", [(503, {"Retry-After": format_datetime(when, usegmt=True)}, b"")])
    with delivering(server):
        run = deliver(server.url("/busy"))
    assert run.status == "retrying"
    (attempt,) = attempts(run)
    assert attempt.status == "deferred"
    assert abs((run.fire_after - when).total_seconds()) < 5  # read against the server's Date


def test_retry_after_is_capped(db, server):
    server.script("/later", [(429, {"Retry-After": "86400"}, b"")])
    with delivering(server, RETRY_AFTER_MAX=60):
        run = deliver(server.url("/later"))
    wait = (run.fire_after - db_now()).total_seconds()
    assert 50 < wait <= 60
    assert "capped at 60s" in attempts(run)[0].error


def test_deferrals_are_bounded_by_the_attempt_ceiling(db, server):
    server.script("/forever", [(429, {"Retry-After": "0"}, b"")])
    with delivering(server):
        run = deliver(server.url("/forever"), max_attempts=1)
        for _ in range(10):
            Executor(concurrency=1, inline=True).run_once(now=db_now() + timedelta(seconds=1))
    run.refresh_from_db()
    assert run.status == "failed" and run.attempts == 8
    assert [a.status for a in attempts(run)] == ["deferred"] * 8
    assert len(server.requests_to("/forever")) == 8


@pytest.mark.parametrize(
    ("status", "retried"), [(400, False), (404, False), (410, False), (408, False), (500, True)]
)
def test_client_errors_fail_without_retry_server_errors_retry(db, server, status, retried):
    with delivering(server):
        run = deliver(server.url(f"/status/{status}"), max_attempts=3)
    assert run.status == ("retrying" if retried else "failed")
    assert attempts(run)[0].detail["status"] == status


def test_a_schedule_may_retry_408_409_425(db, server):
    with delivering(server):
        run = deliver(server.url("/status/409"), retry_statuses=[409], max_attempts=3)
    assert run.status == "retrying"


def test_redirects_are_not_followed_by_default(db, server):
    with delivering(server):
        run = deliver(server.url("/redirect?to=http://169.254.169.254/latest/meta-data/"))
    assert run.status == "failed"
    (attempt,) = attempts(run)
    assert "not followed" in attempt.error and attempt.detail["status"] == 302
    assert len(server.requests) == 1


def test_a_followed_redirect_to_the_metadata_address_is_refused(db, server):
    with delivering(server, MAX_REDIRECTS=3):
        run = deliver(server.url("/redirect?to=http://169.254.169.254/latest/meta-data/"))
        to_name = deliver(server.url("/redirect?to=http://metadata.test/"))
    assert run.status == "failed" and to_name.status == "failed"
    assert "cloud metadata" in attempts(run)[0].error
    assert "169.254.169.254" in attempts(to_name)[0].error
    assert resolver.CALLS == ["metadata.test"]
    assert len(server.requests) == 2


def test_a_followed_redirect_is_vetted_and_sent_again(db, server):
    with delivering(server, MAX_REDIRECTS=2):
        target = server.url("/ok", host="hooks.test")
        run = deliver(server.url(f"/redirect?to={target}"), method="PUT", body={"a": 1})
    assert run.status == "succeeded"
    _first, second = server.requests
    assert second.path == "/ok" and second.headers["host"] == f"hooks.test:{server.port}"
    assert second.method == "GET"  # a 302 becomes a GET without the body
    assert attempts(run)[0].detail["redirects"][0]["status"] == 302


def test_a_redirect_to_another_origin_carries_neither_the_headers_nor_a_signature(db, server):
    """The schedule's Authorization and cookies, and a fresh signature, were re-sent to
    whatever origin a Location named; the same origin's redirect keeps them."""
    secret_headers = {"Authorization": "Bearer s3cret", "Cookie": "session=abc"}
    with delivering(server, MAX_REDIRECTS=3):
        elsewhere = server.url("/ok", host="hooks.test")  # another origin, same server
        away = deliver(
            server.url(f"/redirect?to={elsewhere}"),
            headers=secret_headers,
            signing_secret="main",
        )
        home = deliver(
            server.url("/redirect?to=/ok?same=1"), headers=secret_headers, signing_secret="main"
        )
    assert away.status == "succeeded" and home.status == "succeeded"
    first, second, third, fourth = server.requests
    assert first.headers["authorization"] == "Bearer s3cret"
    assert second.headers["host"] == f"hooks.test:{server.port}"
    assert not {"authorization", "cookie", "webhook-signature", "webhook-id"} & set(
        second.headers
    ), second.headers
    # the same origin: the schedule's headers and a signature, as on the first request
    assert third.path == "/redirect?to=/ok?same=1" and fourth.path == "/ok?same=1"
    assert fourth.headers["authorization"] == "Bearer s3cret"
    assert fourth.headers["cookie"] == "session=abc"
    assert "webhook-signature" in fourth.headers


def test_a_redirect_from_https_to_http_is_refused(db, tls_server):
    with delivering(tls_server, MAX_REDIRECTS=3):
        down = f"http://hooks.test:{tls_server.port}/ok"
        run = deliver(tls_server.url(f"/redirect?to={down}", host="hooks.test"))
    assert run.status == "failed"
    (attempt,) = attempts(run)
    assert "https to http" in attempt.error and "not followed" in attempt.error
    assert len(tls_server.requests) == 1


def test_a_name_resolving_to_loopback_is_refused_without_the_allowance(db, server):
    with delivering(None, ALLOW_PORTS=[server.port]):
        run = deliver(server.url("/ok", host="internal.test"))
        # a literal is refused up front: enqueue() (and the admin, and full_clean()) say so
        with pytest.raises(ValidationError, match=r"127\.0\.0\.1 is not a public address"):
            deliver(server.url("/ok"))
    with delivering(server):  # defined while allowed, delivered after the allowance went
        literal = deliver(server.url("/ok"), run_pass=False)
    with delivering(None, ALLOW_PORTS=[server.port]):
        Executor(concurrency=1, inline=True).run_once()
    literal.refresh_from_db()
    assert run.status == "failed" and literal.status == "failed"
    assert "resolves to 127.0.0.1 (loopback)" in attempts(run)[0].error
    assert "not a public address (loopback)" in attempts(literal)[0].error
    assert server.connections == []  # the server saw nothing at all


def test_dns_rebinding_gets_nowhere_one_lookup_per_attempt(db, server):
    with delivering(server):
        run = deliver(server.url("/ok", host="rebind.test"))
    assert run.status == "succeeded"
    assert resolver.CALLS == ["rebind.test"]  # a second lookup would have said 127.0.0.2
    (request,) = server.requests
    assert request.headers["host"] == f"rebind.test:{server.port}"


def test_any_refused_address_among_the_answers_refuses_the_name(db, server):
    with delivering(server):
        run = deliver(server.url("/ok", host="mixed.test"))
    assert run.status == "failed" and "10.1.2.3 (private)" in attempts(run)[0].error
    assert server.connections == []


def test_an_unknown_name_fails_and_is_retried(db, server):
    with delivering(server):
        run = deliver(server.url("/ok", host="nowhere.test"))
    assert run.status == "retrying" and "could not resolve nowhere.test" in attempts(run)[0].error


def test_a_reaped_run_sends_nothing(transactional_db, server):
    """The lease is re-asserted (a fenced renewal) after connecting, before a byte is sent."""
    import threading

    from django_pgsched.engine.maintenance import Reaper

    with delivering(server):
        resolver.BLOCK["hooks.test"] = gate = threading.Event()
        run = deliver(server.url("/ok", host="hooks.test"), run_pass=False)
        executor = Executor(concurrency=1)
        executor.start_threads()
        try:
            executor.run_once()
            deadline = time.monotonic() + 10
            while resolver.CALLS != ["hooks.test"] and time.monotonic() < deadline:
                time.sleep(0.01)
            # the replica "froze": its lease expires and the reaper takes the run back
            JobRun.objects.filter(pk=run.pk).update(
                claim_expires_at=db_now() - timedelta(seconds=1)
            )
            assert Reaper().run_once().retried == 1
            gate.set()
            while executor.busy() and time.monotonic() < deadline:
                executor.run_once()
                time.sleep(0.01)
        finally:
            executor.stopping.set()
            executor.lease_sessions.close()
            gate.set()
    run.refresh_from_db()
    assert run.status == "retrying"
    assert [a.status for a in attempts(run)] == ["lost"]
    assert server.requests == []  # connected, perhaps, but not one request sent


def test_a_lost_lease_cuts_the_request_in_flight(transactional_db, server):
    """Cancelling the run (as a lost lease does) closes the connection under the request."""
    from django_pgsched.api import cancel_runs

    held = server.hold("/held")
    with delivering(server):
        run = deliver(server.url("/held"), run_pass=False, timeout=20)
        executor = Executor(concurrency=1)
        executor.start_threads()
        try:
            executor.run_once()
            deadline = time.monotonic() + 10
            while not server.requests_to("/held") and time.monotonic() < deadline:
                time.sleep(0.01)
            run.refresh_from_db()
            cancel_runs([(run.pk, run.claimed_by)], note="test")
            for claim in executor.in_flight.values():
                claim.lease.renew_at = 0.0  # renew now: the renewal finds the lease gone
            cut = time.monotonic()
            executor.run_once()
            while executor.busy() and time.monotonic() < deadline:
                time.sleep(0.01)
            # the job returned at once: its connection was closed under the request
            # (the server still holds the request, and would for a minute)
            assert not executor.busy() and time.monotonic() - cut < 5
            assert not held.is_set()
        finally:
            held.set()
            executor.stopping.set()
            executor.lease_sessions.close()
    run.refresh_from_db()
    assert run.status == "cancelled"


def test_bad_kwargs_fail_the_run_without_retrying(db, server):
    from django_pgsched.models import JobRun as Run

    with delivering(server):
        run = deliver(server.url("/ok"), run_pass=False)
        Run.objects.filter(pk=run.pk).update(kwargs={"url": "gopher://x/"})
        Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "failed" and "scheme must be" in attempts(run)[0].error
    assert server.connections == []
