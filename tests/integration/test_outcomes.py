"""What a Python job can say besides "done" or an exception: Defer, Fail, LeaseLost, detail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from django_pgsched import Defer, Fail, LeaseLost, enqueue, job
from django_pgsched.context import RunContext
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt, JobRun


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


@job(name="tests.outcomes.defer", takes_context=True, max_attempts=2)
def defer(context: RunContext, seconds: float = 30, returned: bool = False, **kwargs: Any) -> Any:
    context.detail = {"asked": seconds}
    if returned:
        return Defer(delay=seconds, reason="returned")
    raise Defer(delay=timedelta(seconds=seconds), reason="raised")


@job(name="tests.outcomes.until", takes_context=True)
def until(context: RunContext, at: str, **kwargs: Any) -> None:
    raise Defer(datetime.fromisoformat(at))


@job(name="tests.outcomes.held", takes_context=True)
def held(context: RunContext, **kwargs: Any) -> None:
    raise Defer(delay=60, attempted=False, reason="held back: nothing done")


@job(name="tests.outcomes.fail", takes_context=True, max_attempts=3)
def fail(context: RunContext, retry: bool = True, wait: float | None = None, **kwargs: Any) -> None:
    raise Fail("no", retry=retry, not_before=wait)


@job(name="tests.outcomes.ensure", takes_context=True)
def ensure(context: RunContext, needed: float = 0, **kwargs: Any) -> None:
    context.ensure_lease(needed)
    context.detail = {"ensured": True}


def statuses(run: JobRun) -> list[tuple[int, str]]:
    return list(
        Attempt.objects.filter(job_run=run).order_by("number").values_list("number", "status")
    )


def test_a_raised_or_returned_defer_uses_up_no_retry(db):
    for returned in (False, True):
        run = enqueue("tests.outcomes.defer", kwargs={"seconds": 30, "returned": returned})
        Executor(concurrency=1, inline=True).run_once()
        run.refresh_from_db()
        assert run.status == "retrying" and run.attempts == 1 and run.max_attempts == 3
        assert 25 < (run.fire_after - db_now()).total_seconds() <= 30
        (attempt,) = Attempt.objects.filter(job_run=run)
        assert attempt.status == "deferred" and attempt.detail == {"asked": 30}
        assert attempt.error == ("returned" if returned else "raised")


def test_a_defer_is_capped_by_defer_max(db, settings):
    settings.PGSCHED = {"DEFER_MAX": 60}
    far = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    run = enqueue("tests.outcomes.until", kwargs={"at": far})
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert 50 < (run.fire_after - db_now()).total_seconds() <= 60


def test_a_defer_that_did_nothing_gives_its_attempt_back(db):
    run = enqueue("tests.outcomes.held")
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "pending" and run.attempts == 0 and statuses(run) == []
    assert run.note == "held back: nothing done" and run.started_at is None


def test_fail_without_retry_and_not_before(db):
    run = enqueue("tests.outcomes.fail", kwargs={"retry": False})
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "failed" and run.attempts == 1  # 2 attempts were left
    later = enqueue("tests.outcomes.fail", kwargs={"wait": 600})
    Executor(concurrency=1, inline=True).run_once()
    later.refresh_from_db()
    assert later.status == "retrying"
    assert 590 < (later.fire_after - db_now()).total_seconds() <= 600  # not the 0.2 s backoff


def test_ensure_lease_renews_and_refuses_what_it_cannot_promise(db):
    run = enqueue("tests.outcomes.ensure")
    Executor(concurrency=1, inline=True).run_once()
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert Attempt.objects.get(job_run=run).detail == {"ensured": True}
    # a lease of 2 × 5 min cannot be trusted for a day: the attempt is given back
    greedy = enqueue("tests.outcomes.ensure", kwargs={"needed": 86400})
    Executor(concurrency=1, inline=True).run_once()
    greedy.refresh_from_db()
    assert greedy.status == "pending" and greedy.attempts == 0
    assert "can be trusted" in greedy.note


def test_ensure_lease_raises_when_the_run_was_taken_back(db):
    from django_pgsched.context import RunContext as Context

    seen: list[BaseException] = []

    @job(name="tests.outcomes.taken", takes_context=True)
    def taken(context: Context, **kwargs: Any) -> None:
        JobRun.objects.filter(pk=context.job_run_id).update(
            status="retrying", claimed_by=None, claim_expires_at=None
        )
        try:
            context.ensure_lease()
        except LeaseLost as exc:
            seen.append(exc)
            raise

    run = enqueue("tests.outcomes.taken")
    executor = Executor(concurrency=1, inline=True)
    executor.run_once()
    run.refresh_from_db()
    assert seen and run.status == "retrying" and statuses(run) == []
    assert executor.in_flight == {} or all(
        c.state.value == "abandoned" for c in executor.in_flight.values()
    )
