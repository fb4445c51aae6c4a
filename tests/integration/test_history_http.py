"""The history API over HTTP: JSON pages, one run, and tenant isolation tested as an attacker.

Tenants come from ``tests.testapp.tenancy.from_header`` (the X-Tenant header)
when PGSCHED["TENANT_RESOLVER"] names it; without a resolver, staff only.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core import signing
from django.test import Client

from django_pgsched.models import Schedule
from django_pgsched.statuses import AttemptStatus, RunStatus
from tests.conftest import at
from tests.integration.history_data import history_run, make

DAY = at("2026-03-10 00:00:00")
URL = "/scheduler/runs/"
RESOLVER = {"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}


@pytest.fixture
def tenants(settings: Any) -> None:
    settings.PGSCHED = {**getattr(settings, "PGSCHED", {}), **RESOLVER}


def get(client: Client, url: str, tenant: str | None = None, /, **params: Any) -> Any:
    """GET ``url`` as ``tenant`` (the X-Tenant header; none if None) with query ``params``."""
    headers = {"X-Tenant": tenant} if tenant is not None else {}
    return client.get(url, params, headers=headers)


@pytest.fixture
def world(db: None) -> dict[str, Any]:
    """acme and globex, each with a schedule and runs on two days; runs without a tenant."""
    Schedule.objects.create(name="acme-report", job="tests.noop", cron="0 * * * *", tenant="acme")
    Schedule.objects.create(name="globex-sync", job="tests.noop", cron="0 * * * *", tenant="globex")
    acme = make(
        [history_run("acme", DAY + timedelta(hours=i), schedule="acme-report") for i in range(30)]
        + [history_run("acme", DAY + timedelta(hours=2), schedule="acme-report", status="failed")]
    )
    globex = make(
        [history_run("globex", DAY + timedelta(hours=i), schedule="globex-sync") for i in range(9)]
        + [history_run("globex", DAY, schedule="globex-sync", status="failed")]
        # a run of globex under a name acme uses too (a renamed schedule, a one-off)
        + [history_run("globex", DAY + timedelta(minutes=5), schedule="acme-report")]
    )
    internal = make([history_run("", DAY + timedelta(minutes=i), schedule=None) for i in range(3)])
    return {"acme": acme, "globex": globex, "internal": internal}


def all_pages(client: Client, tenant: str, **params: Any) -> list[dict[str, Any]]:
    results, cursor = [], None
    while True:
        extra = {"cursor": cursor} if cursor else {}
        response = get(client, URL, tenant, **params, **extra)
        assert response.status_code == 200, response.content
        body = response.json()
        results += body["results"]
        cursor = body["next"]
        if cursor is None:
            return results


# -- the API ------------------------------------------------------------------------------


def test_a_tenant_pages_through_its_runs(client, world, tenants):
    response = get(client, URL, "acme", limit=10)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert "no-store" in response["Cache-Control"]
    body = response.json()
    assert set(body) == {"results", "next"} and len(body["results"]) == 10
    first = body["results"][0]
    assert {"id", "schedule", "tenant", "scheduled_for", "status", "attempts"} <= set(first)
    assert first["scheduled_for"] == "2026-03-11T05:00:00Z" and first["tenant"] == "acme"
    assert "kwargs" not in first and "worker" not in first
    results = all_pages(client, "acme", limit=7)
    assert [r["id"] for r in results] == [
        r.pk for r in sorted(world["acme"], key=lambda r: (r.scheduled_for, r.pk), reverse=True)
    ]


def test_filters_by_status_schedule_and_day(client, world, tenants):
    failed = get(client, URL, "acme", status="failed").json()["results"]
    assert [r["id"] for r in failed] == [world["acme"][-1].pk]
    two = get(client, URL, "acme", status="failed,succeeded", limit=500).json()["results"]
    assert len(two) == 31
    day = get(client, URL, "acme", since="2026-03-10", until="2026-03-11", limit=500).json()
    assert len(day["results"]) == 25 and day["next"] is None
    offset = get(client, URL, "acme", since="2026-03-10T23:00:00+00:00", limit=500).json()
    assert len(offset["results"]) == 7  # 23:00 to 05:00 the next day
    unencoded = client.get(URL + "?since=2026-03-10T23:00:00+00:00", headers={"X-Tenant": "acme"})
    assert len(unencoded.json()["results"]) == 7  # "+" arrives as a space
    mine = get(client, URL, "acme", schedule="acme-report", limit=500).json()["results"]
    assert len(mine) == 31 and {r["tenant"] for r in mine} == {"acme"}


def test_one_run_with_its_attempts(client, world, tenants):
    run = world["acme"][-1]
    response = get(client, f"{URL}{run.pk}/", "acme")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == run.pk and body["status"] == "failed" and body["tenant"] == "acme"
    assert body["attempts"] == [
        {
            "number": 1,
            "status": "failed",
            "started_at": "2026-03-10T02:00:00Z",
            "finished_at": "2026-03-10T02:00:01Z",
            "error": "boom",
            "error_class": "",
        }
    ]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"status": "done"}, "status"),
        ({"status": ""}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-03-10T00:00:00"}, "since"),  # no offset
        ({"until": "2026-13-01"}, "until"),
        ({"since": "2026-03-11", "until": "2026-03-10"}, "until"),
        ({"limit": "0"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "1e3"}, "limit"),
        ({"limit": "100000000"}, "limit"),
        ({"limit": "²"}, "limit"),  # "²".isdigit() is true and int("²") raises: was a 500
        ({"limit": "١٢"}, "limit"),  # digits of another script
        ({"limit": "9" * 5000}, "limit"),  # int() refuses 4,300 digits or more
        ({"schedule": "x" * 201}, "schedule"),
        ({"cursor": "garbage"}, "cursor"),
        ({"page": "2"}, "page"),
        ({"status": ["failed", "succeeded"]}, "status"),  # given twice
    ],
)
def test_a_bad_parameter_answers_400_naming_it(client, world, tenants, params, parameter):
    response = get(client, URL, "acme", **params)
    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith(f"{parameter}: "), response.json()


@pytest.mark.parametrize("run_id", ["²", "١٢", "9" * 5000, "0" * 30 + "1"])
def test_a_run_id_that_is_not_ascii_digits_in_range_is_not_found(client, world, tenants, run_id):
    response = get(client, f"{URL}{run_id}/", "acme")
    assert response.status_code == 404, response.content


@pytest.mark.parametrize("limit", ["²", "١٢", "9" * 5000, "0"])
def test_the_ledger_limit_is_ascii_digits_in_range(client, world, tenants, limit):
    response = get(client, "/scheduler/schedules/acme-report/occurrences/", "acme", limit=limit)
    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith("limit: ")


def test_refusals_and_methods(client, world, tenants):
    response = get(client, URL)  # the resolver raises PermissionDenied
    assert response.status_code == 403 and response.json() == {"error": "no X-Tenant header"}
    response = get(client, URL, "")  # a resolver's "" is no tenant: refused, not the internal runs
    assert response.status_code == 403 and "no tenant" in response.json()["error"]
    assert get(client, URL, "a\x07b").status_code == 403
    response = client.post(URL, headers={"X-Tenant": "acme"})
    assert response.status_code == 405 and "not allowed" in response.json()["error"]
    assert client.delete(f"{URL}{world['acme'][0].pk}/").status_code == 405


def test_without_a_resolver_only_staff_with_the_view_permission(
    client, world, django_user_model, settings
):
    assert get(client, URL).status_code == 403  # anonymous
    user = django_user_model.objects.create_user("op", password="x", is_staff=False)
    user.user_permissions.set(Permission.objects.filter(codename="view_jobrun"))
    client.force_login(user)
    assert get(client, URL).status_code == 403  # not staff
    user.is_staff = True
    user.user_permissions.clear()
    user.save()
    client.force_login(user)
    assert get(client, URL).status_code == 403  # staff without the permission
    user.user_permissions.set(Permission.objects.filter(codename="view_jobrun"))
    client.force_login(django_user_model.objects.get(pk=user.pk))
    everyone = get(client, URL, limit=500).json()["results"]
    assert {r["tenant"] for r in everyone} == {"acme", "globex", ""} and len(everyone) == 45
    narrowed = client.get(URL, {"tenant": "globex", "limit": 500}).json()["results"]
    assert {r["tenant"] for r in narrowed} == {"globex"} and len(narrowed) == 11
    internal = client.get(URL, {"tenant": ""}).json()["results"]
    assert {r["tenant"] for r in internal} == {""} and len(internal) == 3
    assert get(client, f"{URL}{world['globex'][0].pk}/").json()["tenant"] == "globex"
    # a staff cursor (every tenant) is no tenant's cursor
    staff_cursor = get(client, URL, limit=2).json()["next"]
    settings.PGSCHED = RESOLVER
    response = get(client, URL, "acme", cursor=staff_cursor, limit=2)
    assert response.status_code == 400 and response.json()["error"].startswith("cursor: ")


def test_the_openapi_description_matches_the_statuses(client, db):
    served = client.get("/scheduler/openapi.json")
    assert served.status_code == 200
    doc = served.json()
    packaged = json.loads(
        files("django_pgsched.history").joinpath("openapi.json").read_text(encoding="utf-8")
    )
    # served with where the project mounted it (tests/urls.py: "scheduler/")
    assert doc.pop("servers") == [{"url": "/scheduler"}]
    assert doc == packaged and doc["openapi"].startswith("3.1")
    # every URL the package mounts is described
    import re

    from django_pgsched import urls

    mounted = {"/" + re.sub(r"<(?:\w+:)?(\w+)>", "{\\1}", str(p.pattern)) for p in urls.urlpatterns}
    assert {m.replace("{run_id}", "{id}") for m in mounted} == set(doc["paths"])
    schemas = doc["components"]["schemas"]
    assert schemas["RunStatus"]["enum"] == list(RunStatus.values)
    (status,) = [p for p in doc["paths"]["/runs/"]["get"]["parameters"] if p["name"] == "status"]
    alternatives = "|".join(RunStatus.values)
    assert status["schema"]["pattern"] == f"^(?:{alternatives})(?:,(?:{alternatives}))*$"
    assert sorted(schemas["Attempt"]["properties"]["status"]["enum"]) == sorted(
        AttemptStatus.values
    )


# -- isolation, as an attacker would try it -----------------------------------------------


def test_another_tenants_run_answers_exactly_as_a_missing_one(client, world, tenants):
    theirs = world["globex"][0].pk
    internal = world["internal"][0].pk
    missing = get(client, f"{URL}999999999/", "acme")
    assert missing.status_code == 404
    for run_id in (theirs, internal, world["globex"][-1].pk):
        response = get(client, f"{URL}{run_id}/", "acme")
        assert response.status_code == 404 and response.content == missing.content
        assert dict(response.items()).keys() == dict(missing.items()).keys()
    for odd in ("-1", "0", "1.0", "9" * 30, "%20" + str(theirs), f"{theirs}%00", "0x10"):
        response = client.get(f"{URL}{odd}/", headers={"X-Tenant": "acme"})
        assert response.status_code == 404 and response.content == missing.content, odd
    # a tenant named like the other, or with its name in another case or padded
    for lookalike in ("Globex", "globex ", " globex", "globe", "globex%"):
        assert get(client, f"{URL}{theirs}/", lookalike).status_code == 404
    # query parameters on the run's URL do not change whose it is
    response = client.get(f"{URL}{theirs}/?tenant=globex", headers={"X-Tenant": "acme"})
    assert response.status_code == 400 and "globex" not in response.content.decode()


def test_filters_that_should_not_apply_are_refused_or_stay_within_the_tenant(
    client, world, tenants
):
    for params in ({"tenant": "globex"}, {"tenant": ""}, {"tenant_id": "globex"}, {"all": "1"}):
        response = get(client, URL, "acme", **params)
        assert response.status_code == 400, params
        assert "globex" not in response.content.decode()
    # the other tenant's schedule name: nothing of theirs, the same as a name nobody has
    theirs = get(client, URL, "acme", schedule="globex-sync").json()
    nobody = get(client, URL, "acme", schedule="no-such-schedule").json()
    assert theirs == nobody == {"results": [], "next": None}
    # a name both use: only acme's runs under it
    shared = get(client, URL, "acme", schedule="acme-report", limit=500).json()["results"]
    assert {r["tenant"] for r in shared} == {"acme"}
    assert world["globex"][-1].pk not in {r["id"] for r in shared}
    # a status only the other tenant has on a day, a range only the other has runs in
    assert get(client, URL, "acme", status="failed", until="2026-03-10T01:00:00Z").json() == {
        "results": [],
        "next": None,
    }
    # SQL-ish and wildcard values are plain values
    for schedule in ("%", "*", "' OR '1'='1", "acme-report' --"):
        assert get(client, URL, "acme", schedule=schedule).json()["results"] == []


def test_cursors_from_another_tenant_or_forged_are_refused(client, world, tenants):
    acme_cursor = get(client, URL, "acme", limit=2).json()["next"]
    globex_cursor = get(client, URL, "globex", limit=2).json()["next"]
    assert acme_cursor and globex_cursor
    # replayed by the other tenant, with the same or other filters
    for tenant, cursor, params in (
        ("globex", acme_cursor, {}),
        ("acme", globex_cursor, {}),
        ("acme", globex_cursor, {"schedule": "globex-sync"}),
        ("acme", acme_cursor, {"status": "succeeded"}),  # its own, other filters
    ):
        response = get(client, URL, tenant, cursor=cursor, limit=2, **params)
        assert response.status_code == 400 and response.json()["error"].startswith("cursor: ")
    # forged: globex's cursor rewritten to carry acme's query digest, without our key
    payload = signing.loads(globex_cursor, salt="django_pgsched.history.cursor")
    own = signing.loads(acme_cursor, salt="django_pgsched.history.cursor")
    forged = [
        signing.dumps(
            {**payload, "q": own["q"]}, key="guess", salt="django_pgsched.history.cursor"
        ),
        signing.dumps({**payload, "q": own["q"]}),  # our key, another salt
        acme_cursor.replace(acme_cursor.split(":")[0], globex_cursor.split(":")[0], 1),
        acme_cursor + "x",
    ]
    for cursor in forged:
        response = get(client, URL, "acme", cursor=cursor, limit=2)
        assert response.status_code == 400 and response.json()["error"].startswith("cursor: ")
    # even a validly signed cursor pointing into the other tenant's rows reads acme's only
    crafted = signing.dumps(
        {**own, "id": world["globex"][-1].pk + 1, "at": "2027-01-01T00:00:00+00:00"},
        salt="django_pgsched.history.cursor",
        compress=True,
    )
    results = get(client, URL, "acme", cursor=crafted, limit=500).json()["results"]
    assert {r["tenant"] for r in results} == {"acme"} and len(results) == 31


def test_no_answer_counts_or_reveals_another_tenants_runs(client, world, tenants):
    """Every page acme can reach holds acme's runs only, and nothing says how many others have."""
    reached: list[dict[str, Any]] = []
    for params in (
        {},
        {"status": "failed"},
        {"schedule": "acme-report"},
        {"since": "2026-03-10", "until": "2026-03-11"},
        {"limit": "1"},
    ):
        reached += all_pages(client, "acme", **params)
    assert {r["tenant"] for r in reached} == {"acme"}
    others = {r.pk for r in world["globex"] + world["internal"]}
    assert not others & {r["id"] for r in reached}
    page = get(client, URL, "acme").json()
    assert set(page) == {"results", "next"}  # no count, no total
    assert "globex" not in get(client, URL, "acme", limit=500).content.decode()


