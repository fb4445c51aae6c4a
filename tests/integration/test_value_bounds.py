"""The database refuses what clean() refuses; the model layer refuses it first, by name.

Every bounded value (times, durations, payloads) is refused before any write by
``save()``, ``create()`` and ``bulk_create()`` with a ``ValidationError`` naming the
field and the value; written with SQL, the database's CHECKs refuse it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from django_pgsched import enqueue
from django_pgsched.models import JobRun, Schedule
from tests.conftest import at

PLUS5 = timezone(timedelta(hours=5))
BC = datetime(1, 1, 1, tzinfo=PLUS5)  # year 1 BC once in UTC
DEEP: dict = {"a": []}
_inner = DEEP["a"]
for _ in range(3000):
    _inner.append([])
    _inner = _inner[0]
HUGE = 10**5000  # 5,001 digits


def schedule(**fields):
    return {"name": "x", "job": "tests.noop", "cron": "* * * * *", **fields}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"timeout": timedelta.max}, "timeout"),
        ({"timeout": timedelta(days=8)}, "timeout"),
        ({"misfire_grace": timedelta(days=999_999_999)}, "misfire_grace"),
        ({"misfire_grace": timedelta(days=367)}, "misfire_grace"),
        ({"cron": None, "interval": timedelta(seconds=5), "anchor": BC}, "anchor"),
        ({"next_fire_at": BC}, "next_fire_at"),
        ({"next_fire_at": datetime(9999, 6, 1, tzinfo=UTC)}, "next_fire_at"),
        ({"last_fire_at": datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5)))},
         "last_fire_at"),
        ({"kwargs": DEEP}, "kwargs"),
        ({"kwargs": {"a": HUGE}}, "kwargs"),
        ({"kwargs": {"a": float("inf")}}, "kwargs"),
    ],
)  # fmt: skip
def test_create_and_bulk_create_refuse_a_schedule_out_of_bounds(db, fields, named):
    with pytest.raises(ValidationError) as info:
        Schedule.objects.create(**schedule(**fields))
    assert named in info.value.message_dict, info.value
    with pytest.raises(ValidationError) as info:
        Schedule.objects.bulk_create(
            [Schedule(**schedule(name="ok")), Schedule(**schedule(**fields))]
        )
    assert named in info.value.message_dict
    with pytest.raises(ValidationError) as info:  # full_clean(): never a bare ValueError
        Schedule(**schedule(**fields)).full_clean()
    assert named in info.value.message_dict
    assert not Schedule.objects.exists()


def test_the_message_names_the_value(db):
    with pytest.raises(ValidationError) as info:
        Schedule.objects.create(**schedule(timeout=timedelta(days=8)))
    assert info.value.message_dict["timeout"] == [
        "timeout: must be from 1 second to 7 days, got 8 days"
    ]
    with pytest.raises(ValidationError) as info:
        Schedule.objects.create(**schedule(next_fire_at=BC))
    assert "0001-01-01T00:00:00+05:00" in info.value.message_dict["next_fire_at"][0]


def run(**fields):
    base = {
        "scheduled_for": at("2026-01-01 00:00:00"),
        "idempotency_key": "k",
        "job": "tests.noop",
        "queue": "default",
        "fire_after": at("2026-01-01 00:00:00"),
        "max_attempts": 1,
        "timeout": timedelta(seconds=5),
    }
    return {**base, **fields}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"fire_after": BC}, "fire_after"),
        ({"scheduled_for": BC}, "scheduled_for"),
        ({"start_by": BC}, "start_by"),
        ({"timeout": timedelta.max}, "timeout"),
        ({"kwargs": DEEP}, "kwargs"),
        ({"kwargs": {"a": HUGE}}, "kwargs"),
        ({"task_call": {"a": HUGE}}, "task_call"),
    ],
)
def test_create_and_bulk_create_refuse_a_run_out_of_bounds(db, fields, named):
    with pytest.raises(ValidationError) as info:
        JobRun.objects.create(**run(**fields))
    assert named in info.value.message_dict
    with pytest.raises(ValidationError) as info:
        JobRun.objects.bulk_create([JobRun(**run(**fields))])
    assert named in info.value.message_dict
    assert not JobRun.objects.exists()


def test_what_only_the_database_refuses_is_a_validation_error_naming_the_field(db):
    with pytest.raises(ValidationError) as info:
        Schedule.objects.create(**schedule(kwargs=[1, 2]))  # not an object: the domain's CHECK
    assert "kwargs" in info.value.message_dict
    assert "pgsched_schedule_kwargs_object" in str(info.value)


def test_enqueue_names_run_at_out_of_range(db):
    with pytest.raises(ValidationError) as info:
        enqueue("tests.noop", run_at=BC)
    assert "run_at" in info.value.message_dict
    assert "year 1 to 9999" in info.value.message_dict["run_at"][0]


def test_cron_preview_after_an_out_of_range_time_is_a_command_error(db):
    with pytest.raises(CommandError, match="out of range"):
        call_command("pgsched_cron", "0 * * * *", "--after", "0001-01-01T00:00:00+05:00")


def test_the_admin_answers_a_form_error_for_a_5000_digit_integer(admin_client):
    data = {
        "name": "nightly",
        "job": "tests.noop",
        "kwargs": json.dumps({"a": 1}).replace("1", "9" * 5000),
        "cron": "* * * * *",
        "interval": "",
        "anchor_0": "",
        "anchor_1": "",
        "misfire_policy": "latest",
        "catch_up_limit": "10",
        "misfire_grace": "",
        "max_attempts": "",
        "timeout": "",
        "queue": "",
    }
    response = admin_client.post(reverse("admin:pgsched_schedule_add"), data)
    assert response.status_code == 200
    assert "kwargs" in response.context["adminform"].form.errors
    assert not Schedule.objects.exists()


def nested_sql(lists: int) -> str:
    """{"a": [[...]]} with ``lists`` nested lists: ``lists + 1`` levels, the root's included."""
    return f"""('{{"a": ' || repeat('[', {lists}) || repeat(']', {lists}) || '}}')::jsonb"""


