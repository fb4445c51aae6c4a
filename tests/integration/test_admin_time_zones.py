"""The admin shows a zoned schedule's times in its zone and in UTC, with marks, and jitter."""

from __future__ import annotations

import re
from datetime import timedelta

from django.urls import reverse

from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule
from tests.conftest import at
from tests.integration.test_admin import ADD_SCHEDULE, SCHEDULES, schedule_form, schedule_url


def test_zoned_schedule_page_shows_local_and_utc_with_offsets_and_marks(admin_client, db):
    s = Schedule.objects.create(
        name="berlin", job="tests.noop", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    content = admin_client.get(schedule_url(s)).content.decode()
    preview = re.search(r'<ol class="pgsched-preview">(.*?)</ol>', content, re.S)
    assert preview and preview.group(1).count("<li>") == 5
    # local time with its zone and offset, then UTC
    assert re.search(r"02:30:00 CES?T \(\+0[12]:00\) · \S+ 0[01]:30:00 UTC", preview.group(1))
    assert "(in Europe/Berlin; dst_gap=shift, dst_fold=first)" in content
    # across the next transitions: the shifted occurrence and the first of two are marked
    assert "Around the next transitions of Europe/Berlin" in content
    assert "03:00:00 CEST (+02:00)" in content and "DST shifted" in content
    assert "DST fold first" in content and "first of two 02:30:00" in content
    listing = admin_client.get(SCHEDULES).content.decode()
    assert ">Europe/Berlin</span>" in listing  # the zone tag in the "When" column
    assert re.search(r"02:30:00 CES?T \(\+0[12]:00\)", listing)  # next fire in local time


def test_utc_schedule_page_says_utc(admin_client, db):
    s = Schedule.objects.create(name="utc", job="tests.noop", cron="0 30 9 * * *")
    content = admin_client.get(schedule_url(s)).content.decode()
    assert "(UTC)" in content and "Around the next transitions" not in content


def test_the_form_takes_the_zone_and_refuses_an_unknown_one(admin_client, db):
    response = admin_client.post(
        ADD_SCHEDULE,
        schedule_form(cron="0 9 * * *", timezone="Europe/Berln", dst_gap="skip", dst_fold="both"),
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["timezone"]
    assert "unknown time zone 'Europe/Berln'" in errors[0] and "Europe/Berlin" in errors[0]
    response = admin_client.post(
        ADD_SCHEDULE,
        schedule_form(
            cron="0 9 * * *", timezone="Asia/Kolkata", dst_gap="skip", dst_fold="both", jitter="30"
        ),
    )
    assert response.status_code == 302
    s = Schedule.objects.get(name="nightly")
    assert (s.timezone, s.dst_gap, s.dst_fold, s.jitter) == (
        "Asia/Kolkata",
        "skip",
        "both",
        timedelta(seconds=30),
    )
    page = admin_client.get(ADD_SCHEDULE).content.decode()
    assert '<datalist id="timezone-zones">' in page and '<option value="Europe/Berlin">' in page


def test_run_page_shows_the_occurrence_and_its_jittered_due_time(admin_client, make_schedule):
    t = at("2026-03-01 12:00:00")
    s = make_schedule(cron="0 * * * *", jitter=timedelta(seconds=60), next_fire_at=t)
    Planner().run_once(now=t)
    run = JobRun.objects.get(schedule=s)
    assert run.fire_after > run.scheduled_for
    content = admin_client.get(reverse("admin:pgsched_jobrun_change", args=[run.pk])).content
    text = content.decode()
    assert "2026-03-01 12:00:00" in text  # scheduled for
    assert run.fire_after.strftime("%Y-%m-%d %H:%M:%S") in text  # due
    assert "after it was scheduled (jitter)" in text
