"""Drivers for the django.tasks conformance suite: our backend and the framework's own.

Each test of the suite takes a ``driver``: ``pgsched`` (``PgschedBackend``, its
runs executed by the executor inline, in the test's thread and transaction) and
``immediate`` (the framework's ``ImmediateBackend``, the control). Tests assert
what the framework documents, branching only on the backend's ``supports_*``
flags, so the same assertion holds for both where the behaviour is meant to
match.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

if settings.TASKS_FRAMEWORK is None:  # Django 5.2 without the backport: nothing to test
    collect_ignore_glob = ["test_*.py"]
else:
    from django_pgsched.engine.executor import Executor
    from django_pgsched.tasks import compat


def db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        value: datetime = cursor.fetchone()[0]
    return value


@dataclass
class Driver:
    name: str
    alias: str

    @property
    def backend(self) -> Any:
        return compat.task_backends[self.alias]

    @property
    def ours(self) -> bool:
        return self.name == "pgsched"

    def task(self, task: Any, **changes: Any) -> Any:
        """``task`` on this driver's backend."""
        return task.using(backend=self.alias, **changes)

    def run(self, *, later: timedelta | None = None) -> int:
        """Execute what is due (ours: executor passes, inline); return runs claimed."""
        if not self.ours:
            return 0
        now = db_now() + later if later else None
        executor = Executor(concurrency=8, inline=True, worker_id="conformance")
        claimed = 0
        for _ in range(100):
            done = executor.run_once(now=now).claimed
            claimed += done
            if not done:
                break
        return claimed

    def finish(self, result: Any) -> Any:
        """Run ``result``'s task to its end (retries included); the result, refreshed."""
        if self.ours:
            for step in range(1, 11):
                # each retry is due after a backoff of at most an hour after the last
                self.run(later=timedelta(hours=2 * step))
                result.refresh()
                if result.is_finished:
                    break
        return result


@pytest.fixture(params=["pgsched", "immediate"])
def driver(request: pytest.FixtureRequest, db: None) -> Iterator[Driver]:
    from tests.testapp import tasks

    tasks.SEEN.clear()
    yield Driver(request.param, "default" if request.param == "pgsched" else "immediate")
    tasks.SEEN.clear()


@pytest.fixture
def ours(db: None) -> Driver:
    return Driver("pgsched", "default")
