"""The admin's side of HTTP delivery: the request form, the evidence, the circuit breakers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from django_pgsched.context import RunContext
from django_pgsched.delivery import breaker
from django_pgsched.models import Attempt, Breaker, JobRun, Schedule
from tests.delivery_helpers import delivering
from tests.integration.test_admin import schedule_form, staff

ADD = reverse("admin:pgsched_schedule_add")
BREAKERS = reverse("admin:pgsched_breaker_changelist")


def http_form(**fields):
    data = schedule_form(job="pgsched.http", cron="0 0 6 * * *", kwargs="")
    data.update(
        {
            "http_url": "https://hooks.example.com/in",
            "http_method": "POST",
            "http_headers": "X-Tenant: acme\nAuthorization: Bearer t0k",
            "http_body": '{"type": "digest.ready"}',
            "http_body_is_json": "on",
            "http_timeout": "",
            "http_signing_secret": "main",
            "http_retry_statuses": ["409"],
        }
    )
    data.update(fields)
    return data


def test_an_http_schedule_is_made_from_fields_not_json(admin_client):
    with delivering():
        page = admin_client.get(ADD + "?job=pgsched.http").content.decode()
        assert 'name="http_url"' in page and 'name="kwargs"' not in page
        response = admin_client.post(ADD, http_form(name="digest"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    s = Schedule.objects.get(name="digest")
    assert s.kwargs == {
        "url": "https://hooks.example.com/in",
        "headers": {"X-Tenant": "acme", "Authorization": "Bearer t0k"},
        "body": {"type": "digest.ready"},
        "signing_secret": "main",
        "retry_statuses": [409],
    }
    with delivering():
        page = admin_client.get(reverse("admin:pgsched_schedule_change", args=[s.pk]))
    content = page.content.decode()
    assert 'value="https://hooks.example.com/in"' in content and 'name="kwargs"' not in content


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.0.0.5/hook", "10.0.0.5 is not a public address (private)"),
        ("http://169.254.169.254/", "cloud metadata service"),
        ("https://example.com:5432/", "port 5432 is not allowed"),
        ("ftp://example.com/", "scheme must be"),
        ("https://user:pw@example.com/", "credentials in URLs are not allowed"),
        ("http://localhost:8080/", "is not allowed"),
        ("http://2130706433/", "non-canonical"),
    ],
)
def test_the_form_refuses_a_url_up_front(admin_client, url, message):
    with delivering():
        response = admin_client.post(ADD, http_form(name="bad", http_url=url))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in e for e in errors["http_url"]), errors
    assert not Schedule.objects.filter(name="bad").exists()


def test_the_form_names_the_field_of_each_problem(admin_client):
    with delivering():
        response = admin_client.post(
            ADD,
            http_form(
                name="bad",
                http_headers="Host: evil\nno colon here",
                http_body="{not json",
                http_signing_secret="",
                timeout="10",
                http_timeout="30",
            ),
        )
    errors = response.context["adminform"].form.errors
    assert "not 'Name: value'" in errors["http_headers"][0]
    assert "not valid JSON" in errors["http_body"][0]


def test_the_timeout_must_fit_in_the_schedules(admin_client):
    with delivering():
        response = admin_client.post(ADD, http_form(name="t", timeout="10", http_timeout="30"))
    errors = response.context["adminform"].form.errors
    assert "longer than the run's timeout (10s)" in errors["http_timeout"][0]


def test_other_jobs_keep_their_kwargs_box(admin_client, make_schedule):
    s = make_schedule(name="plain", kwargs={"x": 1})
    content = admin_client.get(reverse("admin:pgsched_schedule_change", args=[s.pk])).content
    assert b'name="kwargs"' in content and b'name="http_url"' not in content


def _open_breaker() -> Breaker:
    run = JobRun.objects.create(
        scheduled_for=datetime.now(UTC).replace(microsecond=0),
        idempotency_key="k-open",
        job="pgsched.http",
        kwargs={"url": "https://hooks.example.com/"},
        queue="default",
        fire_after=datetime.now(UTC),
        max_attempts=3,
        timeout=timedelta(seconds=60),
    )
    context = RunContext(
        job_run_id=run.pk,
        job="pgsched.http",
        schedule_name=None,
        scheduled_for=run.scheduled_for,
        attempt=1,
        max_attempts=3,
        idempotency_key="k",
        worker="w",
    )
    for _ in range(5):
        breaker.record_failure(context, "HTTP 502 Bad Gateway", url="https://hooks.example.com/")
    return Breaker.objects.get()


def test_breakers_are_listed_with_state_since_and_last_error(admin_client, db):
    b = _open_breaker()
    content = admin_client.get(BREAKERS).content.decode()
    assert "https://hooks.example.com:443" in content and "open" in content
    page = admin_client.get(reverse("admin:pgsched_breaker_change", args=[b.pk])).content
    assert b"HTTP 502 Bad Gateway" in page and b"Reset" in page


def test_a_breaker_without_a_last_error_has_a_page(admin_client, db):
    """format_html() with no arguments raises TypeError on Django 6.0 and later."""
    b = _open_breaker()
    Breaker.objects.filter(pk=b.pk).update(last_error="")
    assert admin_client.get(BREAKERS).status_code == 200
    response = admin_client.get(reverse("admin:pgsched_breaker_change", args=[b.pk]))
    assert response.status_code == 200 and "—" in response.content.decode()


def test_the_reset_needs_its_own_permission(client, django_user_model, db):
    b = _open_breaker()
    reset = reverse("admin:pgsched_breaker_reset", args=[b.pk])
    viewer = staff(client, django_user_model, "view_breaker")
    page = viewer.get(reverse("admin:pgsched_breaker_change", args=[b.pk])).content
    assert b"pgsched-tool-button" not in page  # no button offered
    assert viewer.post(reset).status_code == 403
    b.refresh_from_db()
    assert b.state == "open"
    viewer.logout()
    operator = django_user_model.objects.get(username="operator")
    from django.contrib.auth.models import Permission

    operator.user_permissions.add(Permission.objects.get(codename="reset_breaker"))
    client.force_login(operator)
    assert client.post(reset).status_code == 302
    b.refresh_from_db()
    assert b.state == "closed" and b.failures == 0


def test_the_evidence_is_shown_escaped(admin_client, db):
    run = JobRun.objects.create(
        scheduled_for=datetime.now(UTC).replace(microsecond=0),
        idempotency_key="k-ev",
        job="pgsched.http",
        kwargs={"url": "https://hooks.example.com/"},
        queue="default",
        fire_after=datetime.now(UTC),
        max_attempts=3,
        timeout=timedelta(seconds=60),
        status="failed",
        finished_at=datetime.now(UTC),
        attempts=1,
    )
    Attempt.objects.create(
        job_run=run,
        number=1,
        status="failed",
        finished_at=datetime.now(UTC),
        error="HTTP 500",
        detail={
            "kind": "http",
            "status": 500,
            "reason": "Internal Server Error",
            "address": "93.184.216.34:443",
            "timings_ms": {"connect": 12.5, "first_byte": 40.1, "total": 41.0},
            "headers": {"content-type": "text/html"},
            "body_excerpt": "<script>alert(1)</script>",
            "body_truncated": True,
            "error": "",
            "message": "",
        },
    )
    content = admin_client.get(reverse("admin:pgsched_jobrun_change", args=[run.pk])).content
    text = content.decode()
    assert "93.184.216.34:443" in text and "connect 12 ms" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>alert(1)" not in text


# -- the other entrances: settings, the ORM, enqueue() -------------------------------------


def test_a_declared_http_schedule_is_checked_like_any_other(db, settings):
    from django.core.exceptions import ValidationError

    from django_pgsched import enqueue
    from django_pgsched.conf import get_settings
    from django_pgsched.ops import checks
    from django_pgsched.ops.sync import build

    good = {"job": "pgsched.http", "cron": "0 0 6 * * *", "kwargs": {"url": "https://x.example/"}}
    assert build("digest", good).kwargs == {"url": "https://x.example/"}
    bad = {**good, "kwargs": {"url": "http://192.168.1.10/"}}
    with pytest.raises(ValidationError, match=r"192\.168\.1\.10 is not a public address"):
        build("digest", bad)
    settings.PGSCHED = {"SCHEDULES": {"digest": bad}}
    errors = [m for m in checks.check_settings(None) if m.id == "pgsched.E005"]
    assert errors and "192.168.1.10" in errors[0].msg
    settings.PGSCHED = {}
    assert get_settings().SCHEDULES == {}
    s = Schedule(name="orm", job="pgsched.http", cron="0 * * * *", kwargs={"url": "gopher://x/"})
    with pytest.raises(ValidationError, match="scheme must be"):
        s.full_clean()
    with pytest.raises(ValidationError, match="credentials"):
        enqueue("pgsched.http", kwargs={"url": "https://u:p@x.example/"})
    with pytest.raises(ValidationError, match="longer than the run's timeout"):
        enqueue("pgsched.http", kwargs={"url": "https://x.example/", "timeout": 90})
