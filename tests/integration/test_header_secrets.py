"""Header values (credentials) never reach view-only admins nor the audit trail.

Before, a user who could only view schedules and runs read every ``Authorization`` a
``pgsched.http`` schedule sent, and the trail of changes kept every token a schedule
ever had, rotated ones included.
"""

from __future__ import annotations

from django.contrib.auth.models import Permission
from django.db import connection
from django.urls import reverse

from django_pgsched import enqueue
from django_pgsched.audit.models import ScheduleChange

OLD, NEW = "Bearer old-s3cret-token", "Bearer new-s3cret-token"


def _viewer(django_user_model, *codenames: str):
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def test_the_trail_records_that_a_header_changed_never_its_value(make_schedule):
    s = make_schedule(kwargs={"headers": {"Authorization": OLD, "X-Team": "ops"}, "n": 1})
    s.kwargs = {"headers": {"Authorization": NEW, "X-Team": "ops"}, "n": 2}
    s.save()
    created, changed = ScheduleChange.objects.filter(schedule_id=s.pk).order_by("id")
    before, after = changed.changes["kwargs"]
    assert before["headers"] == {"Authorization": "[masked: changed]", "X-Team": "[masked]"}
    assert after["headers"] == before["headers"] and (before["n"], after["n"]) == (1, 2)
    assert created.changes["kwargs"][1]["headers"]["Authorization"] == "[masked]"
    with connection.cursor() as cursor:  # nowhere in the table, whatever reads it
        cursor.execute(
            "SELECT count(*) FROM pgsched_schedule_change WHERE changes::text LIKE %s",
            ["%s3cret%"],
        )
        assert cursor.fetchone()[0] == 0


def test_a_view_only_admin_reads_header_names_not_values(client, django_user_model, make_schedule):
    s = make_schedule(kwargs={"headers": {"Authorization": OLD}})
    run = enqueue("tests.noop", kwargs={"headers": {"Authorization": NEW}})
    client.force_login(_viewer(django_user_model, "view_schedule", "view_jobrun"))
    schedule_page = client.get(reverse("admin:pgsched_schedule_change", args=[s.pk]))
    run_page = client.get(reverse("admin:pgsched_jobrun_change", args=[run.pk]))
    for page in (schedule_page, run_page):
        body = page.content.decode()
        assert page.status_code == 200 and "Authorization" in body
        assert "s3cret" not in body and "[masked]" in body
    s.refresh_from_db()
    assert s.kwargs["headers"]["Authorization"] == OLD  # nothing masked was written


def test_an_admin_who_may_change_schedules_reads_the_values(admin_client, make_schedule):
    s = make_schedule(kwargs={"headers": {"Authorization": OLD}})
    run = enqueue("tests.noop", kwargs={"headers": {"Authorization": NEW}})
    assert (
        OLD
        in admin_client.get(reverse("admin:pgsched_schedule_change", args=[s.pk])).content.decode()
    )
    assert (
        NEW
        in admin_client.get(reverse("admin:pgsched_jobrun_change", args=[run.pk])).content.decode()
    )
