"""Bad input the existing suites do not reach: commands, sync, enqueue, and the backstops.

Each rejection must name the field and the value. ``docs/reference/fault-scenarios.md``
maps every row of the catalogue (reliability research §7 A–D, G, H) to the test
that covers it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

from django_pgsched import enqueue
from django_pgsched.models import Schedule
from django_pgsched.ops.sync import build, sync_schedules
from django_pgsched.payload import validate_kwargs

pytestmark = pytest.mark.faults


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["pgsched_cron", "* * * * *", "-n", "0"], "must be from 1 to 1000, got 0"),
        (["pgsched_cron", "* * * * *", "-n", "many"], "expected a whole number, got 'many'"),
        (["pgsched_cron", "* * * * *", "--after", "2026-01-01T00:00"], "needs a UTC offset"),
        (["pgsched_cron", "0 0 30 2 *"], "day 30 never occurs in February"),
        (["pgsched_cron", "CRON_TZ=Europe/Paris 0 9 * * *"], "time zones are not supported"),
        (["pgsched_run", "--job", "tests.noop", "--kwargs", "[1]"], "expected a JSON object"),
        (["pgsched_run", "--job", "tests.noop", "--kwargs", "{bad"], "not valid JSON"),
        (["pgsched_run", "--job", "tests.noop", "--kwargs", '{"x": NaN}'], "NaN/Infinity"),
        (["pgsched_run", "--job", "tests.noop", "--kwargs", '{"x": "\\u0000"}'], "NUL"),
        (["pgsched_run", "--job", "tests.noop", "--kwargs", '{"not valid": 1}'], "'not valid'"),
        (["pgsched_run", "--job", "os.system"], "unknown job 'os.system'"),
        (["pgsched_run", "--schedule", "nope"], "no schedule named 'nope'"),
        (["runscheduler", "--concurrency", "0"], "must be at least 1, got 0"),
        (["runscheduler", "--concurrency", "four"], "expected a whole number, got 'four'"),
        (["runscheduler", "--loops", "planner,reaper"], "unknown loop(s) reaper"),
        (["runscheduler", "--metrics-port", "70000"], "not a TCP port: 70000"),
        (["runscheduler", "--queues", ","], "expected one or more queue names"),
    ],
)
def test_commands_reject_bad_arguments_naming_them(db: None, args: list[str], text: str) -> None:
    with pytest.raises(CommandError) as info:
        call_command(*args)
    assert text in str(info.value)


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"job": "tests.noop", "cron": "* * * * *", "misfire_policy": "all"}, "'all'"),
        ({"job": "tests.noop", "cron": "* * * * *", "catch_up_limit": 1001}, "1001"),
        ({"job": "tests.noop", "cron": "* * * * *", "max_attempts": 9}, "got 9"),
        ({"job": "tests.noop", "cron": "* * * * *", "timeout": 0}, "timeout"),
        ({"job": "tests.noop", "cron": "* * * * *", "misfire_grace": -1}, "misfire_grace"),
        ({"job": "tests.noop", "cron": "* * * * *", "kwargs": {"x": "\x00"}}, "NUL"),
        ({"job": "tests.noop", "cron": "* * * * *", "kwargs": nested(40)}, "deeper than 32"),
        ({"job": "tests.noop", "interval": 0.5}, "0.5 s"),
        ({"job": "tests.noop", "interval": -5}, "-5 s"),
        (
            {"job": "tests.noop", "interval": 5, "anchor": datetime(2026, 1, 1)},
            "timezone offset required",
        ),
        ({"job": "tests.noop", "cron": "H * * * *"}, "differ between replicas"),
    ],
)
def test_sync_rejects_bad_declarations_naming_the_field(
    db: None, options: dict[str, Any], text: str
) -> None:
    with pytest.raises(ValidationError) as info:
        sync_schedules({"bad": options})
    assert "SCHEDULES['bad']" in str(info.value) and text in str(info.value), info.value


def test_sync_names_the_declaration_of_a_non_numeric_interval(db: None) -> None:
    with pytest.raises(ValidationError) as info:
        sync_schedules({"bad": {"job": "tests.noop", "interval": "5"}})
    assert "SCHEDULES['bad']" in str(info.value) and "got '5'" in str(info.value)


def test_pgsched_sync_command_reports_the_bad_declaration(db: None) -> None:
    with (
        override_settings(
            PGSCHED={"SCHEDULES": {"x": {"job": "tests.noop", "cron": "60 * * * *"}}}
        ),
        pytest.raises(CommandError, match=r"SCHEDULES\['x'\]: cron: minute value 60"),
    ):
        call_command("pgsched_sync")


@pytest.mark.parametrize(
    "options",
    [
        {"job": "tests.noop", "interval": float("nan")},
        {"job": "tests.noop", "interval": float("inf")},
        {"job": "tests.noop", "interval": 1e15},
        {"job": "tests.noop", "cron": "* * * * *", "timeout": 1e15},
    ],
)
def test_sync_rejects_absurd_numbers_of_seconds(db: None, options: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        build("bad", options)


@pytest.mark.parametrize(
    ("call", "field", "text"),
    [
        (lambda: enqueue("tests.noop", kwargs={"x": "\x00"}), "kwargs", "NUL"),
        (lambda: enqueue("tests.noop", kwargs=nested(40)), "kwargs", "deeper than 32"),
        (lambda: enqueue("tests.noop", kwargs={"x": "y" * 70000}), "kwargs", "65,536"),
        (lambda: enqueue("tests.noop", kwargs={"x": float("inf")}), "kwargs", "NaN/Infinity"),
        (lambda: enqueue("tests.noop", kwargs={"class": 1}), "kwargs", "'class'"),
        (lambda: enqueue("tests.noop", queue="no spaces"), "queue", "'no spaces'"),
        (lambda: enqueue("tests.noop", timeout=timedelta(0)), "timeout", "between 1 second"),
        (lambda: enqueue("tests.noop", timeout=5), "timeout", "expected a timedelta, got 5"),
        (lambda: enqueue("tests.noop", max_attempts=9), "max_attempts", "got 9"),
        (lambda: enqueue("tests.noop", run_at="tomorrow"), "run_at", "'tomorrow'"),
    ],
)
def test_enqueue_rejects_bad_input_naming_the_field(
    db: None, call: Any, field: str, text: str
) -> None:
    with pytest.raises(ValidationError) as info:
        call()
    assert field in info.value.message_dict, info.value
    assert any(text in m for m in info.value.message_dict[field]), info.value.message_dict


def test_enqueue_rejects_an_unregistered_job_before_anything_else(db: None) -> None:
    with pytest.raises(ValidationError, match=r"unknown job 'subprocess\.run'"):
        enqueue("subprocess.run", kwargs={"args": ["id"]})


@pytest.mark.parametrize(
    ("fields", "field", "text"),
    [
        ({"cron": "x" * 129}, "cron", "129 characters"),
        ({"cron": "* * * * 1.5"}, "cron", "'.'"),
        ({"cron": "0 0 * * SUNDAY"}, "cron", "'SUNDAY'"),
        ({"cron": "@every 5s"}, "cron", "'@every'"),
        ({"cron": "* * * * *", "catch_up_limit": 1001}, "catch_up_limit", "1001"),
        (
            {"cron": None, "interval": timedelta(seconds=5),
             "anchor": datetime(9999, 6, 1, tzinfo=UTC)},
            "anchor", "year",
        ),
        (
            {"cron": None, "interval": timedelta(seconds=5),
             "anchor": datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC)},
            "anchor", "whole second",
        ),
        ({"cron": "* * * * *", "kwargs": {"x": {1, 2}}}, "kwargs", "set"),
        ({"cron": "* * * * *", "kwargs": "{\"import\": 1}"}, "kwargs", "keyword-argument"),
        ({"cron": "* * * * *", "status": "running"}, "status", "'running'"),
    ],
)  # fmt: skip
def test_full_clean_gaps(db: None, fields: dict[str, Any], field: str, text: str) -> None:
    fields.setdefault("name", "x")
    fields.setdefault("job", "tests.noop")
    with pytest.raises(ValidationError) as info:
        Schedule(**fields).full_clean()
    assert field in info.value.message_dict, info.value
    assert any(text in m for m in info.value.message_dict[field]), info.value.message_dict


def test_a_huge_integer_payload_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        validate_kwargs({"x": 10**5000}, max_bytes=65536, max_depth=32)


def test_a_float_jsonb_would_change_is_rejected_and_accepted_ones_round_trip(db: None) -> None:
    with pytest.raises(ValidationError, match="would not survive PostgreSQL jsonb"):
        validate_kwargs({"x": 8.91108812161618e16}, max_bytes=65536, max_depth=32)
    value = {"a": 9007199254740993.0, "b": 1e-7, "c": 123.456, "d": -9.99e15, "e": 10**30}
    validate_kwargs(value, max_bytes=65536, max_depth=32)
    run = enqueue("tests.noop", kwargs=value)
    with connection.cursor() as cursor:
        cursor.execute("SELECT kwargs FROM pgsched_job_run WHERE id = %s", [run.pk])
        (stored,) = cursor.fetchone()
    stored = __import__("json").loads(stored) if isinstance(stored, str) else stored
    assert stored == value
    assert [type(stored[k]) for k in "abcde"] == [float, float, float, float, int]


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        (
            "UPDATE pgsched_schedule SET cron = NULL, \"interval\" = interval '5 seconds', "
            "anchor = 'infinity'",
            "pgsched_schedule_times_finite",
        ),
        ("UPDATE pgsched_schedule SET cron = E'* * * * *\\n* * * * *'", "cron_text"),
        # two CHECKs refuse it (pgsched_schedule_timeout_range, _durations_range): PostgreSQL
        # names either
        ("UPDATE pgsched_schedule SET timeout = interval '0 seconds'", "(timeout|durations)_range"),
        ("UPDATE pgsched_schedule SET skipped_occurrences = -1", "skipped_non_negative"),
        ("UPDATE pgsched_schedule SET name = ''", "name_nonempty"),
    ],
)
def test_the_database_backstops_what_bypasses_validation(
    db: None, statement: str, constraint: str
) -> None:
    Schedule.objects.create(name="raw", job="tests.noop", cron="* * * * *")
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statement)
