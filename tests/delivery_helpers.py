"""Shared pieces of the delivery tests: settings for a test server, running runs inline."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.test import override_settings

from django_pgsched import enqueue
from django_pgsched.delivery import client
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt, JobRun
from tests import resolver
from tests.webhook_server import WebhookServer

SECRET_KEY = bytes(range(32))
SECRET = "whsec_" + base64.b64encode(SECRET_KEY).decode()
OLD_SECRET_KEY = bytes(range(100, 132))
OLD_SECRET = "whsec_" + base64.b64encode(OLD_SECRET_KEY).decode()


def http_settings(server: WebhookServer | None = None, **http: Any) -> dict[str, Any]:
    """PGSCHED for a test: the test server's network and port allowed, the test resolver."""
    options: dict[str, Any] = {
        "RESOLVER": "tests.resolver.resolve",
        "SIGNING_SECRETS": {"main": SECRET, "rotating": [SECRET, OLD_SECRET]},
    }
    if server is not None:
        options["ALLOW_NETWORKS"] = ["127.0.0.1/32"]
        options["ALLOW_PORTS"] = [80, 443, server.port]
    options.update(http)
    return {"HTTP": options, "RETRY_BACKOFF_BASE": 0.05, "RETRY_BACKOFF_MAX": 0.2}


@contextmanager
def delivering(server: WebhookServer | None = None, **http: Any) -> Iterator[None]:
    resolver.reset()
    if server is not None and server.tls:
        client.set_tls_context(server.client_context())
    try:
        with override_settings(PGSCHED=http_settings(server, **http)):
            yield
    finally:
        client.set_tls_context(None)


def deliver(url: str, *, run_pass: bool = True, **kwargs: Any) -> JobRun:
    """Enqueue a pgsched.http run to ``url`` and (by default) run one inline pass."""
    options = {k: kwargs.pop(k) for k in ("max_attempts", "idempotency_key") if k in kwargs}
    if "run_timeout" in kwargs:
        options["timeout"] = kwargs.pop("run_timeout")
    run = enqueue("pgsched.http", kwargs={"url": url, **kwargs}, **options)
    if run_pass:
        Executor(concurrency=1, inline=True).run_once()
        run.refresh_from_db()
    return run


def attempts(run: JobRun) -> list[Attempt]:
    return list(Attempt.objects.filter(job_run=run).order_by("number"))
