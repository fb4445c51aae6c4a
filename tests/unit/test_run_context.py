"""RunContext's cancellation: a flag set once, its reason kept, each hook called once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from django_pgsched.context import RunContext


def context(**fields: object) -> RunContext:
    return RunContext(
        job_run_id=1,
        job="tests.noop",
        schedule_name=None,
        scheduled_for=datetime(2026, 1, 1, tzinfo=UTC),
        attempt=1,
        max_attempts=3,
        idempotency_key="k",
        worker="w",
        **fields,  # type: ignore[arg-type]
    )


def test_cancel_keeps_the_first_reason_and_calls_each_hook_once():
    ctx = context(_clock=lambda: 0.0)
    seen: list[str] = []
    ctx.on_cancel(seen.append)
    assert not ctx.is_cancelled() and ctx.cancel_reason == ""
    ctx.cancel("the lease was lost")
    ctx.cancel("the timeout passed")
    assert ctx.is_cancelled() and ctx.cancel_reason == "the lease was lost"
    assert seen == ["the lease was lost"]
    late: list[str] = []
    ctx.on_cancel(late.append)  # registered after the cancel: called at once
    assert late == ["the lease was lost"]


def test_a_cancel_from_another_thread_is_seen():
    ctx = context(_clock=lambda: 0.0)
    thread = threading.Thread(target=ctx.cancel, args=("cancelled by an operator",))
    thread.start()
    thread.join()
    assert ctx.is_cancelled() and ctx.cancel_reason == "cancelled by an operator"


def test_shutdown_and_deadline_cancel_without_a_reason_of_their_own():
    shutdown = threading.Event()
    ctx = context(_shutdown=shutdown, _clock=lambda: 5.0, deadline=10.0)
    assert not ctx.is_cancelled()
    shutdown.set()
    assert ctx.is_cancelled() and ctx.cancel_reason == "the replica is shutting down"
    timed_out = context(_clock=lambda: 11.0, deadline=10.0)
    assert timed_out.is_cancelled() and timed_out.cancel_reason == "the timeout passed"
