"""A slot thread keeps its job's database connection across jobs (engine/job_connections.py).

With Django's default ``CONN_MAX_AGE = 0`` (as in ``tests.settings``), Django's
request rule opens a connection for every job; ``JOB_CONNECTION_MAX_AGE`` keeps
it. Each test runs jobs one after another on one slot thread and reads the
backend pid each job's query ran on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.test import override_settings

from django_pgsched import enqueue
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt
from tests.testapp import jobs


@pytest.fixture(autouse=True)
def _default_conn_max_age() -> None:
    assert connection.settings_dict["CONN_MAX_AGE"] == 0  # Django's default, as a new user has


def run_in_order(
    *thens: str, between: Callable[[int], None] | None = None, **overrides: Any
) -> list[dict[str, Any]]:
    """Enqueue one tests.backend_pid run per ``then``; run them one at a time on one slot.

    ``between(pid)``: called after each job with the backend pid it ran on.
    """
    with override_settings(PGSCHED=overrides):
        executor = Executor(concurrency=1)
        executor.start_threads()
        try:
            _run_each(executor, thens, between)
        finally:
            executor.stop_threads()
    # in the order they ran (a failed run's retry, later, is not one of them)
    return [c for c in jobs.CALLS if c["job"] == "backend_pid"][: len(thens)]


def _run_each(
    executor: Executor, thens: tuple[str, ...], between: Callable[[int], None] | None
) -> None:
    for then in thens:
        enqueue("tests.backend_pid", kwargs={"then": then})
        done = len(jobs.CALLS) + 1
        deadline = time.monotonic() + 20
        while len(jobs.CALLS) < done and time.monotonic() < deadline:
            executor.run_once()
            executor.wake.wait(0.05)
        assert len(jobs.CALLS) == done, "the job did not run"
        while executor.slots.busy() and time.monotonic() < deadline:
            executor.run_once()  # record it: its slot thread tidies first
            executor.wake.wait(0.05)
        if between is not None:
            between(jobs.CALLS[-1]["pid"])


def pids(calls: list[dict[str, Any]]) -> list[int]:
    return [c["pid"] for c in calls]


def test_jobs_on_one_slot_share_one_connection_by_default(transactional_db):
    first, second, third = pids(run_in_order("", "", ""))
    assert first == second == third


def test_without_the_setting_every_job_opens_a_connection_as_django_would(transactional_db):
    """The negative control: Django's request rule alone, with CONN_MAX_AGE = 0."""
    first, second, third = pids(run_in_order("", "", "", JOB_CONNECTION_MAX_AGE=None))
    assert len({first, second, third}) == 3


def test_a_connection_past_the_setting_is_replaced(transactional_db):
    first, second = pids(run_in_order("", "", JOB_CONNECTION_MAX_AGE=0.001))
    assert first != second


def test_a_transaction_left_open_is_not_inherited_by_the_next_job(transactional_db):
    first, second, third = pids(run_in_order("", "leave_transaction", ""))
    assert first == second  # kept until the job misbehaved
    assert third != second  # then closed before the next job


def test_a_connection_made_unusable_by_a_job_is_replaced(transactional_db):
    first, second, third = pids(run_in_order("", "terminate", ""))
    assert first == second and third != second


@pytest.fixture
def health_checks() -> Iterator[None]:
    """CONN_HEALTH_CHECKS on for the connections the slot thread opens."""
    connections.settings["default"]["CONN_HEALTH_CHECKS"] = True
    try:
        yield
    finally:
        connections.settings["default"]["CONN_HEALTH_CHECKS"] = False


def terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


def test_with_health_checks_a_kept_connection_that_died_is_replaced_before_the_job(
    transactional_db, health_checks
):
    """The server ended the kept backend between two jobs: the next job's first query
    finds it dead (CONN_HEALTH_CHECKS) and reconnects, and the job succeeds. (Without
    health checks the second run's first attempt fails on the dead connection.)"""
    first, second = pids(run_in_order("", "", between=terminate))
    assert second != first
    # each run's first attempt succeeded: the dead connection failed nothing
    assert list(Attempt.objects.order_by("job_run_id").values_list("number", "status")) == [
        (1, "succeeded"),
        (1, "succeeded"),
    ]
