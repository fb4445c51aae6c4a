"""The planner's usual pass: one transaction in two round trips (pipeline mode).

A replica's planner runs in autocommit, so its pass sends BEGIN with the claim,
and the apply with the COMMIT. These tests run outside a test transaction
(``transactional_db``) so that the planner takes that path, and check that a
failure anywhere before the commit leaves nothing behind.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_pgsched.engine import db as db_module
from django_pgsched.engine import failpoints
from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule, ScheduleStatus
from tests.conftest import at

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


def schedules(n: int) -> list[Schedule]:
    return [
        Schedule.objects.create(name=f"s{i}", job="tests.noop", cron="* * * * * *", next_fire_at=T)
        for i in range(n)
    ]


def test_a_pass_outside_a_transaction_is_pipelined_and_commits(transactional_db):
    made = schedules(3)
    assert db_module.can_pipeline(connection)
    result = Planner().run_once(now=T)
    assert (result.schedules, result.created) == (3, 18)  # six seconds each (lookahead 5 s)
    assert JobRun.objects.count() == 18
    for schedule in made:
        schedule.refresh_from_db()
        assert schedule.next_fire_at == at("2026-03-01 12:00:06")
    assert connection.connection.info.transaction_status == 0  # idle: committed, not left open


@pytest.fixture
def armed(monkeypatch):
    def arm(spec: str) -> None:
        monkeypatch.setenv(failpoints.ENV, spec)
        failpoints.reload()

    yield arm
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints.reload()


def test_a_failure_before_the_commit_leaves_nothing(transactional_db, armed):
    (schedule,) = schedules(1)
    armed("planner.before_commit=raise")
    with pytest.raises(failpoints.FailpointError):
        Planner().run_once(now=T)
    armed("")
    # the apply had been sent: the rollback undid it, and the connection is usable
    assert JobRun.objects.count() == 0
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T and schedule.last_fire_at is None
    assert connection.connection.info.transaction_status == 0
    assert Planner().run_once(now=T).created == 6


def test_a_failed_apply_is_planned_again_row_by_row(transactional_db):
    good, bad = schedules(2)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION pgsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.schedule_id = {int(bad.pk)} THEN
                    RAISE EXCEPTION 'refused for the test';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER pgsched_test_refuse BEFORE INSERT ON pgsched_job_run
                FOR EACH ROW EXECUTE FUNCTION pgsched_test_refuse();
            """
        )
    try:
        result = Planner().run_once(now=T)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER pgsched_test_refuse ON pgsched_job_run")
            cursor.execute("DROP FUNCTION pgsched_test_refuse()")
    assert result.broken == (bad.pk,) and result.created == 6
    bad.refresh_from_db()
    assert bad.status == ScheduleStatus.BROKEN and "refused for the test" in bad.last_error
    assert JobRun.objects.filter(schedule=good).count() == 6
    assert not JobRun.objects.filter(schedule=bad).exists()


def test_between_claim_and_commit_the_server_sees_the_pass_idle_in_transaction(
    transactional_db, other_connection, armed
):
    # idle_in_transaction_session_timeout (which ends the session of a replica that froze
    # holding its claim) is armed only while the server reports the session idle in a
    # transaction; in pipeline mode that takes a sync after the claim, not a mere flush
    import threading

    schedules(2)
    armed("planner.after_claim=sleep(1.5)")

    def plan() -> None:
        try:
            Planner().run_once(now=T)
        finally:
            connection.close()

    worker = threading.Thread(target=plan)
    worker.start()
    states = set()
    while worker.is_alive():
        for (state,) in other_connection.execute(
            "SELECT state FROM pg_stat_activity WHERE application_name LIKE 'pgsched planner %'"
        ).fetchall():
            states.add(state)
        other_connection.rollback()
        worker.join(0.05)
    assert "idle in transaction" in states, states
    assert JobRun.objects.count() == 12
