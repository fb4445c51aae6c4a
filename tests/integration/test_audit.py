"""The audit trail of schedule changes: every path, the actor, before and after, and non-changes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import checks
from django.db import connection, transaction
from django.urls import reverse

from django_pgsched import api, audit
from django_pgsched.audit.models import ScheduleChange
from django_pgsched.engine.maintenance import Retention
from django_pgsched.engine.planner import Planner
from django_pgsched.models import Schedule, db_now
from django_pgsched.ops.checks import check_database_version
from django_pgsched.ops.sync import sync_schedules
from tests.conftest import at

T = at("2026-03-01 12:00:00")


def trail(schedule: Schedule | int) -> list[ScheduleChange]:
    """Oldest first."""
    return list(reversed(audit.changes(schedule)))


def sql(query: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def test_orm_create_and_change_are_recorded_with_before_and_after(make_schedule):
    s = make_schedule(cron="0 * * * * *", kwargs={"a": 1})
    s.cron = "*/5 * * * * *"
    s.queue = "reports"
    s.save()
    created, changed = trail(s)
    assert created.action == "created" and created.actor == "orm"
    assert created.changes["cron"] == [None, "0 * * * * *"]
    assert created.changes["kwargs"] == [None, {"a": 1}]
    assert "next_fire_at" not in created.changes  # runtime state, not a definition
    assert changed.action == "changed" and changed.actor == "orm"
    assert changed.changes == {
        "cron": ["0 * * * * *", "*/5 * * * * *"],
        "queue": [None, "reports"],
    }
    assert changed.summary == "changed cron, queue"
    assert changed.db_user and changed.schedule_name == s.name


def test_plain_sql_is_recorded_as_sql_with_its_role_and_application(make_schedule):
    s = make_schedule()
    sql("SET application_name = 'psql'")
    sql("UPDATE pgsched_schedule SET misfire_policy = 'skip' WHERE id = %s", [s.pk])
    change = trail(s)[-1]
    assert change.actor == "sql"
    assert change.changes == {"misfire_policy": ["latest", "skip"]}
    assert change.application == "psql"
    assert change.db_user == sql("SELECT current_user")[0][0]


def test_the_planners_advance_is_not_a_change(make_schedule):
    s = make_schedule(next_fire_at=T - timedelta(hours=1), misfire_policy="skip")
    before = ScheduleChange.objects.count()
    sql("SET track_functions = 'pl'")
    Planner().run_once(now=T)
    s.refresh_from_db()
    assert s.skipped_occurrences > 0 and s.next_fire_at > T  # it did advance
    assert ScheduleChange.objects.count() == before
    calls = dict(
        sql(
            "SELECT funcname, calls FROM pg_stat_xact_user_functions"
            " WHERE funcname LIKE 'pgsched_schedule%%'"
        )
    )
    # the statement-level trigger ran once and found nothing to record
    assert calls.get("pgsched_schedule_after_update") == 1, calls
    assert "pgsched_schedule_before_update" not in calls  # its WHEN clause left the row out


def test_the_planner_marking_a_schedule_broken_is_recorded_as_the_planner(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    sql("UPDATE pgsched_schedule SET cron = '0 0 0 30 2 *' WHERE id = %s", [s.pk])
    # the loop configures its session once per connection; an earlier test's
    # configuration was rolled back with that test's transaction
    connection.ensure_connection()
    connection.connection._pgsched_session = None
    Planner().run_once(now=T)
    change = trail(s)[-1]
    assert change.summary == "became broken"
    assert change.actor.startswith("planner ")
    assert change.changes["last_error"][1].startswith("cannot compute occurrences")


def test_settings_sync_is_the_actor_of_its_changes(db):
    declared = {"nightly": {"job": "tests.noop", "cron": "0 0 2 * * *"}}
    sync_schedules(declared)
    sync_schedules({"nightly": {"job": "tests.noop", "cron": "0 30 2 * * *"}})
    created, changed = trail(Schedule.objects.get(name="nightly"))
    assert created.actor == changed.actor == "settings sync"
    assert changed.changes == {"cron": ["0 0 2 * * *", "0 30 2 * * *"]}


def test_an_actor_block_names_the_changes_inside_it_and_restores_the_outer_one(make_schedule):
    s = make_schedule()
    with audit.actor("deploy-bot"):
        Schedule.objects.filter(pk=s.pk).update(queue="a")
        with audit.actor(audit.for_user("alice")):
            api.pause(s)
        Schedule.objects.filter(pk=s.pk).update(queue="b")
    Schedule.objects.filter(pk=s.pk).update(queue="c")
    actors = [(c.actor, c.summary) for c in trail(s)[1:]]
    assert actors == [
        ("deploy-bot", "changed queue"),
        ("user:alice", "paused"),
        ("deploy-bot", "changed queue"),
        ("orm", "changed queue"),
    ]
    assert sql("SELECT current_setting('pgsched.actor', true)")[0][0] == ""


def test_an_actor_set_inside_a_transaction_ends_with_it(make_schedule):
    s = make_schedule()
    with transaction.atomic():
        with audit.actor("inside"):
            Schedule.objects.filter(pk=s.pk).update(queue="x")
    sql("UPDATE pgsched_schedule SET queue = 'y' WHERE id = %s", [s.pk])
    assert [c.actor for c in trail(s)[1:]] == ["inside", "sql"]


def test_an_actor_needs_a_name(db):
    with pytest.raises(ValueError, match="actor"):
        with audit.actor(" "):
            pass


def test_a_deleted_schedule_keeps_its_trail(make_schedule):
    s = make_schedule(cron="0 0 * * * *")
    pk = s.pk
    s.delete()
    deleted = trail(pk)[-1]
    assert deleted.action == "deleted" and deleted.actor == "orm"
    assert deleted.changes["cron"] == ["0 0 * * * *", None]


def test_the_admin_records_its_user_and_shows_the_trail(admin_client, admin_user, make_schedule):
    s = make_schedule(cron="0 * * * * *")
    page = reverse("admin:pgsched_schedule_change", args=[s.pk])
    admin_client.post(reverse("admin:pgsched_schedule_pause", args=[s.pk]))
    admin_client.post(reverse("admin:pgsched_schedule_resume", args=[s.pk]))
    response = admin_client.get(page)
    body = response.content.decode()
    paused, resumed = trail(s)[1:]
    assert paused.actor == resumed.actor == f"user:{admin_user.get_username()}"
    assert (paused.summary, resumed.summary) == ("paused", "resumed")
    assert "Latest changes" in body and "paused" in body and "resumed" in body
    listing = admin_client.get(
        reverse("admin:pgsched_schedulechange_changelist") + f"?schedule_id={s.pk}"
    )
    assert listing.status_code == 200 and s.name in listing.content.decode()


@pytest.mark.parametrize("term", ["²", "١٢", "9" * 5000])
def test_the_admin_reads_no_number_from_digits_int_cannot(admin_client, make_schedule, term):
    """``"²".isdigit()`` is true and ``int("²")`` raises: the run search and the change
    trail's schedule link answered 500 for it (and for 5,000 digits)."""
    # A name no CSRF token or page text can hold by chance ("s0" once matched a token).
    s = make_schedule(name="never-listed-by-digits", cron="0 * * * * *")
    runs = admin_client.get(reverse("admin:pgsched_jobrun_changelist"), {"q": term})
    assert runs.status_code == 200
    listing = admin_client.get(
        reverse("admin:pgsched_schedulechange_changelist"), {"schedule_id": term}
    )
    assert listing.status_code in (200, 302), listing.status_code
    assert s.name not in listing.content.decode()


