from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_pgsched.models import Schedule
from tests.testapp import jobs

DB_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
}


@pytest.fixture(autouse=True)
def _months_of_history(request: pytest.FixtureRequest, django_db_blocker: Any) -> None:
    """Partitions for the two months before this one in the test database (it starts with
    the current month and three ahead), before every test that uses it: tests move runs a
    month back with plain UPDATEs and INSERTs, which do not create a missing month the way
    the library's inserts do (``pgsched_ensure_months``), and replicas' retention may have
    dropped them. A catalog lookup when they exist. (A test of the fault suite alone, which
    has databases of its own, never sets the test database up: nothing to do then.)"""
    uses_db = DB_FIXTURES & set(request.fixturenames) or request.node.get_closest_marker(
        "django_db"
    )
    if not uses_db:
        return
    request.getfixturevalue("django_db_setup")
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pgsched_ensure_months(array_agg(statement_timestamp()"
            " - k * interval '1 month')) FROM generate_series(1, 2) k"
        )
        # every month live again (a test's upkeep may have moved the horizon): the
        # executor's passes look at every month until a test's upkeep moves it
        cursor.execute("UPDATE pgsched_run_horizon SET live_since = NULL")


@pytest.fixture(autouse=True)
def _slot_threads_end(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test's slot threads end with it: they keep their jobs' connections
    (JOB_CONNECTION_MAX_AGE), which would otherwise stay open on the test database."""
    from django_pgsched.engine.slots import Slots

    started: list[Slots] = []
    start = Slots.start_threads

    def start_and_remember(self: Slots) -> None:
        started.append(self)
        start(self)

    monkeypatch.setattr(Slots, "start_threads", start_and_remember)
    yield
    for slots in started:
        slots.stop_threads(timeout=5.0)


@pytest.fixture
def seed_lookahead(settings: Any) -> None:
    """The seed's 5 s planner lookahead (the default is 30 s: conf.py), for the tests
    whose times are written for it."""
    settings.PGSCHED = {**getattr(settings, "PGSCHED", {}), "PLANNER_LOOKAHEAD": 5}


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    jobs.CALLS.clear()
    yield
    jobs.CALLS.clear()


def dsn() -> dict[str, Any]:
    """Connection parameters of the (test) database Django is using."""
    params = connection.get_connection_params()
    return {
        k: v
        for k, v in params.items()
        if k not in ("cursor_factory", "context", "prepare_threshold")
    }


@pytest.fixture
def other_connection(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A second, independent connection to the test database (autocommit off)."""
    with psycopg.connect(**dsn()) as conn:
        yield conn


@pytest.fixture
def make_schedule(db: None) -> Callable[..., Schedule]:
    counter = iter(range(1_000_000))

    def make(**fields: Any) -> Schedule:
        fields.setdefault("name", f"s{next(counter)}")
        fields.setdefault("job", "tests.noop")
        if "interval" not in fields:
            fields.setdefault("cron", "* * * * * *")
        schedule = Schedule(**fields)
        schedule.full_clean()
        schedule.save()
        return schedule

    return make


@pytest.fixture
def private_runs(db: None) -> None:
    """A ``pgsched_job_run`` of this test's own, for plans that need ANALYZE.

    A temporary table of the same name, columns and indexes (by the same names)
    shadows the real one on this connection (``pg_temp`` is first on the search
    path) and goes with the test's transaction. On the real table, ANALYZE
    writes the row counts of the table and its indexes in place, which the
    rollback does not undo: later tests would be planned for rows long gone.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes"
            " WHERE schemaname = current_schema() AND tablename = 'pgsched_job_run'"
        )
        indexes = [row[0] for row in cursor.fetchall()]
        cursor.execute(
            "CREATE TEMPORARY TABLE pgsched_job_run (LIKE public.pgsched_job_run"
            " INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS) ON COMMIT DROP"
        )
        for index in indexes:
            # the partitioned table's indexes read "ON ONLY": the temporary table is one table
            own = index.replace(" ON ONLY public.pgsched_job_run ", " ON public.pgsched_job_run ")
            own = own.replace(" ON public.pgsched_job_run ", " ON pg_temp.pgsched_job_run ")
            assert own != index, index
            cursor.execute(own)


def at(text: str) -> datetime:
    """'2026-01-01 12:00:00' as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)