TIMES = [
    ("pgsched_schedule", "next_fire_at = '0001-06-01 BC'", "pgsched_schedule_times_range"),
    ("pgsched_schedule", "last_fire_at = '0001-06-01 BC'", "pgsched_schedule_times_range"),
    ("pgsched_schedule", "last_fire_at = 'infinity'", "pgsched_schedule_times_range"),
    ("pgsched_schedule", "created_at = '10000-01-01'", "pgsched_schedule_times_range"),
    ("pgsched_schedule", "timeout = interval '100000000 years'", "durations_range"),
    ("pgsched_schedule", "timeout = interval '8 days'", "durations_range"),
    ("pgsched_schedule", "misfire_grace = interval '367 days'", "durations_range"),
    ("pgsched_schedule", f"kwargs = {nested_sql(100)}", "kwargs_readable"),
    ("pgsched_schedule", "kwargs = ('{\"a\": ' || repeat('9', 4301) || '}')::jsonb",
     "kwargs_readable"),
    ("pgsched_schedule", "kwargs = '{\"a\": -1e4300}'::jsonb", "kwargs_readable"),
    ("pgsched_job_run", "fire_after = '0001-06-01 BC'", "pgsched_run_times_range"),
    ("pgsched_job_run", "scheduled_for = '0001-06-01 BC'", "pgsched_run_times_range"),
    ("pgsched_job_run", "start_by = '-infinity'", "pgsched_run_times_range"),
    ("pgsched_job_run", "created_at = '10000-01-01'", "pgsched_run_times_range"),
    ("pgsched_job_run", "started_at = '-infinity'", "pgsched_run_times_range"),
    ("pgsched_job_run", "finished_at = '10000-01-01'", "pgsched_run_times_range"),
    ("pgsched_job_run", "timeout = interval '8 days'", "pgsched_run_timeout_range"),
    ("pgsched_job_run", "timeout = interval '0 seconds'", "pgsched_run_timeout_range"),
    ("pgsched_job_run", "attempts = -1", "pgsched_run_attempts_range"),
    ("pgsched_job_run", "max_attempts = -1",
     "pgsched_run_(max_attempts_range|attempts_within_max)"),
    ("pgsched_job_run", f"task_call = {nested_sql(3000)}", "pgsched_run_json_readable"),
    ("pgsched_job_run", "timeout = interval '100000000 years'", "pgsched_run_timeout_range"),
    ("pgsched_job_run", f"kwargs = {nested_sql(3000)}", "pgsched_run_json_readable"),
    ("pgsched_job_run", "kwargs = ('{\"a\": ' || repeat('9', 5001) || '}')::jsonb",
     "pgsched_run_json_readable"),
    ("pgsched_job_run", "return_value = ('[' || repeat('9', 5001) || ']')::jsonb",
     "pgsched_run_json_readable"),
]  # fmt: skip


