"""Jobs the test suite schedules. Each witnessing job writes one Witness row per execution."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from django_pgsched import job
from django_pgsched.context import RunContext

from .models import Witness

CALLS: list[dict[str, Any]] = []  # in-process record for inline executor tests


def _witness(context: RunContext, label: str, started: datetime) -> None:
    Witness.objects.create(
        run_id=context.job_run_id,
        attempt=context.attempt,
        idempotency_key=context.idempotency_key,
        schedule_name=context.schedule_name,
        scheduled_for=context.scheduled_for,
        worker=context.worker,
        label=label,
        started_at=started,
    )


@job(name="tests.noop")
def noop(**kwargs: Any) -> None:
    CALLS.append({"job": "noop", **kwargs})


@job(name="tests.chain")
def chain(left: int = 0, **kwargs: Any) -> None:
    """Enqueue one more run of itself, due now, until ``left`` reaches 0."""
    from django_pgsched import enqueue

    if left > 0:
        enqueue("tests.chain", kwargs={"left": left - 1})


@job(name="tests.witness", takes_context=True)
def witness(context: RunContext, label: str = "", **kwargs: Any) -> None:
    _witness(context, label, datetime.now(UTC))


@job(name="tests.fail", takes_context=True, max_attempts=2)
def fail(context: RunContext, message: str = "boom", **kwargs: Any) -> None:
    CALLS.append({"job": "fail", "attempt": context.attempt})
    raise RuntimeError(message)


@job(name="tests.sleep", takes_context=True)
def sleep(
    context: RunContext,
    seconds: float = 1.0,
    label: str = "",
    cooperative: bool = True,
    witness: bool = True,
    **kwargs: Any,
) -> None:
    """Sleeps, polling is_cancelled() when cooperative; witnesses only if it ran to the end."""
    started = datetime.now(UTC)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cooperative and context.is_cancelled():
            CALLS.append({"job": "sleep", "cancelled": context.cancel_reason})
            raise RuntimeError(f"stopped early: {context.cancel_reason}")
        time.sleep(0.02)
    if witness:
        _witness(context, label, started)


@job(name="tests.context", takes_context=True)
def context_job(context: RunContext, **kwargs: Any) -> None:
    CALLS.append({"job": "context", "context": context, "kwargs": kwargs})


@job(name="tests.pid", takes_context=True)
def pid(context: RunContext, **kwargs: Any) -> None:
    _witness(context, f"pid:{os.getpid()}", datetime.now(UTC))


# -- jobs of the fault-injection suite (tests/faults) ------------------------------------


def _ledger(context: RunContext, phase: str) -> None:
    from .models import Ledger

    Ledger.objects.create(
        run_id=context.job_run_id,
        attempt=context.attempt,
        idempotency_key=context.idempotency_key,
        worker=context.worker,
        phase=phase,
        pid=os.getpid(),
    )


@job(name="faults.work", takes_context=True)
def fault_work(
    context: RunContext, seconds: float = 0.0, cooperative: bool = True, **kwargs: Any
) -> None:
    """Ledger a start, work ``seconds`` (stop early if cancelled and cooperative), ledger an end."""
    _ledger(context, "start")
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if cooperative and context.is_cancelled():
                raise RuntimeError(f"stopped early: {context.cancel_reason}")
            time.sleep(0.02)
    finally:
        _ledger(context, "end")


@job(name="faults.crash", takes_context=True, max_attempts=8)
def fault_crash(context: RunContext, **kwargs: Any) -> None:
    """Ledger a start, then SIGKILL the replica that runs it (a crash-looping run)."""
    import signal

    _ledger(context, "start")
    os.kill(os.getpid(), signal.SIGKILL)


@job(name="tests.backend_pid")
def backend_pid(then: str = "", **kwargs: Any) -> None:
    """Record the PostgreSQL backend that served this job's connection, then maybe misbehave.

    ``then``: ``"leave_transaction"`` opens a transaction and returns inside it;
    ``"terminate"`` ends its own backend (the connection is then unusable).
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        CALLS.append({"job": "backend_pid", "pid": cursor.fetchone()[0], "then": then})
        if then == "leave_transaction":
            cursor.execute("BEGIN")
            cursor.execute("SELECT 1")
        elif then == "terminate":
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
