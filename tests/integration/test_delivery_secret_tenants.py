"""Signing secrets limited to tenants: another tenant's run can never sign with one.

Before, any tenant's ``pgsched.http`` schedule could name any secret and get a valid
Standard Webhooks signature over a body it chose, and the "no such secret" error listed
every secret's name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import standardwebhooks
from django.core.exceptions import ImproperlyConfigured, ValidationError

from django_pgsched import enqueue
from django_pgsched.delivery.settings import build_http_settings
from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun, Schedule
from tests.delivery_helpers import OLD_SECRET, SECRET, attempts, delivering
from tests.webhook_server import WebhookServer

SECRETS = {
    "acme-key": {"key": SECRET, "tenants": ["acme"]},
    "shared": OLD_SECRET,
}


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    s = WebhookServer()
    yield s
    s.stop()


def test_settings_read_both_forms_and_refuse_a_bad_one():
    built = build_http_settings({"SIGNING_SECRETS": SECRETS})
    assert built.secret_for("acme-key", "acme") == built.SIGNING_SECRETS["acme-key"]
    assert built.secret_for("acme-key", "globex") is None
    assert built.secret_for("acme-key", "") is None  # no tenant is not every tenant
    assert built.secret_for("shared", "globex") == built.SIGNING_SECRETS["shared"]
    assert built.secret_for("missing", "acme") is None
    for bad, match in [
        ({"key": SECRET}, "tenants"),
        ({"key": SECRET, "tenants": "acme"}, "list of tenant keys"),
        ({"key": SECRET, "tenants": ["acme"], "keys": 1}, "unknown 'keys'"),
        ({"key": "nope", "tenants": ["acme"]}, "whsec_"),
    ]:
        with pytest.raises(ImproperlyConfigured, match=match) as info:
            build_http_settings({"SIGNING_SECRETS": {"k": bad}})
        assert SECRET not in str(info.value)


def test_another_tenant_naming_the_secret_is_refused_at_enqueue_and_save(db, server):
    with delivering(server, SIGNING_SECRETS=SECRETS):
        with pytest.raises(ValidationError) as refused:
            enqueue(
                "pgsched.http",
                kwargs={"url": server.url("/ok"), "signing_secret": "acme-key"},
                tenant="globex",
            )
        with pytest.raises(ValidationError) as unknown:
            enqueue(
                "pgsched.http",
                kwargs={"url": server.url("/ok"), "signing_secret": "nonesuch"},
                tenant="globex",
            )
        schedule = Schedule(
            name="theirs",
            job="pgsched.http",
            cron="0 * * * *",
            tenant="globex",
            kwargs={"url": server.url("/ok"), "signing_secret": "acme-key"},
        )
        with pytest.raises(ValidationError, match="signing_secret"):
            schedule.full_clean()
        # the owner and a secret for any tenant are fine
        enqueue(
            "pgsched.http",
            kwargs={"url": server.url("/ok"), "signing_secret": "acme-key"},
            tenant="acme",
        )
        enqueue(
            "pgsched.http",
            kwargs={"url": server.url("/ok"), "signing_secret": "shared"},
            tenant="globex",
        )
    message = " ".join(refused.value.messages)
    # the same answer as for a name that does not exist, and no secret's name listed
    assert message.replace("acme-key", "X") == " ".join(unknown.value.messages).replace(
        "nonesuch", "X"
    )
    assert "shared" not in message and "acme-key" in message  # only the name it gave


def test_a_run_moved_to_another_tenant_is_refused_at_the_attempt_and_sends_nothing(db, server):
    with delivering(server, SIGNING_SECRETS=SECRETS):
        run = enqueue(
            "pgsched.http",
            kwargs={"url": server.url("/ok"), "signing_secret": "acme-key", "body": {"x": 1}},
            tenant="acme",
        )
        JobRun.objects.filter(pk=run.pk).update(tenant="globex")  # past every save check
        Executor(concurrency=1, inline=True).run_once()
        mine = enqueue(
            "pgsched.http",
            kwargs={"url": server.url("/ok"), "signing_secret": "acme-key", "body": {"x": 2}},
            tenant="acme",
        )
        Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    mine.refresh_from_db()
    assert run.status == "failed", run.status
    (attempt,) = attempts(run)
    assert "signing_secret" in attempt.error and "shared" not in attempt.error
    assert mine.status == "succeeded"
    (request,) = server.requests  # only the owner's run was sent
    assert standardwebhooks.Webhook(SECRET).verify(request.body, request.headers) == {"x": 2}
