"""The executors' wake-up after ``enqueue()``: sent once the run is committed, never before.

A real ``LISTEN`` connection on ``pgsched_wait``, as every replica's listener
has; the enqueues commit for real (transactional tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import transaction

from django_pgsched.models import JobRun
from django_pgsched.tasks import wakeup
from tests.conftest import dsn
from tests.testapp import tasks

Received = Any


@pytest.fixture
def listening(transactional_db: None) -> Iterator[Received]:
    with psycopg.connect(**dsn(), autocommit=True) as conn:
        conn.execute("LISTEN pgsched_wait")

        def received(wait: float = 0.5) -> list[str]:
            return [n.payload for n in conn.notifies(timeout=wait, stop_after=50)]

        yield received


def test_an_enqueue_in_autocommit_wakes_the_executors_with_its_run(listening: Received) -> None:
    result = tasks.add.enqueue(1, 2)
    assert listening() == [result.id]


def test_no_wake_up_before_the_commit_and_one_for_the_whole_transaction(
    listening: Received,
) -> None:
    with transaction.atomic():
        first = tasks.add.enqueue(1, 2)
        second = tasks.add.enqueue(3, 4)
        assert listening(0.3) == []  # the runs are not visible yet: nobody is woken
    assert listening() == [f"{first.id},{second.id}"]


def test_a_rolled_back_enqueue_wakes_nobody(listening: Received) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        tasks.add.enqueue(1, 2)
        raise Rollback
    assert listening(0.3) == []
    assert not JobRun.objects.exists()


def test_a_savepoint_rolled_back_does_not_stop_the_wake_up_of_the_rest(
    listening: Received,
) -> None:
    class Rollback(Exception):
        pass

    with transaction.atomic():
        with pytest.raises(Rollback), transaction.atomic():
            tasks.add.enqueue(1, 2)  # its hook is dropped with the savepoint
            raise Rollback
        kept = tasks.add.enqueue(3, 4)
    (payload,) = listening()
    assert kept.id in payload.split(",")
    assert list(JobRun.objects.values_list("pk", flat=True)) == [int(kept.id)]


def test_a_payload_names_at_most_its_share_of_many_runs(listening: Received) -> None:
    with transaction.atomic():
        results = [tasks.add.enqueue(i, i) for i in range(wakeup.PAYLOAD_IDS + 10)]
    (payload,) = listening()
    assert payload.split(",") == [r.id for r in results[: wakeup.PAYLOAD_IDS]]
