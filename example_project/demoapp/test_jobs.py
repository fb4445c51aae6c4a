"""Tests for the demo's jobs: the patterns of docs/how-to/test-jobs.md, run for real.

DATABASE_URL=postgresql://... .venv/bin/pytest example_project -p no:cacheprovider
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_pgsched import RunContext, enqueue
from django_pgsched.models import Attempt, JobRun, Schedule
from django_pgsched.testing import run_due

from .jobs import greet, slow_report


def test_call_the_function_directly(caplog: pytest.LogCaptureFixture) -> None:
    greet(name="tests")
    assert "hello, tests" in caplog.text


def test_call_a_context_job_with_a_context_of_your_own() -> None:
    context = RunContext(
        job_run_id=1,
        job="demo.slow_report",
        schedule_name="slow-report",
        scheduled_for=datetime(2026, 3, 1, 12, tzinfo=UTC),
        attempt=1,
        max_attempts=3,
        idempotency_key="test-key",
        worker="test",
    )
    context.cancel("the test says stop")
    slow_report(context, seconds=30)  # returns at once: the context is cancelled
    assert context.cancel_reason == "the test says stop"


@pytest.mark.django_db
def test_enqueue_and_run_due() -> None:
    run = enqueue("demo.greet", kwargs={"name": "tests"})
    result = run_due()  # claims every due run, runs its job here, records the outcome
    run.refresh_from_db()
    assert result.succeeded == 1 and result.run_ids == (run.pk,)
    assert run.status == "succeeded" and run.attempts == 1
    assert Attempt.objects.get(job_run=run).status == "succeeded"


@pytest.mark.django_db
def test_travel_in_time() -> None:
    schedule = Schedule.objects.create(name="greet", job="demo.greet", cron="0 0 2 * * *")
    two_am = schedule.next_fire_at  # the first 02:00:00 UTC after the database's now()

    result = run_due(now=two_am)  # plans the schedule's 02:00 run, then runs it

    assert result.planned == 1 and result.succeeded == 1
    run = JobRun.objects.get(schedule=schedule)
    assert run.scheduled_for == two_am and run.status == "succeeded"

    # three days later: the default policy ("latest") runs the newest missed occurrence
    later = run_due(now=two_am + timedelta(days=3, minutes=5))
    schedule.refresh_from_db()
    assert later.planned == 1 and schedule.skipped_occurrences == 2
