"""django_pgsched.testing.run_due: the public way to run due jobs in a user's tests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_pgsched import enqueue
from django_pgsched.models import Attempt, JobRun, Schedule
from django_pgsched.testing import TooManyRuns, run_due
from tests.testapp import jobs


def test_run_due_runs_an_enqueued_run_and_records_it(db):
    run = enqueue("tests.noop", kwargs={"x": 1})
    result = run_due()
    run.refresh_from_db()
    assert (result.ran, result.succeeded, result.failed) == (1, 1, 0)
    assert result.run_ids == (run.pk,)
    assert jobs.CALLS == [{"job": "noop", "x": 1}]
    assert run.status == "succeeded" and run.attempts == 1
    assert Attempt.objects.get(job_run=run).status == "succeeded"


def test_run_due_runs_every_due_run_not_just_one_pass(db):
    runs = [enqueue("tests.noop", kwargs={"i": i}) for i in range(10)]  # more than the slots
    result = run_due()
    assert result.succeeded == 10
    assert set(JobRun.objects.values_list("status", flat=True)) == {"succeeded"}
    assert set(result.run_ids) == {r.pk for r in runs}


def test_run_due_leaves_runs_not_yet_due(db):
    later = enqueue("tests.noop")  # due now
    future = enqueue("tests.noop", run_at=later.fire_after + timedelta(hours=1))
    assert run_due().run_ids == (later.pk,)
    future.refresh_from_db()
    assert future.status == "pending"
    assert run_due(now=future.fire_after).run_ids == (future.pk,)


def test_run_due_plans_the_due_schedules_at_now(db):
    schedule = Schedule.objects.create(name="greet", job="tests.noop", cron="0 0 2 * * *")
    two_am = schedule.next_fire_at
    assert run_due().planned == 0  # not 02:00 yet
    result = run_due(now=two_am)
    assert result.planned == 1 and result.succeeded == 1
    run = JobRun.objects.get(schedule=schedule)
    assert run.scheduled_for == two_am and run.status == "succeeded"


def test_a_failed_attempt_is_retried_at_a_later_now(db):
    run = enqueue("tests.fail")  # max_attempts=2
    first = run_due()
    run.refresh_from_db()
    assert (first.ran, first.failed) == (1, 1) and run.status == "retrying"
    second = run_due(now=run.fire_after)
    run.refresh_from_db()
    assert second.attempts == ((run.pk, "failed"),) and run.status == "failed"


def test_run_due_runs_what_a_job_enqueues_for_now(db):
    first = enqueue("tests.chain", kwargs={"left": 2})
    result = run_due()
    assert result.succeeded == 3 and result.run_ids[0] == first.pk


def test_run_due_stops_a_job_that_keeps_enqueueing(db):
    enqueue("tests.chain", kwargs={"left": 100})
    with pytest.raises(TooManyRuns):
        run_due(max_runs=5)


def test_run_due_can_leave_out_the_planner_and_other_queues(db):
    Schedule.objects.create(name="s", job="tests.noop", interval=timedelta(seconds=1))
    elsewhere = enqueue("tests.noop", queue="other")
    here = enqueue("tests.noop")
    schedule_time = Schedule.objects.get(name="s").next_fire_at
    # the later of the two: on a loaded machine the enqueue may come after the schedule's time
    now = max(schedule_time, here.fire_after)
    result = run_due(now=now, plan=False, queues=["default"])
    assert result.planned == 0 and result.run_ids == (here.pk,)
    elsewhere.refresh_from_db()
    assert elsewhere.status == "pending"
    assert not JobRun.objects.filter(schedule__name="s").exists()