def test_a_resolver_that_cannot_be_used_is_reported(settings):
    from django.core.exceptions import ImproperlyConfigured

    from django_pgsched.conf import build_settings
    from django_pgsched.ops.checks import check_settings

    for bad in (5, "", "nodots"):
        with pytest.raises(ImproperlyConfigured, match="TENANT_RESOLVER"):
            build_settings({"TENANT_RESOLVER": bad})
    settings.PGSCHED = {"TENANT_RESOLVER": "tests.testapp.tenancy.no_such_function"}
    errors = [m for m in check_settings() if "TENANT_RESOLVER" in m.msg]
    assert [m.id for m in errors] == ["pgsched.E003"], errors
    settings.PGSCHED = RESOLVER
    assert not [m for m in check_settings() if "TENANT_RESOLVER" in m.msg]


def test_a_schedule_moved_to_another_tenant_shows_none_of_the_old_tenants_runs(client, db, tenants):
    """Runs keep the tenant they were made for: the new owner sees neither them nor their ids."""
    from django_pgsched.engine.planner import Planner

    start = at("2026-03-01 12:00:00")
    s = Schedule.objects.create(
        name="moved", job="tests.noop", cron="* * * * * *", tenant="globex", next_fire_at=start
    )
    Planner().run_once(now=start + timedelta(seconds=1))  # globex's runs
    theirs = list(s.runs.values_list("pk", flat=True))
    assert theirs
    Schedule.objects.filter(pk=s.pk).update(tenant="acme")
    params = {"since": "2026-03-01T11:59:59Z", "until": "2026-03-01T12:00:10Z"}
    response = get(client, "/scheduler/schedules/moved/occurrences/", "acme", **params)
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert results and not {r["run"] for r in results} & set(theirs)
    assert {r["status"] for r in results if r["at"] <= "2026-03-01T12:00:06Z"} == {None}
    # nor by the run list, the run's page, or the schedule's name as a filter
    assert get(client, URL, "acme", schedule="moved").json()["results"] == []
    assert get(client, f"{URL}{theirs[0]}/", "acme").status_code == 404
    # and the old owner no longer reads the schedule's timeline
    moved = get(client, "/scheduler/schedules/moved/occurrences/", "globex", **params)
    assert moved.status_code == 404
    assert len(get(client, URL, "globex", schedule="moved").json()["results"]) == len(theirs)


