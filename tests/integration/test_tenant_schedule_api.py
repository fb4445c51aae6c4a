"""The tenant schedule API, tried as its tenant and as a hostile one.

Tenants come from ``tests.testapp.tenancy.from_header`` (the X-Tenant header).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from django_pgsched.models import JobRun, Schedule, Tenant

URL = "/scheduler/schedules/"


@pytest.fixture
def api(settings: Any, db: None) -> None:
    settings.PGSCHED = {"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}
    Tenant.objects.create(key="acme", allowed_jobs=["tests.noop"], max_schedules=3)
    Tenant.objects.create(key="globex", allowed_jobs=["tests.noop"])


def call(client: Client, method: str, url: str, tenant: str, body: Any = None) -> Any:
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method)(
        url, data=data, content_type="application/json", headers={"X-Tenant": tenant}
    )


def test_a_tenant_manages_its_schedules(client, api):
    created = call(client, "post", URL, "acme", {
        "name": "report", "job": "tests.noop", "cron": "0 * * * *",
        "kwargs": {"headers": {"Authorization": "Bearer s3cret"}, "n": 1},
        "timezone": "Europe/Paris", "misfire_policy": "skip", "jitter": 5,
    })  # fmt: skip
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "report" and body["timezone"] == "Europe/Paris"
    assert body["jitter"] == 5 and body["status"] == "active" and body["next_fire_at"]
    assert body["kwargs"]["headers"] == {"Authorization": "[masked]"}  # never sent back
    assert Schedule.objects.get(name="report").tenant == "acme"
    listed = call(client, "get", URL, "acme").json()
    assert [s["name"] for s in listed["results"]] == ["report"] and listed["next"] is None
    patched = call(client, "patch", f"{URL}report/", "acme", {"interval": 3600, "timezone": "UTC"})
    assert patched.status_code == 200, patched.content
    assert patched.json()["interval"] == 3600 and patched.json()["cron"] is None
    paused = call(client, "post", f"{URL}report/pause/", "acme", {"reason": "quarter close"})
    assert paused.json()["status"] == "paused" and paused.json()["pause_reason"] == "quarter close"
    resumed = call(client, "post", f"{URL}report/resume/", "acme")
    assert resumed.json()["status"] == "active" and resumed.json()["pause_reason"] == ""
    triggered = call(client, "post", f"{URL}report/trigger/", "acme")
    assert triggered.status_code == 201
    run = JobRun.objects.get(pk=triggered.json()["run"])
    assert run.tenant == "acme" and run.schedule_name == "report"
    assert call(client, "delete", f"{URL}report/", "acme").status_code == 204
    assert not Schedule.objects.filter(name="report").exists()


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"name": "x", "job": "tests.noop", "cron": "not cron"}, "cron", 400),
        ({"name": "x", "job": "tests.noop", "cron": "0 * * * *", "colour": "red"}, "colour", 400),
        ({"name": "x", "job": "tests.noop", "interval": "an hour"}, "interval", 400),
        ({"name": "x", "job": "tests.noop", "cron": "0 * * * *", "timezone": "Mars/Olympus"},
         "timezone", 400),
        ({"name": "x", "job": "tests.fail", "cron": "0 * * * *"}, "job", 403),
        ({"job": "tests.noop", "cron": "0 * * * *"}, "name", 400),
        ({"name": "x", "job": "tests.noop", "cron": "0 * * * *", "catch_up_limit": True},
         "catch_up_limit", 400),
    ],
)  # fmt: skip
def test_a_bad_field_is_named(client, api, body, field, status):
    response = call(client, "post", URL, "acme", body)
    assert response.status_code == status, response.content
    assert response.json()["field"] == field, response.json()
    assert not Schedule.objects.filter(name="x").exists()


def test_a_body_that_is_not_an_object_is_a_400(client, api):
    response = client.post(URL, data=b"[1, 2", content_type="application/json",
                           headers={"X-Tenant": "acme"})  # fmt: skip
    assert response.status_code == 400 and response.json()["field"] == "body"


def test_quotas_answer_403_naming_the_quota_and_a_taken_name_409(client, api):
    for i in range(3):
        made = call(client, "post", URL, "acme",
                    {"name": f"s{i}", "job": "tests.noop", "cron": "0 * * * *"})  # fmt: skip
        assert made.status_code == 201, made.content
    fourth = call(client, "post", URL, "acme",
                  {"name": "s3", "job": "tests.noop", "cron": "0 * * * *"})  # fmt: skip
    assert fourth.status_code == 403 and "max_schedules" in fourth.json()["error"]
    again = call(client, "post", URL, "acme",
                 {"name": "s0", "job": "tests.noop", "cron": "5 * * * *"})  # fmt: skip
    assert again.status_code == 409 and again.json()["field"] == "name"
    assert "this tenant" in again.json()["error"]


def test_names_are_unique_within_a_tenant_not_across_tenants(client, api):
    body = {"name": "report", "job": "tests.noop", "cron": "0 * * * *"}
    assert call(client, "post", URL, "acme", body).status_code == 201
    # another tenant's schedule of that name neither blocks nor reveals it
    theirs = call(client, "post", URL, "globex", {**body, "cron": "30 * * * *"})
    assert theirs.status_code == 201, theirs.content
    assert call(client, "get", f"{URL}report/", "acme").json()["cron"] == "0 * * * *"
    assert call(client, "get", f"{URL}report/", "globex").json()["cron"] == "30 * * * *"
    assert call(client, "post", f"{URL}report/pause/", "globex", {"reason": "x"}).status_code == 200
    assert Schedule.objects.get(tenant="acme", name="report").status == "active"
    assert Schedule.objects.get(tenant="globex", name="report").status == "paused"
    triggered = call(client, "post", f"{URL}report/trigger/", "acme")
    assert JobRun.objects.get(pk=triggered.json()["run"]).tenant == "acme"
    assert call(client, "delete", f"{URL}report/", "globex").status_code == 204
    assert Schedule.objects.filter(name="report").get().tenant == "acme"


def test_a_tenant_without_a_record_may_schedule_no_job_here(client, api):
    response = call(client, "post", URL, "newco",
                    {"name": "n", "job": "tests.noop", "cron": "0 * * * *"})  # fmt: skip
    assert response.status_code == 403 and "allowed_jobs" in response.json()["error"]


def test_another_tenants_schedule_is_not_found_by_any_route(client, api):
    assert call(client, "post", URL, "acme",
                {"name": "secret-report", "job": "tests.noop", "cron": "0 * * * *"}
                ).status_code == 201  # fmt: skip
    for method, url, body in [
        ("get", f"{URL}secret-report/", None),
        ("patch", f"{URL}secret-report/", {"cron": "* * * * *"}),
        ("delete", f"{URL}secret-report/", None),
        ("post", f"{URL}secret-report/pause/", {"reason": "mine now"}),
        ("post", f"{URL}secret-report/resume/", None),
        ("post", f"{URL}secret-report/trigger/", None),
    ]:
        response = call(client, method, url, "globex", body)
        assert response.status_code == 404, (method, url, response.content)
    assert call(client, "get", URL, "globex").json()["results"] == []
    assert call(client, "get", URL + "?after=a", "globex").json()["results"] == []
    s = Schedule.objects.get(name="secret-report")
    assert s.status == "active" and s.cron == "0 * * * *"
    assert not JobRun.objects.filter(schedule_name="secret-report").exists()


def test_staff_without_a_resolver_and_wrong_methods_are_refused(client, admin_client, db):
    assert admin_client.get(URL).status_code == 403
    assert call(client, "put", URL, "acme", {}).status_code in (403, 405)


def test_the_openapi_document_describes_the_schedule_api(client, api):
    doc = client.get("/scheduler/openapi.json").json()
    assert {
        "/schedules/",
        "/schedules/{name}/",
        "/schedules/{name}/pause/",
        "/schedules/{name}/resume/",
        "/schedules/{name}/trigger/",
    } <= set(doc["paths"])
    schema = doc["components"]["schemas"]["Schedule"]
    made = call(client, "post", URL, "acme",
                {"name": "doc", "job": "tests.noop", "cron": "0 * * * *"}).json()  # fmt: skip
    assert set(made) == set(schema["properties"]) == set(schema["required"])
    writable = set(doc["components"]["schemas"]["ScheduleInput"]["properties"])
    from django_pgsched.history.schedule_views import WRITABLE

    assert writable == set(WRITABLE)
