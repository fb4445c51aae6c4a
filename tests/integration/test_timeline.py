"""A schedule's timeline: what became of each occurrence (library, JSON API, admin)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_pgsched.engine.executor import Executor
from django_pgsched.engine.guard import Guard
from django_pgsched.engine.planner import Planner
from django_pgsched.ledger.timeline import occurrences
from django_pgsched.models import Schedule
from tests.conftest import at, seconds

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")
URL = "/scheduler/schedules/{}/occurrences/"


@pytest.fixture
def story(make_schedule) -> Schedule:
    """Every second from T: +0 ran, +1 and +2 overlapped, +3 .. +4 planned; an outage before."""
    s = make_schedule(overlap="skip", next_fire_at=T - seconds(120), misfire_policy="skip",
                      tenant="acme")  # fmt: skip
    Planner().run_once(now=T - seconds(1))  # T-120 .. T-62 missed (grace 60 s); the rest planned
    with connection.cursor() as cursor:  # the on-time ones ran (succeeded), T-61 .. T-1
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'succeeded', finished_at = scheduled_for,"
            " started_at = scheduled_for, attempts = 1"
            " WHERE schedule_id = %s AND scheduled_for < %s",
            [s.pk, T],
        )
    Executor(concurrency=2, worker_id="w").run_once(now=T)  # T+0 starts (and keeps running)
    Guard().run_once(now=T + seconds(2.5))  # T+1, T+2 are skipped: T+0 still runs
    return s


def test_each_occurrence_is_a_run_a_ledger_point_or_not_yet(story):
    found = occurrences(story, since=T - seconds(63), until=T + seconds(6), limit=100)
    outcome = {int((o.at - T).total_seconds()): (o.outcome, o.status or o.reason) for o in found}
    assert [o.at for o in found] == sorted((o.at for o in found), reverse=True)  # newest first
    assert outcome[-63] == outcome[-62] == ("skipped", "misfire_skip")
    assert outcome[-61] == ("ran", "succeeded")
    assert outcome[0] == ("ran", "running")
    assert outcome[1] == outcome[2] == ("skipped", "overlap")
    assert outcome[3] == ("ran", "pending")  # planned ahead (the lookahead)
    assert outcome[5] == ("overdue", None)  # after next_fire_at: not planned yet
    assert len(occurrences(story, until=T, limit=10)) == 10


def test_the_times_before_a_schedule_was_created_are_not_its_occurrences(make_schedule):
    s = make_schedule()  # every second, created now (the database's clock)
    before = s.created_at
    assert occurrences(s, since=before - seconds(10), until=before) == []
    # created an hour earlier: the same seconds, neither run nor in the ledger, were its
    # occurrences and their history is gone (retention)
    Schedule.objects.filter(pk=s.pk).update(created_at=before - seconds(3600))
    s.refresh_from_db()
    found = occurrences(s, since=before - seconds(10), until=before)
    assert len(found) == 10 and {o.outcome for o in found} == {"unknown"}


def test_a_paused_schedule_shows_what_it_did_not_plan(story):
    Schedule.objects.filter(pk=story.pk).update(status="paused")
    found = occurrences(story, since=T + seconds(4), until=T + seconds(8))
    assert {(o.outcome, o.reason) for o in found if o.at >= T + seconds(5)} == {
        ("stopped", "paused")
    }


def test_the_api_answers_a_tenant_for_its_own_schedules_only(story, settings: Any):
    settings.PGSCHED = {**settings.PGSCHED, "TENANT_RESOLVER": "tests.testapp.tenancy.from_header"}
    client = Client()
    params = {"since": (T - seconds(1)).isoformat(), "until": (T + seconds(3)).isoformat()}
    response = client.get(URL.format(story.name), params, headers={"X-Tenant": "acme"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["schedule"] == story.name and body["next_until"] is None
    assert [(r["at"], r["outcome"], r["status"], r["reason"]) for r in body["results"]] == [
        ("2026-03-01T12:00:02Z", "skipped", None, "overlap"),
        ("2026-03-01T12:00:01Z", "skipped", None, "overlap"),
        ("2026-03-01T12:00:00Z", "ran", "running", None),
        ("2026-03-01T11:59:59Z", "ran", "succeeded", None),
    ]
    other = client.get(URL.format(story.name), params, headers={"X-Tenant": "globex"})
    assert other.status_code == 404 and other.json() == {"error": "schedule not found"}
    paged = client.get(URL.format(story.name), {**params, "limit": 2}, headers={"X-Tenant": "acme"})
    assert paged.json()["next_until"] == "2026-03-01T12:00:01Z"
    bad = client.get(URL.format(story.name), {"limit": 0}, headers={"X-Tenant": "acme"})
    assert bad.status_code == 400 and bad.json()["error"].startswith("limit:")
    unknown = client.get(URL.format(story.name), {"tenant": "x"}, headers={"X-Tenant": "acme"})
    assert unknown.status_code == 400


def test_the_admin_shows_the_timeline(story, admin_client):
    response = admin_client.get(reverse("admin:pgsched_schedule_change", args=[story.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="pgsched-timeline"' in html
    # the last 30 occurrences before now; the story is in March, so none is planned yet
    assert html.count('<tr class="pgsched-occurrence-overdue">') == 30
    assert "due, not planned yet: is a planner running?" in html