@pytest.mark.parametrize(("table", "assignment", "constraint"), TIMES)
def test_the_database_refuses_every_value_out_of_bounds(db, table, assignment, constraint):
    Schedule.objects.create(**schedule())
    enqueue("tests.noop")
    if assignment.startswith("scheduled_for = "):  # the run's new month, so the CHECK decides
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT pgsched_ensure_months(ARRAY[{assignment.split(' = ', 1)[1]}]"
                "::timestamptz[])"
            )
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {table} SET {assignment}")


def test_no_check_of_the_run_table_repeats_another(db):
    """Each CHECK costs every statement that writes a run (prepared per statement, evaluated
    per row), so none repeats a bound another holds: not Django's ``attempts >= 0`` nor
    ``max_attempts >= 0`` of a PositiveSmallIntegerField, nor a ``timeout >= 1 s`` beside
    pgsched_run_timeout_range."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint"
            " WHERE conrelid = 'pgsched_job_run'::regclass AND contype = 'c' ORDER BY conname"
        )
        names = [name for (name,) in cursor.fetchall()]
    assert not {
        "pgsched_job_run_attempts_check",
        "pgsched_job_run_max_attempts_check",
        "pgsched_run_timeout_positive",
    } & set(names)
    # a bound on one column is its domain's (domains.sql): the table keeps only the
    # CHECKs that relate two columns, and the partition key's own bounds
    assert names == [
        "pgsched_run_attempts_within_max",
        "pgsched_run_lease_iff_running",
        "pgsched_run_scheduled_for_whole_second",
        "pgsched_run_terminal_has_finished_at",
        "pgsched_run_times_range",
    ], names


def test_a_bound_on_one_column_is_checked_only_where_the_column_is_written(db):
    """A claim or an end sets no payload, so it never checks the payloads' bounds again.

    A domain constraint is checked when a value is coerced to the domain: an INSERT,
    or an UPDATE that sets the column. A row whose payload broke the bound (written
    with it dropped, then the bound put back NOT VALID) can still have its other
    columns updated; setting the payload again (a jsonb value, coerced to the domain)
    is refused.
    """
    run = enqueue("tests.noop", kwargs={"n": 1})
    with connection.cursor() as cursor:
        cursor.execute("ALTER DOMAIN pgsched_run_kwargs DROP CONSTRAINT pgsched_run_json_readable")
        deep = nested_sql(3000)
        cursor.execute(f"UPDATE pgsched_job_run SET kwargs = {deep} WHERE id = %s", [run.pk])
        cursor.execute(
            "ALTER DOMAIN pgsched_run_kwargs ADD CONSTRAINT pgsched_run_json_readable"
            " CHECK (VALUE IS NULL OR NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}'))"
            " NOT VALID"
        )
        cursor.execute(
            "UPDATE pgsched_job_run SET priority = 5, note = 'x' WHERE id = %s", [run.pk]
        )
        assert cursor.rowcount == 1
        with pytest.raises(IntegrityError, match="pgsched_run_json_readable"), transaction.atomic():
            cursor.execute(
                "UPDATE pgsched_job_run SET kwargs = kwargs::jsonb WHERE id = %s", [run.pk]
            )


def test_a_run_at_the_bounds_of_time_is_accepted(db):
    """Every time of a run may be year 1 or 9999 in UTC, the CHECK's bounds themselves."""
    enqueue("tests.noop")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pgsched_job_run SET created_at = '0001-01-01 00:00:00+00',"
            " start_by = '9999-12-31 23:59:59.999999+00',"
            " finished_at = '9999-12-31 23:59:59.999999+00', timeout = interval '7 days'"
        )
        assert cursor.rowcount == 1


