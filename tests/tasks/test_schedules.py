"""Schedules of django.tasks' tasks: run here when the backend is ours, handed over otherwise."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from django_pgsched import api
from django_pgsched.admin.forms import job_choices
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt, JobRun, RunStatus, Schedule
from django_pgsched.registry import get_job
from django_pgsched.tasks import compat
from tests.testapp import tasks
from tests.testapp.models import Witness

from .conftest import db_now


def schedule_of(task_path: str, **fields: Any) -> Schedule:
    schedule = Schedule(
        name=f"s-{uuid.uuid4().hex[:8]}", job=f"task:{task_path}", cron="* * * * * *", **fields
    )
    schedule.full_clean()
    schedule.save()
    return schedule


def fire(schedule: Schedule) -> JobRun:
    """Plan the schedule's next occurrence and run it (executor inline)."""
    from django_pgsched.engine.planner import Planner

    due = schedule.next_fire_at
    Planner().run_once(now=due)
    run = JobRun.objects.get(schedule=schedule, scheduled_for=due)
    Executor(concurrency=1, inline=True).run_once(now=due + timedelta(seconds=1))
    run.refresh_from_db()
    return run


def test_the_admin_chooser_and_the_registry_list_tasks_beside_jobs(db: None) -> None:
    names = [value for value, _ in job_choices()]
    assert "tests.noop" in names  # a job
    assert "task:tests.testapp.tasks.add" in names  # a task
    label = dict(job_choices())["task:tests.testapp.tasks.table_report"]
    assert "task" in label and "table" in label
    spec = get_job("task:tests.testapp.tasks.send_email")
    assert spec is not None and spec.queue == "emails"  # ours: the task's queue
    foreign = get_job("task:tests.testapp.tasks.immediate_no_key")
    assert foreign is not None and foreign.queue is None  # handed over from the default queue


def test_a_schedule_cannot_name_an_unknown_task(db: None) -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="unknown job"):
        schedule_of("tests.testapp.tasks.nope")


def test_a_schedule_of_our_task_runs_it_with_the_schedules_kwargs(db: None) -> None:
    schedule = schedule_of("tests.testapp.tasks.with_context", kwargs={"label": "cron"})
    run = fire(schedule)
    assert run.status == RunStatus.SUCCEEDED
    assert run.return_value["label"] == "cron" and run.return_value["attempt"] == 1
    (seen,) = tasks.SEEN
    assert seen["context"].idempotency_key == run.idempotency_key
    assert seen["context"].schedule_name == schedule.name
    result = tasks.with_context.get_result(str(run.pk))
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.kwargs == {"label": "cron"} and result.args == []


def test_an_occurrence_of_another_backends_task_is_enqueued_there_with_its_key(db: None) -> None:
    schedule = schedule_of("tests.testapp.tasks.immediate_report", kwargs={"day": "mon"})
    run = fire(schedule)
    assert run.status == "succeeded"
    (seen,) = [s for s in tasks.SEEN if s.get("task") == "immediate_report"]
    assert seen == {"task": "immediate_report", "key": run.idempotency_key, "day": "mon"}
    assert run.return_value["forwarded_to"] == "immediate"
    assert run.queue == "default"  # the hand-over runs on the scheduler's default queue


def test_the_key_is_passed_only_to_a_function_that_takes_it(db: None) -> None:
    run = fire(schedule_of("tests.testapp.tasks.immediate_no_key", kwargs={"day": "tue"}))
    assert run.status == "succeeded"
    assert {"task": "immediate_no_key", "day": "tue"} in tasks.SEEN


def test_dummy_backend_gets_one_result_per_occurrence(db: None) -> None:
    backend = compat.task_backends["dummy"]
    backend.clear()
    run = fire(schedule_of("tests.testapp.tasks.dummy_report", kwargs={"day": "wed"}))
    (result,) = backend.results
    assert result.kwargs == {"day": "wed", "idempotency_key": run.idempotency_key}
    assert run.return_value == {"forwarded_to": "dummy", "result_id": result.id}


def test_a_second_attempt_after_a_recorded_hand_over_does_not_enqueue_again(db: None) -> None:
    run = fire(schedule_of("tests.testapp.tasks.table_report", kwargs={"day": "thu"}))
    assert Witness.objects.filter(worker="table").count() == 1
    # as if the replica died after the hand-over committed, before its outcome did:
    # the reaper makes the run claimable again
    JobRun.objects.filter(pk=run.pk).update(
        status="retrying", finished_at=None, max_attempts=3, fire_after=db_now()
    )
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempts == 2
    assert Witness.objects.filter(worker="table").count() == 1  # still one enqueue


def test_a_hand_over_whose_lease_was_lost_is_rolled_back_with_the_enqueue(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_pgsched.engine import slots

    schedule = schedule_of("tests.testapp.tasks.table_report", kwargs={"day": "fri"})
    from django_pgsched.engine.planner import Planner

    Planner().run_once(now=schedule.next_fire_at)
    run = JobRun.objects.get(schedule=schedule, scheduled_for=schedule.next_fire_at)
    original = slots.get_job

    def steal_the_lease(name: str) -> Any:
        # between the claim and the hand-over, the lease moves to another claimant
        JobRun.objects.filter(pk=run.pk).update(claimed_by=uuid.uuid4())
        return original(name)

    from tests.testapp.backends import TableBackend

    TableBackend.calls.clear()
    monkeypatch.setattr(slots, "get_job", steal_the_lease)
    Executor(concurrency=1, inline=True).run_once(now=schedule.next_fire_at)
    assert TableBackend.calls == [{"day": "fri", "idempotency_key": run.idempotency_key}]
    assert not Witness.objects.filter(worker="table").exists()  # the enqueue rolled back
    run.refresh_from_db()
    assert run.return_value is None and run.status == "running"  # the thief's lease stands
    (attempt,) = Attempt.objects.filter(job_run=run) or [None]
    assert attempt is None  # this attempt's outcome was refused too (fenced on its token)


def test_retry_of_a_task_run_keeps_its_call(db: None) -> None:
    result = tasks.fail.using(priority=0).enqueue("again")
    JobRun.objects.filter(pk=result.id).update(
        status="failed", finished_at=db_now(), max_attempts=1
    )
    run = JobRun.objects.get(pk=result.id)
    new, created = api.retry_run(run)
    assert created and new.task_call["args"] == ["again"]
    assert new.task_call["backend"] == "default"
    Executor(concurrency=1, inline=True).run_once()
    (attempt,) = Attempt.objects.filter(job_run=new)
    assert attempt.error_class == "builtins.ValueError" and "again" in attempt.error


def test_a_schedules_run_of_a_task_has_the_tasks_priority(db: None) -> None:
    run = fire(schedule_of("tests.testapp.tasks.urgent"))
    assert run.priority == 7 and run.status == "succeeded" and run.return_value == "urgent"
    job_run = fire(Schedule.objects.create(name="a-job", job="tests.noop", cron="* * * * * *"))
    assert job_run.priority == 0