def test_a_timeline_is_of_the_tenants_own_schedule_of_that_name(client, admin_client, db, settings):
    """Names are unique within a tenant: each reads its own; staff name the tenant."""
    settings.PGSCHED = {}  # no resolver: staff only
    for tenant, cron in [("acme", "0 * * * *"), ("globex", "30 * * * *"), ("", "15 * * * *")]:
        Schedule.objects.create(name="twin", job="tests.noop", cron=cron, tenant=tenant)
    # created before the times asked about (a time before its creation is not listed)
    Schedule.objects.filter(name="twin").update(created_at=datetime(2026, 1, 1, tzinfo=UTC))
    url = "/scheduler/schedules/twin/occurrences/"
    params = {"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T02:00:00Z"}

    def minutes(response: Any) -> set[str]:
        assert response.status_code == 200, response.content
        return {r["at"][14:16] for r in response.json()["results"]}

    assert minutes(admin_client.get(url, params)) == {"15"}
    assert minutes(admin_client.get(url, {**params, "tenant": "globex"})) == {"30"}
    assert admin_client.get(url, {**params, "tenant": "newco"}).status_code == 404
    settings.PGSCHED = {"TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}
    assert minutes(get(client, url, "acme", **params)) == {"00"}
    # a tenant cannot name another tenant
    refused = get(client, url, "acme", tenant="globex", **params)
    assert refused.status_code == 400 and refused.json()["error"].startswith("tenant: ")
