from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_pgsched.models import Schedule
from tests.testapp import jobs


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


def at(text: str) -> datetime:
    """'2026-01-01 12:00:00' as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)
