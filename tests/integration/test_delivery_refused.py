"""Nothing reaches a refused address, asserted on that address's own server log.

Two real servers on one port: the allowed one on 127.0.0.1 (the test settings'
``ALLOW_NETWORKS``) and a *forbidden* one on 127.0.0.2, loopback too but not
allowed. Every way of naming 127.0.0.2 (a literal in each spelling, a name
resolving to it, a mapped IPv6 form, a name that resolves to both, a redirect
to any of those) must fail the attempt without a retry, and the forbidden
server must log no connection at all. The last step allows 127.0.0.2 and
delivers to it: the control that shows its log would have seen a request.

And the circuit breaker end to end: five 500s from the real server open it,
a run that arrives meanwhile is held back without an attempt, the probe after
the cool-down finds the server recovered and closes it, the held run is
delivered.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from django_pgsched.engine.executor import Executor
from django_pgsched.models import Breaker, JobRun
from tests import resolver
from tests.delivery_helpers import attempts, deliver, delivering
from tests.webhook_server import WebhookServer

FORBIDDEN = "127.0.0.2"


@pytest.fixture
def servers() -> Iterator[tuple[WebhookServer, WebhookServer]]:
    """The allowed server on 127.0.0.1 and the forbidden one on 127.0.0.2, the same port."""
    for _ in range(20):
        allowed = WebhookServer()
        try:
            forbidden = WebhookServer(host=FORBIDDEN, port=allowed.port)
        except OSError:  # the port is taken on 127.0.0.2: try another
            allowed.stop()
            continue
        break
    else:
        pytest.fail("no port free on both 127.0.0.1 and 127.0.0.2")
    yield allowed, forbidden
    allowed.stop()
    forbidden.stop()


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _names() -> None:
    resolver.NAMES.update(
        {
            "forbidden.test": [[FORBIDDEN]],
            "mapped-forbidden.test": [[f"::ffff:{FORBIDDEN}"]],
            "nat64-forbidden.test": [["64:ff9b::7f00:2"]],
            "mixed-forbidden.test": [["127.0.0.1", FORBIDDEN]],
            "later-forbidden.test": [["127.0.0.1"], [FORBIDDEN]],  # a second lookup: refused
        }
    )


def _attempt_at(url: str, allowed: WebhookServer) -> JobRun:
    """A run to ``url`` past the up-front check (as if defined while it was allowed), run once."""
    run = deliver(allowed.url("/ok"), run_pass=False)
    JobRun.objects.filter(pk=run.pk).update(kwargs={"url": url})
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    return run


# (how the URL names the forbidden server, the reason its refusal must give)
DIRECT = [
    ("http://127.0.0.2:{port}/ok", "loopback"),
    ("http://[::ffff:127.0.0.2]:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://[::ffff:7f00:2]:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://2130706434:{port}/ok", "non-canonical"),
    ("http://0x7f.0.0.2:{port}/ok", "non-canonical"),
    ("http://127.2:{port}/ok", "non-canonical"),
    ("http://forbidden.test:{port}/ok", "resolves to 127.0.0.2 (loopback)"),
    ("http://mapped-forbidden.test:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://nat64-forbidden.test:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://mixed-forbidden.test:{port}/ok", "resolves to 127.0.0.2 (loopback)"),
]
REDIRECTED = [
    ("http://127.0.0.2:{port}/ok", "loopback"),
    ("//127.0.0.2:{port}/ok", "loopback"),
    ("http://[::ffff:127.0.0.2]:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://2130706434:{port}/ok", "non-canonical"),
    ("http://forbidden.test:{port}/ok", "resolves to 127.0.0.2 (loopback)"),
    ("http://mapped-forbidden.test:{port}/ok", "embeds 127.0.0.2: loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://metadata.test/latest/meta-data/", "169.254.169.254 (cloud metadata"),
    ("http://localhost:{port}/ok", "not allowed"),
]


def test_nothing_reaches_a_refused_address_on_its_servers_own_log(db, servers):
    allowed, forbidden = servers
    port = allowed.port
    table: list[tuple[str, str, str]] = []
    with delivering(allowed, MAX_REDIRECTS=3):
        _names()
        # a literal is refused up front, where the run is defined
        for template in ("http://127.0.0.2:{port}/ok", "http://[::ffff:127.0.0.2]:{port}/ok"):
            with pytest.raises(ValidationError, match="not a public address"):
                deliver(template.format(port=port))
            table.append((template, "enqueue()", "refused up front"))
        # at the attempt, however it is named
        for template, why in DIRECT:
            url = template.format(port=port)
            run = _attempt_at(url, allowed)
            (attempt,) = attempts(run)
            assert run.status == "failed" and attempt.status == "failed", (url, attempt.error)
            assert why in attempt.error, (url, attempt.error)
            table.append((url, "attempt", attempt.error))
        assert allowed.requests == []  # the mixed answer went nowhere, not even to 127.0.0.1
        # behind a redirect from the allowed server (followed, each hop vetted)
        for template, why in REDIRECTED:
            to = template.format(port=port)
            run = deliver(allowed.url(f"/redirect?to={to}"))
            (attempt,) = attempts(run)
            assert run.status == "failed", (to, attempt.error)
            assert why in attempt.error and "redirect" in attempt.error, (to, attempt.error)
            table.append((f"302 to {to}", "redirect hop", attempt.error))
        assert len(allowed.requests_to("/redirect")) == len(REDIRECTED)
        # a name asked again would say 127.0.0.2: it is asked once, the request goes to .1
        run = deliver(allowed.url("/ok", host="later-forbidden.test"))
        assert run.status == "succeeded" and resolver.CALLS.count("later-forbidden.test") == 1
        table.append(("later-forbidden.test (rebinding)", "attempt", "delivered to 127.0.0.1"))
    with delivering(allowed, MAX_REDIRECTS=0):
        _names()
        run = deliver(allowed.url(f"/redirect?to=http://127.0.0.2:{port}/ok"))
        assert run.status == "failed" and "not followed" in attempts(run)[0].error
    # the forbidden server's own log: not one connection, let alone a request
    assert forbidden.connections == [] and forbidden.requests == []
    # the control: allowed, the same name reaches it (so the log above could have failed)
    with delivering(allowed, ALLOW_NETWORKS=["127.0.0.1/32", f"{FORBIDDEN}/32"]):
        _names()
        run = deliver(f"http://forbidden.test:{port}/ok")
    assert run.status == "succeeded"
    assert len(forbidden.connections) == 1 and forbidden.requests[0].path == "/ok"
    print("\n| URL | where | result |\n|---|---|---|")
    for url, where, result in table:
        print(f"| `{url}` | {where} | {result} |")


def test_five_500s_open_the_breaker_and_a_recovery_closes_it(db, servers):
    server, _ = servers
    server.script("/flaky", [(500, {}, b"down")])
    with delivering(server):  # the default threshold (5) and cool-down
        first = deliver(server.url("/flaky"), max_attempts=8)
        for _ in range(4):  # each retry when it is due (the pass's clock moved to it)
            first.refresh_from_db()
            Executor(concurrency=1, inline=True).run_once(
                now=first.fire_after + timedelta(seconds=0.01)
            )
        first.refresh_from_db()
        row = Breaker.objects.get()
        assert (row.state, row.failures, row.opened) == ("open", 5, 1)
        assert [a.status for a in attempts(first)] == ["failed"] * 5
        assert "circuit breaker" in attempts(first)[-1].error
        assert len(server.requests_to("/flaky")) == 5
        # the run that opened it waits for the cool-down: it is the probe
        assert abs((first.fire_after - row.retry_at).total_seconds()) < 1
        assert first.status == "retrying" and first.attempts == 5
        # a run for the destination meanwhile is held back: not attempted, not failed
        held = deliver(server.url("/flaky"))
        held.refresh_from_db()
        assert held.status in ("pending", "retrying") and held.attempts == 0
        assert held.fire_after >= row.retry_at
        assert len(server.requests_to("/flaky")) == 5
        # recovery: the server answers again, the cool-down ends, the probe closes it
        server.script("/flaky", [(200, {}, b"ok")])
        Breaker.objects.update(retry_at=db_now() - timedelta(seconds=1))
        Executor(concurrency=1, inline=True).run_once(now=first.fire_after + timedelta(seconds=0.1))
        first.refresh_from_db()
        assert first.status == "succeeded"
        row.refresh_from_db()
        assert (row.state, row.failures, row.park_until) == ("closed", 0, None)
        held.refresh_from_db()
        assert held.fire_after <= db_now() + timedelta(seconds=1)  # released
        Executor(concurrency=1, inline=True).run_once(now=db_now() + timedelta(seconds=1))
    held.refresh_from_db()
    assert held.status == "succeeded" and [a.status for a in attempts(held)] == ["succeeded"]
    ids = [r.headers["webhook-id"] for r in server.requests_to("/flaky")]
    assert ids == [first.idempotency_key] * 6 + [held.idempotency_key]
