"""NOTIFY triggers, the listener, and the system checks."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings

from django_pgsched.engine.notifications import Listener
from django_pgsched.engine.planner import Planner
from django_pgsched.models import Schedule
from tests.conftest import at, dsn

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


@pytest.fixture
def listening(transactional_db):
    with psycopg.connect(**dsn(), autocommit=True) as conn:
        conn.execute("LISTEN pgsched_schedule")
        conn.execute("LISTEN pgsched_wait")

        def received(wait: float = 0.5) -> list[tuple[str, str]]:
            return [(n.channel, n.payload) for n in conn.notifies(timeout=wait, stop_after=50)]

        yield received


def test_creating_changing_and_pausing_notify_with_ids_only(listening):
    s = Schedule.objects.create(name="n", job="tests.noop", cron="* * * * *")
    assert listening() == [("pgsched_schedule", str(s.pk))]
    Schedule.objects.filter(pk=s.pk).update(status="paused")  # bulk update notifies too
    assert listening() == [("pgsched_schedule", str(s.pk))]
    Schedule.objects.filter(pk=s.pk).update(last_error="x")  # not a definition change
    assert listening(0.2) == []


def test_a_bulk_update_sends_one_notification(listening):
    Schedule.objects.bulk_create(
        Schedule(name=f"b{i}", job="tests.noop", cron="* * * * *", next_fire_at=T)
        for i in range(20)
    )
    listening()
    Schedule.objects.update(status="paused")
    (note,) = listening()
    assert note[0] == "pgsched_schedule" and len(note[1].split(",")) == 20


def test_the_planners_own_advance_notifies_executors_not_planners(listening):
    Schedule.objects.create(name="p", job="tests.noop", cron="* * * * * *", next_fire_at=T)
    listening()
    Planner().run_once(now=T)
    notes = listening()
    assert [channel for channel, _ in notes] == ["pgsched_wait"]  # one per batch
    assert len(notes[0][1].split(",")) == 6  # the new run ids


def test_listener_wakes_the_matching_event_and_reconnects(transactional_db):
    stop = threading.Event()
    planner_wake, executor_wake = threading.Event(), threading.Event()
    listener = Listener(
        {"pgsched_schedule": [planner_wake], "pgsched_wait": [executor_wake]}, stop=stop, poll=0.1
    )
    thread = threading.Thread(target=listener.run)
    thread.start()
    try:
        assert listener.connected.wait(5)
        planner_wake.clear()
        executor_wake.clear()
        Schedule.objects.create(name="w", job="tests.noop", cron="* * * * *")
        assert planner_wake.wait(5) and not executor_wake.is_set()
        # kill the listener's backend: it reconnects and wakes every loop to reconcile
        planner_wake.clear()
        listener.connected.clear()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'pgsched listener%%' AND datname = current_database()"
            )
        assert listener.connected.wait(15) and planner_wake.wait(5)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def ids(messages) -> set[str]:
    return {m.id for m in messages}


def test_checks_pass_for_the_test_settings():
    assert not [m for m in checks.run_checks() if m.id and m.id.startswith("pgsched")]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"USE_TZ": False}, "pgsched.E001"),
        ({"PGSCHED": {"PLANNER_BACTH": 10}}, "pgsched.E003"),
        ({"PGSCHED": {"LEASE_FACTOR": 1.0}}, "pgsched.E004"),
        ({"PGSCHED": {"SCHEDULES": {"x": {"job": "nope", "cron": "* * * * *"}}}}, "pgsched.E005"),
        ({"PGSCHED": {"IDLE_IN_TRANSACTION_TIMEOUT": timedelta(hours=1)}}, "pgsched.W001"),
        ({"PGSCHED": {"DATABASE_ALIAS": "other"}}, "pgsched.E003"),
    ],
)
def test_checks_catch_bad_configuration(overrides, expected):
    with override_settings(**overrides):
        assert expected in ids(checks.run_checks())


def test_database_check_accepts_this_server(db):
    assert not [
        m
        for m in checks.run_checks(tags=[checks.Tags.database], databases=["default"])
        if m.id and m.id.startswith("pgsched")
    ]


class ToReplica:
    def db_for_read(self, model, **hints):
        return "replica" if model._meta.app_label == "pgsched" else None

    def db_for_write(self, model, **hints):
        return None


def test_router_sending_reads_elsewhere_is_an_error():
    with override_settings(DATABASE_ROUTERS=[ToReplica()]):
        messages = checks.run_checks()
    assert "pgsched.E006" in ids(messages)


def test_the_scheduler_sessions_carry_their_timeouts(db):
    from django_pgsched.engine import db as pgsched_db

    Planner().run_once(now=T)  # opens and configures this thread's session
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),"
            " current_setting('idle_in_transaction_session_timeout'),"
            " current_setting('application_name')"
        )
        lock, statement, idle, name = cursor.fetchone()
    assert (lock, statement, idle) == ("5s", "1min", "1min")
    assert name.startswith("pgsched planner ")
    assert pgsched_db.default_worker_id() in name


def test_a_missing_or_invalid_occurrence_index_is_an_error(db):
    def database_checks() -> set[str]:
        return ids(checks.run_checks(tags=[checks.Tags.database], databases=["default"]))

    assert "pgsched.E008" not in database_checks()
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX pgsched_one_run_per_occurrence")
    assert "pgsched.E008" in database_checks()
    with connection.cursor() as cursor:  # a non-unique index under the same name is no guard
        cursor.execute(
            "CREATE INDEX pgsched_one_run_per_occurrence ON pgsched_job_run "
            "(schedule_id, scheduled_for)"
        )
    assert "pgsched.E008" in database_checks()


def test_short_retention_is_a_warning():
    with override_settings(PGSCHED={"RETENTION": timedelta(hours=1)}):
        assert "pgsched.W002" in ids(checks.run_checks())
    with override_settings(PGSCHED={"RETENTION": None}):
        assert "pgsched.W002" not in ids(checks.run_checks())
