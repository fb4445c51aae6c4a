"""The admin's lists and pages answer for rows Python cannot read.

A row written past the bounds (by SQL with the CHECKs dropped) may hold
a value Python's ``datetime`` or ``timedelta`` cannot represent: a year 1 BC time, a
timeout of a hundred million years. The admin's list and change pages show such a
value as unreadable instead of answering 500; every other row of the page is listed.
"""

from __future__ import annotations

import pytest
from django.db import DataError, connection
from django.urls import reverse

from django_pgsched.models import JobRun, Schedule
from tests.integration.test_poisoned_rows import DEEP, DIGITS, SCHEDULE_POISONS, drop_bounds, sql

RUN_POISONS = [
    ("fire_after", "'0001-06-01 00:00:00+00 BC'"),
    ("started_at", "'0001-06-01 00:00:00+00 BC'"),
    ("finished_at", "'0001-06-01 00:00:00+00 BC'"),
    ("created_at", "'0001-06-01 00:00:00+00 BC'"),
    ("timeout", "interval '100000000 years'"),
    ("kwargs", DIGITS),
    ("kwargs", DEEP),
]


@pytest.mark.parametrize(("column", "value", "named"), SCHEDULE_POISONS)
def test_the_schedule_list_and_page_answer_for_an_unreadable_schedule(
    admin_client, make_schedule, column, value, named
):
    drop_bounds()
    healthy = make_schedule(name="healthy")
    poisoned = make_schedule(name="poisoned")
    sql(f"UPDATE pgsched_schedule SET {column} = {value} WHERE id = %s", [poisoned.pk])

    page = admin_client.get(reverse("admin:pgsched_schedule_changelist"))
    assert page.status_code == 200
    body = page.content.decode()
    assert healthy.name in body and "poisoned" in body

    page = admin_client.get(reverse("admin:pgsched_schedule_change", args=[poisoned.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert f"holds values Python cannot read ({named})" in body
    assert 'name="_save"' not in body  # read-only: saving would write the empty value

    healthy_page = admin_client.get(reverse("admin:pgsched_schedule_change", args=[healthy.pk]))
    assert 'name="_save"' in healthy_page.content.decode()


def test_outside_the_admin_an_unreadable_value_still_raises(db, make_schedule):
    """Only the admin's pages read such a value as empty: the ORM elsewhere is Django's."""
    drop_bounds()
    poisoned = make_schedule(name="poisoned")
    sql(
        "UPDATE pgsched_schedule SET next_fire_at = '0001-06-01 00:00:00+00 BC' WHERE id = %s",
        [poisoned.pk],
    )
    with pytest.raises(DataError):
        Schedule.objects.get(pk=poisoned.pk)


@pytest.mark.parametrize(("column", "value"), RUN_POISONS)
def test_the_run_list_and_page_answer_for_an_unreadable_run(admin_client, column, value):
    drop_bounds()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (idempotency_key, job, queue, fire_after, attempts,
                max_attempts, timeout, scheduled_for, schedule_name)
            VALUES ('healthy-key', 'tests.ok', 'default', now(), 0, 3, '1 minute',
                    date_trunc('second', now()), 'healthy-run'),
                   ('poisoned-key', 'tests.ok', 'default', now(), 0, 3, '1 minute',
                    date_trunc('second', now()), 'poisoned-run')
            """
        )
    poisoned = JobRun.objects.get(schedule_name="poisoned-run").pk
    sql(f"UPDATE pgsched_job_run SET {column} = {value} WHERE id = %s", [poisoned])

    page = admin_client.get(reverse("admin:pgsched_jobrun_changelist"))
    assert page.status_code == 200
    body = page.content.decode()
    assert "healthy-run" in body and "poisoned-run" in body

    page = admin_client.get(reverse("admin:pgsched_jobrun_change", args=[poisoned]))
    assert page.status_code == 200
    assert f"holds values Python cannot read ({column})" in page.content.decode()
