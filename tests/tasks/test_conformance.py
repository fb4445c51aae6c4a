"""django.tasks' documented behaviour, against PgschedBackend and the framework's ImmediateBackend.

Written from the framework's documentation (the topic guide "Django's Tasks
framework" and the reference "Tasks"), not from our internals: each test states
a documented promise and checks it on both backends, branching only on the
backend's feature flags where the documentation makes the behaviour depend on
them.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction

from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun
from django_pgsched.tasks import PgschedBackend, compat
from tests.testapp import tasks
from tests.testapp.models import Witness

from .conftest import Driver, db_now

Status = compat.TaskResultStatus


# -- feature flags ---------------------------------------------------------------------------


def test_the_flags_are_booleans_and_ours_say_what_we_support(driver: Driver) -> None:
    backend = driver.backend
    flags = ("supports_defer", "supports_async_task", "supports_get_result", "supports_priority")
    assert all(isinstance(getattr(backend, flag), bool) for flag in flags)
    if driver.ours:
        assert isinstance(backend, PgschedBackend)
        assert backend.supports_defer and backend.supports_async_task
        assert backend.supports_get_result and backend.supports_priority


def test_supports_defer_run_after_is_honoured_or_refused(driver: Driver) -> None:
    when = db_now() + timedelta(minutes=10)
    if not driver.backend.supports_defer:
        with pytest.raises(compat.InvalidTask):
            driver.task(tasks.add, run_after=when)
        return
    deferred = driver.task(tasks.add, run_after=when)
    assert deferred.run_after == when
    result = deferred.enqueue(1, 2)
    driver.run()
    result.refresh()
    assert result.status == Status.READY  # not before run_after
    driver.run(later=timedelta(minutes=11))
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value == 3
    assert result.started_at >= when
    assert result.task.run_after == when


def test_run_after_must_be_aware(driver: Driver) -> None:
    if not driver.backend.supports_defer:
        pytest.skip("run_after is refused outright")
    with pytest.raises(compat.InvalidTask, match="aware"):
        driver.task(tasks.add, run_after=datetime(2030, 1, 1))


def test_supports_async_task_coroutines_run(driver: Driver) -> None:
    assert driver.backend.supports_async_task  # both do
    result = driver.task(tasks.async_add).enqueue(20, 22)
    result = driver.finish(result)
    assert result.status == Status.SUCCESSFUL and result.return_value == 42


def test_async_task_orm_calls_run_on_the_executing_thread(driver: Driver) -> None:
    result = driver.finish(driver.task(tasks.async_witness).enqueue("from a coroutine"))
    assert result.status == Status.SUCCESSFUL
    # thread-sensitive sync_to_async: the ORM ran on the thread that executed the task
    # (here the test's), with its connection: the row is in this test's transaction
    assert result.return_value["orm_thread"] == threading.get_ident()
    assert Witness.objects.filter(pk=result.return_value["witness"]).exists()


def test_supports_get_result_or_raises_not_implemented(driver: Driver) -> None:
    result = driver.task(tasks.add).enqueue(1, 1)
    if not driver.backend.supports_get_result:
        with pytest.raises(NotImplementedError):
            driver.backend.get_result(result.id)
        return
    driver.run()
    again = driver.backend.get_result(result.id)
    assert again.id == result.id and again is not result
    assert again.status == Status.SUCCESSFUL and again.return_value == 2


@pytest.mark.django_db(transaction=True)
def test_get_result_from_another_thread_after_commit() -> None:
    driver = Driver("pgsched", "default")
    result = tasks.add.enqueue(4, 5)
    driver.run()
    seen: dict[str, Any] = {}

    def read() -> None:  # another thread: its own connection
        from django.db import connections

        try:
            seen["result"] = tasks.add.get_result(result.id)
        except Exception as exc:
            seen["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert seen["result"].status == Status.SUCCESSFUL and seen["result"].return_value == 9


def test_supports_priority_or_refuses_it(driver: Driver) -> None:
    if not driver.backend.supports_priority:
        with pytest.raises(compat.InvalidTask, match="priority"):
            driver.task(tasks.add, priority=10)
        return
    result = driver.task(tasks.add, priority=10).enqueue(1, 2)
    assert result.task.priority == 10
    assert driver.finish(result).return_value == 3
    assert driver.backend.get_result(result.id).task.priority == 10 if driver.ours else True


def test_ours_runs_higher_priorities_first(ours: Driver) -> None:
    """ "Larger numbers are higher priority, and will be run sooner": among due tasks."""
    labels = [("low", -50), ("default", 0), ("high", 50), ("highest", 100), ("also low", -50)]
    for label, priority in labels:
        tasks.with_context.using(priority=priority).enqueue(label=label)
    executor = Executor(concurrency=1, inline=True)  # one task per pass: the claim order shows
    while executor.run_once().claimed:
        pass
    assert [s["label"] for s in tasks.SEEN] == ["highest", "high", "default", "low", "also low"]


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_priority_out_of_range_is_invalid(driver: Driver, priority: Any) -> None:
    with pytest.raises(compat.InvalidTask):
        driver.task(tasks.add, priority=priority)


# -- statuses and results ----------------------------------------------------------------


def test_success_ready_then_running_then_successful(driver: Driver) -> None:
    result = driver.task(tasks.with_context).enqueue(label="x")
    if driver.ours:
        assert result.status == Status.READY and not result.is_finished
        assert result.started_at is None and result.finished_at is None
        with pytest.raises(ValueError, match="not finished"):
            result.return_value  # noqa: B018
    result = driver.finish(result)
    # inside, the task saw itself RUNNING, at attempt 1, under the id enqueue() returned
    inside = result.return_value
    assert inside == {"attempt": 1, "id": result.id, "status": "RUNNING", "attempts": 1,
                      "label": "x"}  # fmt: skip
    assert result.status == Status.SUCCESSFUL and result.is_finished
    assert result.errors == [] and result.attempts == 1 and len(result.worker_ids) == 1
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at


def test_failure_is_failed_with_the_exception_class_and_traceback(driver: Driver) -> None:
    result = driver.finish(driver.task(tasks.fail).enqueue("it broke"))
    assert result.status == Status.FAILED and result.is_finished
    assert result.errors, result
    assert all(e.exception_class is ValueError for e in result.errors)
    assert "it broke" in result.errors[-1].traceback
    assert result.errors[-1].traceback.rstrip().endswith("ValueError: it broke")
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018
    assert result.finished_at is not None
    assert result.attempts == len(result.worker_ids) >= 1
    if driver.ours:  # retried up to the scheduler's attempts, each error kept
        assert result.attempts == len(result.errors) == 3


def test_a_failed_attempt_with_attempts_left_is_ready_again(ours: Driver) -> None:
    result = tasks.flaky.enqueue(succeed_on=2)
    ours.run()
    result.refresh()
    assert result.status == Status.READY  # "ready to be executed again"
    assert len(result.errors) == 1 and result.errors[0].exception_class is RuntimeError
    assert result.attempts == 1
    result = ours.finish(result)
    assert result.status == Status.SUCCESSFUL and result.return_value == 2
    assert result.attempts == 2 and len(result.errors) == 1


def test_return_value_not_json_fails_the_task(driver: Driver) -> None:
    result = driver.finish(driver.task(tasks.returns_datetime).enqueue())
    assert result.status == Status.FAILED
    assert result.errors[0].exception_class is TypeError


def test_none_is_a_return_value(driver: Driver) -> None:
    result = driver.finish(driver.task(tasks.noop).enqueue())
    assert result.status == Status.SUCCESSFUL and result.return_value is None


# -- arguments ------------------------------------------------------------------------------


def test_arguments_round_trip_through_json(driver: Driver) -> None:
    result = driver.task(tasks.echo).enqueue(1, (2, 3), "x", flag=True, nested={"a": [1.5]})
    assert result.args == [1, [2, 3], "x"]  # the tuple becomes a list, as documented
    assert result.kwargs == {"flag": True, "nested": {"a": [1.5]}}
    result = driver.finish(result)
    assert result.return_value == {
        "args": [1, [2, 3], "x"],
        "kwargs": {"flag": True, "nested": {"a": [1.5]}},
    }


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((datetime.now(UTC),), {}), ((), {"when": datetime.now(UTC)}), ((object(),), {})],
)
def test_arguments_that_are_not_json_raise_type_error(
    driver: Driver, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        driver.task(tasks.echo).enqueue(*args, **kwargs)
    if driver.ours:
        assert not JobRun.objects.exists()  # nothing was written


def test_our_refusals_name_where_the_bad_value_is(ours: Driver) -> None:
    with pytest.raises(TypeError, match=r"kwargs\.when"):
        tasks.echo.enqueue(when=datetime.now(UTC))
    with pytest.raises(ValueError, match=r"NaN.*args\[0\]"):
        tasks.echo.enqueue(float("nan"))
    with pytest.raises(ValueError, match="NUL"):
        tasks.echo.enqueue(text="a\x00b")
    with pytest.raises(TypeError, match="keys must be strings"):
        tasks.echo.enqueue({1: "int key"})
    with pytest.raises(ValueError, match="MAX_PAYLOAD_BYTES"):
        tasks.echo.enqueue("x" * 70_000)
    assert not JobRun.objects.exists()


# -- queues ----------------------------------------------------------------------------------


def test_unknown_queue_is_invalid(driver: Driver) -> None:
    with pytest.raises(compat.InvalidTask, match="Queue"):
        driver.task(tasks.add, queue_name="nowhere")


def test_queue_name_is_kept(driver: Driver) -> None:
    result = driver.task(tasks.send_email).enqueue("a@example.com")
    assert result.task.queue_name == "emails"
    result = driver.finish(result)
    assert result.task.queue_name == "emails" and result.return_value == "sent to a@example.com"
    if driver.ours:
        assert JobRun.objects.get(pk=result.id).queue == "emails"


# -- task validity ------------------------------------------------------------------------


# Task's fields without a default on Django 6.0 (6.1 gives them defaults)
TASK_FIELDS: dict[str, Any] = {"priority": 0, "queue_name": "default", "run_after": None}


def test_a_task_must_be_a_module_level_function(driver: Driver) -> None:
    def inner() -> None:
        return None

    with pytest.raises(compat.InvalidTask, match="module level"):
        compat.Task(func=inner, backend=driver.alias, **TASK_FIELDS)


def test_takes_context_needs_a_context_argument(driver: Driver) -> None:
    with pytest.raises(compat.InvalidTask, match="context"):
        compat.Task(func=tasks.add.func, backend=driver.alias, takes_context=True, **TASK_FIELDS)


# -- results by id ----------------------------------------------------------------------------


def test_get_result_of_an_unknown_id_raises_does_not_exist(driver: Driver) -> None:
    if not driver.backend.supports_get_result:
        pytest.skip("the backend does not support get_result")
    for unknown in ("999999999", "not-a-number", "", "-1", "9" * 40):
        with pytest.raises(compat.TaskResultDoesNotExist):
            driver.backend.get_result(unknown)
        with pytest.raises(compat.TaskResultDoesNotExist):
            async_to_sync(driver.backend.aget_result)(unknown)


def test_get_result_through_another_task_is_a_mismatch(ours: Driver) -> None:
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(compat.TaskResultMismatch):
        tasks.echo.get_result(result.id)
    assert tasks.add.get_result(result.id).id == result.id


def test_a_job_run_is_not_a_task_result(ours: Driver) -> None:
    from django_pgsched import enqueue

    run = enqueue("tests.noop")
    with pytest.raises(compat.TaskResultDoesNotExist):
        ours.backend.get_result(str(run.pk))


def test_ids_are_strings_shorter_than_64(driver: Driver) -> None:
    result = driver.task(tasks.add).enqueue(1, 2)
    assert isinstance(result.id, str) and 0 < len(result.id) < 64
    assert result.backend == driver.alias


# -- async API ---------------------------------------------------------------------------------


def test_aenqueue_aget_result_and_arefresh(driver: Driver) -> None:
    result = async_to_sync(driver.task(tasks.add).aenqueue)(2, 2)
    result = driver.finish(result)
    assert result.return_value == 4
    if driver.backend.supports_get_result:
        again = async_to_sync(tasks.add.using(backend=driver.alias).aget_result)(result.id)
        assert again.status == Status.SUCCESSFUL and again.return_value == 4
        async_to_sync(again.arefresh)()
        assert again.return_value == 4


# -- transactions -----------------------------------------------------------------------------


def test_enqueue_on_commit_with_a_rollback_never_runs(driver: Driver) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        transaction.on_commit(partial(driver.task(tasks.with_context).enqueue, label="r"))
        raise Rollback
    driver.run()
    assert tasks.SEEN == []
    if driver.ours:
        assert not JobRun.objects.exists()


def test_enqueue_on_commit_runs_after_the_commit(driver: Driver) -> None:
    with transaction.atomic():
        transaction.on_commit(partial(driver.task(tasks.with_context).enqueue, label="c"))
        assert tasks.SEEN == []
    # the test's own transaction is the outer one: run the on_commit callbacks as a commit
    # would (pytest-django's captureOnCommitCallbacks is not used so both drivers match)
    from django.db import connection

    callbacks = [cb for _, cb, _ in connection.run_on_commit]
    connection.run_on_commit.clear()
    for callback in callbacks:
        callback()
    driver.run()
    assert [s["label"] for s in tasks.SEEN] == ["c"]


def test_ours_enqueue_inside_a_rolled_back_transaction_never_runs(ours: Driver) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        result = tasks.with_context.enqueue(label="gone")
        assert JobRun.objects.filter(pk=result.id).exists()  # written in the transaction
        raise Rollback
    assert ours.run() == 0
    assert tasks.SEEN == [] and not JobRun.objects.exists()
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.with_context.get_result(result.id)


# -- context, signals -------------------------------------------------------------------------


def test_context_attempt_counts_from_one_across_retries(ours: Driver) -> None:
    result = ours.finish(tasks.flaky.enqueue(succeed_on=3))
    assert result.return_value == 3 and result.attempts == 3


def test_our_context_is_the_frameworks_with_the_runs_key(ours: Driver) -> None:
    from django_pgsched.tasks import PgschedTaskContext

    ours.finish(tasks.with_context.enqueue(label="k"))
    (seen,) = tasks.SEEN
    context = seen["context"]
    assert isinstance(context, compat.TaskContext) and isinstance(context, PgschedTaskContext)
    run = JobRun.objects.get(pk=context.task_result.id)
    assert context.idempotency_key == run.idempotency_key
    assert context.is_cancelled() is False


def test_signals_enqueued_started_finished(driver: Driver) -> None:
    seen: list[tuple[str, str, Any]] = []

    def on(name: str) -> Any:
        def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, task_result.id, task_result.status))

        return receiver

    receivers = {
        "enqueued": on("enqueued"),
        "started": on("started"),
        "finished": on("finished"),
    }
    compat.task_enqueued.connect(receivers["enqueued"])
    compat.task_started.connect(receivers["started"])
    compat.task_finished.connect(receivers["finished"])
    try:
        result = driver.task(tasks.add).enqueue(1, 2)
        if driver.ours:
            # the run exists once the transaction commits: the test's has not yet
            from django.db import connection

            for _, callback, _ in list(connection.run_on_commit):
                callback()
            connection.run_on_commit.clear()
        driver.finish(result)
    finally:
        compat.task_enqueued.disconnect(receivers["enqueued"])
        compat.task_started.disconnect(receivers["started"])
        compat.task_finished.disconnect(receivers["finished"])
    assert [(name, rid) for name, rid, _ in seen] == [
        ("enqueued", result.id),
        ("started", result.id),
        ("finished", result.id),
    ]
    assert seen[1][2] == Status.RUNNING and seen[2][2] == Status.SUCCESSFUL