def test_no_check_or_trigger_condition_calls_a_sql_function(db):
    """PostgreSQL prepares a table's CHECKs and its triggers' WHEN clauses again at every
    statement that writes it, inlining a SQL function there by parsing its body anew:
    preparing the bounds' CHECKs took 14 % of the executor's server CPU in a burst when they
    called pgsched_time_ok and its kin; they spell their bounds out instead."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT coalesce(k.conrelid, t.tgrelid)::regclass::text,
                   coalesce(k.conname, t.tgname), p.proname
              FROM pg_depend d
              JOIN pg_proc p ON p.oid = d.refobjid AND d.refclassid = 'pg_proc'::regclass
              JOIN pg_language l ON l.oid = p.prolang AND l.lanname = 'sql'
              LEFT JOIN pg_constraint k
                ON d.classid = 'pg_constraint'::regclass AND k.oid = d.objid
              LEFT JOIN pg_trigger t ON d.classid = 'pg_trigger'::regclass AND t.oid = d.objid
             WHERE coalesce(k.conrelid, t.tgrelid)::regclass::text LIKE 'pgsched%%'
                -- and the domains' CHECKs: planned once per session, yet kept
                -- to the same rule
                OR k.contypid::regtype::text LIKE 'pgsched%%'
            """
        )
        assert cursor.fetchall() == []


def test_the_bounds_themselves_are_accepted(db):
    s = Schedule.objects.create(
        **schedule(
            timeout=timedelta(days=7),
            misfire_grace=timedelta(days=366),
            last_fire_at=datetime(1, 1, 1, tzinfo=UTC),
            kwargs={"a": 10**4299, "b": -(10**4299)},
        )
    )
    nested: dict = {"a": []}
    inner = nested["a"]
    for _ in range(98):  # the root and 99 lists: 100 levels, the bound
        inner.append([])
        inner = inner[0]
    s.kwargs = nested
    s.save()
    with connection.cursor() as cursor:  # and the database agrees: 100 levels are readable
        cursor.execute(
            f"SELECT pgsched_json_ok({nested_sql(99)}), pgsched_json_ok({nested_sql(100)})"
        )
        assert cursor.fetchone() == (True, False)
    inner.append([])  # 101 levels
    with pytest.raises(ValidationError, match="nested deeper than 100"):
        Schedule(**schedule(name="y", kwargs=nested)).save()
    inner.pop()
    s.refresh_from_db()
    assert s.kwargs == nested and s.last_fire_at == datetime(1, 1, 1, tzinfo=UTC)


def test_backfill_from_an_out_of_range_time_is_a_command_error(db):
    Schedule.objects.create(**schedule(name="bf"))
    with pytest.raises(CommandError, match="year 1 to 9999"):
        call_command(
            "pgsched_backfill", "bf", "--start", "0001-01-01T00:00:00+05:00",
            "--end", "2026-01-01T00:00:00+00:00", "--dry-run",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("make", "field", "value"),
    [
        (lambda: Schedule.objects.create(**schedule(tenant="a\tb")), "tenant", "'a\\tb'"),
        (lambda: Schedule.objects.create(**schedule(catch_up_limit=0)), "catch_up_limit", "0"),
        (lambda: JobRun.objects.create(**run(priority=500)), "priority", "500"),
        (lambda: JobRun.objects.create(**run(max_attempts=9)), "max_attempts", "9"),
    ],
)
def test_every_check_the_database_answers_a_save_with_names_field_and_value(db, make, field, value):
    with pytest.raises(ValidationError) as info:
        make()
    assert field in info.value.message_dict, info.value
    assert f"got {value}" in info.value.message_dict[field][0], info.value.message_dict[field]


def test_a_unique_violation_stays_an_integrity_error(db):
    JobRun.objects.create(**run())
    with pytest.raises(IntegrityError, match="pgsched_run_idempotency_key"), transaction.atomic():
        JobRun.objects.create(**run())
