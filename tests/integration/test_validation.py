"""Bad input: clear messages from the model and API, and the database as the backstop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from django_pgsched import enqueue
from django_pgsched.models import JobRun, Schedule
from django_pgsched.ops.sync import sync_schedules
from tests.conftest import at


def errors_of(**fields) -> dict[str, list[str]]:
    fields.setdefault("name", "x")
    fields.setdefault("job", "tests.noop")
    with pytest.raises(ValidationError) as info:
        Schedule(**fields).full_clean()
    return info.value.message_dict


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"cron": "60 * * * *"}, "cron", "minute value 60"),
        ({"cron": "* * * *"}, "cron", "got 4"),
        ({"cron": "0 0 30 2 *"}, "cron", "never"),
        ({"cron": "H * * * *"}, "cron", "random"),
        ({"cron": "TZ=Europe/London 0 9 * * *"}, "cron", "timezone field"),
        ({"cron": "0 0 L * *"}, "cron", "'L'"),
        ({"cron": "*/0 * * * *"}, "cron", "step"),
        ({"cron": "30-10 * * * *"}, "cron", "30"),
        ({"cron": "٣ * * * *"}, "cron", "U+0663"),
        ({"cron": None}, "cron", "set a cron expression or an interval"),
        ({"cron": "* * * * *", "interval": timedelta(seconds=5)}, "cron", "not both"),
        ({"cron": None, "interval": timedelta(0)}, "interval", "whole number of seconds"),
        ({"cron": None, "interval": timedelta(seconds=1.5)}, "interval", "whole number of seconds"),
        ({"cron": None, "interval": timedelta(days=400)}, "interval", "31,622,400"),
        (
            {"cron": "* * * * *", "misfire_policy": "catchup"},
            "misfire_policy",
            "'catchup' is not one of",
        ),
        ({"cron": "* * * * *", "catch_up_limit": 0}, "catch_up_limit", "from 1 to 1000"),
        ({"cron": "* * * * *", "max_attempts": 9}, "max_attempts", "from 1 to 8"),
        ({"cron": "* * * * *", "timeout": timedelta(0)}, "timeout", "between 1 second"),
        (
            {"cron": "* * * * *", "misfire_grace": timedelta(seconds=-1)},
            "misfire_grace",
            "between 0",
        ),
        ({"cron": "* * * * *", "job": "os.system"}, "job", "unknown job 'os.system'"),
        ({"cron": "* * * * *", "kwargs": {"x": float("nan")}}, "kwargs", "NaN"),
        ({"cron": "* * * * *", "kwargs": [1]}, "kwargs", "JSON object"),
        ({"cron": "* * * * *", "queue": "has space"}, "queue", "not a valid queue name"),
    ],
)
def test_full_clean_names_the_field_and_the_value(db, fields, field, text):
    errors = errors_of(**fields)
    assert field in errors, errors
    assert any(text in message for message in errors[field]), errors[field]


def test_naive_anchor_is_rejected(db):
    from datetime import datetime

    errors = errors_of(cron=None, interval=timedelta(seconds=5), anchor=datetime(2026, 1, 1))
    assert "anchor" in errors


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("cron", "E'* * * *\\t*'"),
        ("cron", "E'* * * * \\u00a0*'"),
        ('"interval"', "interval '1.5 seconds'"),
        ('"interval"', "interval '0 seconds'"),
        ("kwargs", "'[1, 2]'::jsonb"),
        ("misfire_policy", "'all'"),
        ("status", "'running'"),
        ("max_attempts", "9"),
        ("catch_up_limit", "0"),
        ("next_fire_at", "'infinity'"),
    ],
)
def test_database_rejects_what_slips_past_the_model(db, column, value):
    s = Schedule.objects.create(name="raw", job="tests.noop", cron="* * * * *")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        if column == '"interval"':
            cursor.execute(
                f'UPDATE pgsched_schedule SET cron = NULL, "interval" = {value} WHERE id = %s',
                [s.pk],
            )
        else:
            cursor.execute(f"UPDATE pgsched_schedule SET {column} = {value} WHERE id = %s", [s.pk])


def test_database_requires_exactly_one_of_cron_and_interval(db):
    s = Schedule.objects.create(name="raw", job="tests.noop", cron="* * * * *")
    with pytest.raises(IntegrityError), transaction.atomic():
        Schedule.objects.filter(pk=s.pk).update(interval=timedelta(seconds=5))


@pytest.mark.parametrize(
    ("update", "constraint"),
    [
        ({"attempts": 9, "max_attempts": 8}, "pgsched_run_attempts_range"),
        ({"max_attempts": 0}, "pgsched_run_max_attempts_range"),
        ({"status": "running"}, "pgsched_run_lease_iff_running"),
        ({"status": "succeeded"}, "pgsched_run_terminal_has_finished_at"),
        (
            # in a month the test database has (the update moves no run across months)
            {"scheduled_for": datetime.now(UTC).replace(microsecond=5)},
            "pgsched_run_scheduled_for_whole_second",
        ),
    ],
)
def test_database_guards_runs(db, update, constraint):
    run = enqueue("tests.noop")
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        JobRun.objects.filter(pk=run.pk).update(**update)


def test_unique_occurrence_index_rejects_a_second_run(db):
    s = Schedule.objects.create(name="u", job="tests.noop", cron="* * * * *")
    fields = {
        "schedule": s,
        "scheduled_for": at("2026-01-01 00:00:00"),
        "job": "tests.noop",
        "queue": "default",
        "fire_after": at("2026-01-01 00:00:00"),
        "max_attempts": 1,
        "timeout": timedelta(seconds=5),
    }
    JobRun.objects.create(idempotency_key="a", **fields)
    with (
        pytest.raises(IntegrityError, match="pgsched_one_run_per_occurrence"),
        transaction.atomic(),
    ):
        JobRun.objects.create(idempotency_key="b", **fields)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: enqueue("os.system"), "job"),
        (lambda: enqueue("tests.noop", kwargs={"a": b"x"}), "kwargs"),
        (
            lambda: enqueue("tests.noop", run_at=__import__("datetime").datetime(2026, 1, 1)),
            "run_at",
        ),
        (lambda: enqueue("tests.noop", max_attempts=0), "max_attempts"),
        (lambda: enqueue("tests.noop", idempotency_key=""), "idempotency_key"),
    ],
)
def test_enqueue_rejects_bad_input(db, call, field):
    with pytest.raises(ValidationError) as info:
        call()
    assert field in str(info.value)


def test_sync_is_idempotent_and_prunes(db):
    declared = {
        "a": {"job": "tests.noop", "cron": "0 * * * * *"},
        "b": {"job": "tests.noop", "interval": 30, "misfire_policy": "skip"},
    }
    first = sync_schedules(declared)
    assert sorted(first.created) == ["a", "b"]
    b = Schedule.objects.get(name="b")
    assert b.interval == timedelta(seconds=30) and b.source == "settings"
    before = Schedule.objects.get(name="a").next_fire_at
    again = sync_schedules(declared)
    assert sorted(again.unchanged) == ["a", "b"] and not again.updated
    assert Schedule.objects.get(name="a").next_fire_at == before
    changed = sync_schedules({"a": {"job": "tests.noop", "cron": "*/5 * * * * *"}})
    assert changed.updated == ["a"] and changed.deleted == ["b"]
    assert Schedule.objects.get(name="a").cron == "*/5 * * * * *"
    Schedule.objects.create(name="mine", job="tests.noop", cron="* * * * *")  # from the admin
    assert sync_schedules({}).deleted == ["a"] and Schedule.objects.filter(name="mine").exists()


def test_sync_keeps_a_paused_declared_schedule_paused(db):
    sync_schedules({"a": {"job": "tests.noop", "cron": "0 * * * * *"}})
    Schedule.objects.filter(name="a").update(status="paused")
    sync_schedules({"a": {"job": "tests.noop", "cron": "0 0 * * * *"}})
    assert Schedule.objects.get(name="a").status == "paused"


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"job": "tests.noop"}, "set a cron expression or an interval"),
        ({"job": "tests.noop", "cron": "* * *"}, "cron"),
        ({"job": "tests.noop", "cron": "* * * * *", "colour": "red"}, "unknown option(s) colour"),
        ({"job": "nope", "cron": "* * * * *"}, "unknown job 'nope'"),
    ],
)
def test_sync_rejects_bad_declarations(db, options, text):
    with pytest.raises(ValidationError) as info:
        sync_schedules({"bad": options})
    assert "SCHEDULES['bad']" in str(info.value) and text in str(info.value)


def test_pgsched_cron_command_previews_and_rejects():
    out = StringIO()
    call_command(
        "pgsched_cron",
        "0 30 9 * * MON-FRI",
        "--after",
        "2026-03-06T10:00:00+00:00",
        "-n",
        "2",
        stdout=out,
    )
    assert "2026-03-09 09:30:00 UTC  (Mon)" in out.getvalue()
    assert "2026-03-10 09:30:00 UTC  (Tue)" in out.getvalue()
    with pytest.raises(CommandError, match="minute value 60"):
        call_command("pgsched_cron", "60 * * * *")


def test_pgsched_run_command_enqueues(db):
    out = StringIO()
    call_command("pgsched_run", "--job", "tests.noop", "--kwargs", '{"n": 1}', stdout=out)
    run = JobRun.objects.get()
    assert run.kwargs == {"n": 1} and f"run {run.pk}" in out.getvalue()
    with pytest.raises(CommandError, match="unknown job"):
        call_command("pgsched_run", "--job", "nope")


def test_pgsched_run_schedule_now_keeps_its_options_and_does_not_take_an_occurrence(db):
    Schedule.objects.create(
        name="now", job="tests.noop", cron="* * * * *", kwargs={"k": 2}, queue="q", max_attempts=5
    )
    call_command("pgsched_run", "--schedule", "now", stdout=StringIO())
    run = JobRun.objects.get()
    assert (run.kwargs, run.queue, run.max_attempts) == ({"k": 2}, "q", 5)
    assert run.schedule_id is None and run.schedule_name == "now"
