"""What a tenant reads of its failed attempts: never a traceback's file paths and source
lines, nor what a delivery's host name resolves to, nor whether it exists.

The whole reason stays for operators: the attempt's error in the admin and the staff
view of the history API (tracebacks), and the attempt's admin-only detail (resolver
answers).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from django_pgsched import enqueue
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt
from tests import resolver
from tests.delivery_helpers import http_settings
from tests.webhook_server import WebhookServer

URL = "/scheduler/runs/"


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    s = WebhookServer()
    yield s
    s.stop()


def tenant_view(client: Client, run_id: int, tenant: str) -> dict[str, Any]:
    response = client.get(f"{URL}{run_id}/", headers={"X-Tenant": tenant})
    assert response.status_code == 200, response.content
    return response.json()


def test_a_jobs_traceback_reaches_the_tenant_as_its_last_line_only(client, admin_client, db):
    run = enqueue("tests.fail", kwargs={"message": "card declined"}, tenant="acme")
    Executor(concurrency=1, inline=True).run_once()
    stored = Attempt.objects.get(job_run_id=run.pk).error
    assert "Traceback" in stored and "jobs.py" in stored  # operators keep the whole of it
    with override_settings(PGSCHED={"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}):
        (attempt,) = tenant_view(client, run.pk, "acme")["attempts"]
    assert attempt["error"] == "RuntimeError: card declined"
    assert attempt["error_class"] == "builtins.RuntimeError"
    (staff,) = admin_client.get(f"{URL}{run.pk}/").json()["attempts"]
    assert staff["error"] == stored


def test_a_delivery_to_an_internal_name_tells_the_tenant_nothing_of_it(client, db, server):
    settings = http_settings(server)
    settings["TENANT_RESOLVER"] = "tests.testapp.tenancy.from_header"
    with override_settings(PGSCHED=settings):
        resolver.reset()
        resolver.NAMES["db.corp.test"] = [["10.2.3.4"]]  # an internal name, a private answer
        internal = enqueue(
            "pgsched.http", kwargs={"url": server.url("/ok", host="db.corp.test")}, tenant="acme"
        )
        missing = enqueue(
            "pgsched.http", kwargs={"url": server.url("/ok", host="nowhere.test")}, tenant="acme"
        )
        Executor(concurrency=2, inline=True).run_once()
        seen = [
            tenant_view(client, r.pk, "acme")["attempts"][0]["error"] for r in (internal, missing)
        ]
    for error in seen:
        assert "10.2.3.4" not in error and "private" not in error and "resolve" not in error[9:]
    # the private answer and the missing name read alike: only the host name differs
    assert seen[0].split(":", 1)[1].replace("db.corp.test", "H") == seen[1].split(":", 1)[
        1
    ].replace("nowhere.test", "H")
    internal.refresh_from_db()
    missing.refresh_from_db()
    assert internal.status == missing.status == "retrying"  # and they retry alike
    detail = Attempt.objects.get(job_run_id=internal.pk).detail
    assert "10.2.3.4" in detail["refused"]  # operators see why
    assert server.requests == []