def test_an_admin_edit_and_bulk_action_are_recorded_as_the_user(
    admin_client, admin_user, make_schedule
):
    s = make_schedule(cron="0 * * * * *")
    admin_client.post(
        reverse("admin:pgsched_schedule_changelist"),
        {"action": "pause_selected", "_selected_action": [s.pk]},
    )
    change = trail(s)[-1]
    assert (change.actor, change.summary) == (f"user:{admin_user.get_username()}", "paused")
    assert sql("SELECT current_setting('pgsched.actor', true)")[0][0] == ""


def test_retention_deletes_old_changes_like_runs(make_schedule, settings):
    s = make_schedule()
    sql(
        "UPDATE pgsched_schedule_change SET at = at - interval '40 days' WHERE schedule_id = %s",
        [s.pk],
    )
    Schedule.objects.filter(pk=s.pk).update(queue="new")
    result = Retention().run_once(now=db_now())
    assert result.history == 1
    assert [c.summary for c in trail(s)] == ["changed queue"]


def test_the_check_reports_a_column_the_trigger_does_not_watch(db):
    assert not [m for m in check_database_version(databases=["default"]) if m.id == "pgsched.W003"]
    sql("ALTER TABLE pgsched_schedule ADD COLUMN colour text")
    found = [m for m in check_database_version(databases=["default"]) if m.id == "pgsched.W003"]
    assert found and "colour" in found[0].msg and isinstance(found[0], checks.Warning)
    sql("SELECT pgsched_schedule_audit_install()")
    assert not [m for m in check_database_version(databases=["default"]) if m.id == "pgsched.W003"]
