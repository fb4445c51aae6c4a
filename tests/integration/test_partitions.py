"""Monthly partitions of the run history: guarantees that must hold across months."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection

from django_pgsched import enqueue
from django_pgsched.conf import Settings, get_settings
from django_pgsched.engine.maintenance import Retention
from django_pgsched.models import Attempt, JobRun
from django_pgsched.partitions import layout
from django_pgsched.partitions.months import add_months, month_start
from django_pgsched.partitions.upkeep import Upkeep
from tests.conftest import dsn
from tests.integration.test_executor import now_db

INSERT = """
INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue, status,
                             fire_after, attempts, max_attempts, timeout)
VALUES (date_trunc('second', %s::timestamptz), %s, 'tests.noop', '{}', 'default', 'pending',
        %s, 0, 1, interval '1 minute')
"""


def months_of(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", [table])
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_an_idempotency_key_is_unique_across_months_when_two_transactions_race():
    # Two sessions insert the same key into two months at once: the second waits for the
    # first (an advisory lock on the key) and then sees its run, so one of them fails.
    now = now_db()
    later = now + timedelta(days=40)  # another month (created ahead by the migration)
    first = psycopg.connect(**dsn())
    second = psycopg.connect(**dsn())
    outcome: dict[str, Any] = {}
    try:
        first.execute(INSERT, [now, "race-key", now])  # uncommitted, holds the key's lock

        def insert_second() -> None:
            try:
                second.execute(INSERT, [later, "race-key", later])
                second.commit()
                outcome["second"] = "inserted"
            except psycopg.errors.UniqueViolation as exc:
                second.rollback()
                outcome["second"] = exc.diag.constraint_name

        racer = threading.Thread(target=insert_second)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive(), outcome  # waiting for the first transaction
        first.commit()
        racer.join(10)
        assert outcome == {"second": "pgsched_run_idempotency_key"}
    finally:
        first.close()
        second.close()
    assert JobRun.objects.filter(idempotency_key="race-key").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_same_key_in_another_month_is_refused_and_enqueue_returns_the_first_run():
    first = enqueue("tests.noop", idempotency_key="k-across")
    again = enqueue("tests.noop", idempotency_key="k-across", run_at=now_db() + timedelta(days=45))
    assert again.pk == first.pk
    with pytest.raises(IntegrityError), connection.cursor() as cursor:
        cursor.execute(INSERT, [now_db() + timedelta(days=70), "k-across", now_db()])


@pytest.mark.django_db(transaction=True)
def test_many_one_off_runs_in_one_transaction_check_their_keys_by_index_in_an_empty_month():
    # A month whose statistics say it is empty (ANALYZEd before its first run): the key's
    # check across months must still read the index, not the month, for each row written
    # (it read the whole month again per row: quadratic in one transaction). A session of
    # its own, so that no plan the suite's session cached for the trigger is reused.
    far = (now_db() + timedelta(days=2555)).replace(day=15, microsecond=0)
    with psycopg.connect(**dsn()) as conn, conn.transaction(force_rollback=True):
        conn.execute("SELECT pgsched_ensure_months(ARRAY[%s::timestamptz])", [far])
        (month,) = conn.execute(
            "SELECT pgsched_partition_oid('pgsched_job_run', %s)::regclass::text", [far]
        ).fetchone()
        conn.execute(f"ANALYZE {month}")
        scans = "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relid = %s::regclass"
        seq_before, idx_before = conn.execute(scans, [month]).fetchone()
        conn.execute(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
                                         status, fire_after, attempts, max_attempts, timeout)
            SELECT date_trunc('second', %s::timestamptz), 'bulk-' || g, 'tests.noop', '{}',
                   'default', 'pending', %s, 0, 1, interval '1 minute'
              FROM generate_series(1, 300) g
            """,
            [far, far],
        )
        seq, idx = conn.execute(scans, [month]).fetchone()
    # (the month's creation scanned it: only the insert's own reads count)
    assert (seq - seq_before, idx - idx_before >= 300) == (0, True), (seq, idx)


def test_a_key_shaped_like_an_occurrence_is_reserved_for_it(db):
    with pytest.raises(IntegrityError, match="reserved"), connection.cursor() as cursor:
        cursor.execute(INSERT, [now_db(), "pgsched:12:2026-01-01T00:00:00Z", now_db()])


def test_a_run_far_ahead_or_long_ago_gets_its_month_on_demand(db):
    before = months_of("pgsched_job_run")
    far = enqueue("tests.noop", run_at=now_db() + timedelta(days=3650))
    old = enqueue("tests.noop", run_at=now_db() - timedelta(days=3650))
    assert months_of("pgsched_job_run") == before + 2
    assert months_of("pgsched_attempt") == before + 2
    assert {r.pk for r in JobRun.objects.all()} >= {far.pk, old.pk}


def test_a_run_moved_to_another_month_takes_its_attempts_and_deleting_it_deletes_them(db):
    run = enqueue("tests.noop")
    Attempt.objects.create(job_run=run, number=1, status="failed", finished_at=now_db())
    moved = run.scheduled_for - timedelta(days=35)
    JobRun.objects.filter(pk=run.pk).update(scheduled_for=moved)
    (attempt,) = Attempt.objects.filter(job_run_id=run.pk)
    assert attempt.run_scheduled_for == moved
    JobRun.objects.filter(pk=run.pk).delete()
    assert not Attempt.objects.filter(job_run_id=run.pk).exists()


# -- upkeep and retention -------------------------------------------------------------


def with_settings(**changes: Any) -> Settings:
    return dataclasses.replace(get_settings(), **changes)


def layout_now() -> layout.Layout:
    return layout.read(connection)


def test_upkeep_makes_the_months_ahead_and_repairs_a_table_left_unattached(db):
    now = now_db()
    five = add_months(month_start(now), 5)
    with connection.cursor() as cursor:  # what a replica killed between the steps leaves
        cursor.execute("SELECT pgsched_partition_create('pgsched_job_run', %s)", [five])
    assert five in layout_now().standalone["pgsched_job_run"]
    result = Upkeep(settings=with_settings(PARTITIONS_AHEAD=6)).run_once()
    state = layout_now()
    assert result.ahead == 6 and result.busy == 0, result
    assert five in state.complete() and not state.standalone["pgsched_job_run"]
    assert Upkeep(settings=with_settings(PARTITIONS_AHEAD=6)).run_once().created == 0


@pytest.fixture
def months_restored() -> Iterator[None]:
    """Retention drops the test database's old months: make them again afterwards, and
    drop what it kept detached."""
    yield
    with connection.cursor() as cursor:
        cursor.execute(  # kept detached, or left detached by a replica killed
            "SELECT relname FROM pg_class c WHERE relkind = 'r'"
            " AND relname ~ '^pgsched_(job_run|attempt)_p[0-9]{6}'"
            " AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)"
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP TABLE {name}")
        cursor.execute(
            "SELECT pgsched_ensure_months(array_agg(statement_timestamp()"
            " + k * interval '1 month')) FROM generate_series(-2, 3) k"
        )


def retire_due_months(settings: Settings, now: datetime | None = None) -> tuple[int, int]:
    """Retention rounds until one detaches nothing: (runs that went, months blocked)."""
    runs = blocked = 0
    for _ in range(10):
        result = Retention(settings=settings).run_once(now=now)
        runs += result.deleted
        blocked = result.blocked
        if not result.months:
            return runs, blocked
    raise AssertionError("retention kept finding months")


def insert_month(start: datetime, n: int, *, status: str = "succeeded") -> list[int]:
    """``n`` runs of ``start``'s month (a minute apart) with an attempt each, finished then."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pgsched_ensure_months(ARRAY[%s]::timestamptz[])", [start])
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, queue, status,
                   fire_after, attempts, max_attempts, timeout, finished_at)
            SELECT t, 'm:' || gen_random_uuid(), 'tests.noop', 'default', %(status)s, t, 1, 3,
                   interval '30 seconds', CASE WHEN %(status)s = 'succeeded' THEN t END
              FROM generate_series(1, %(n)s) g,
                   LATERAL (SELECT %(start)s::timestamptz + g * interval '1 minute') AS c(t)
            RETURNING id
            """,
            {"n": n, "start": start, "status": status},
        )
        ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(
            """
            INSERT INTO pgsched_attempt (job_run_id, run_scheduled_for, number, status,
                   finished_at)
            SELECT id, scheduled_for, 1, 'succeeded', scheduled_for
              FROM pgsched_job_run WHERE id = ANY(%s)
            """,
            [ids],
        )
    return ids


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("months_restored")
def test_retention_drops_a_finished_month_and_keeps_one_holding_an_unfinished_run():
    current = month_start(now_db())
    old = add_months(current, -3)
    stuck = add_months(current, -2)
    kept = insert_month(stuck, 10) + insert_month(stuck + timedelta(days=1), 1, status="pending")
    recent = insert_month(current, 5)
    settings = with_settings(RETENTION=timedelta(days=20))
    retire_due_months(settings)  # older months other tests may have left
    gone = insert_month(old, 30)
    _, blocked = retire_due_months(settings)
    assert blocked >= 1
    state = layout_now()
    assert old not in state.attached["pgsched_job_run"] | state.standalone["pgsched_job_run"]
    assert old not in state.attached["pgsched_attempt"] | state.standalone["pgsched_attempt"]
    assert not JobRun.objects.filter(pk__in=gone).exists()
    assert set(JobRun.objects.filter(pk__in=kept + recent).values_list("pk", flat=True)) == set(
        kept + recent
    )
    assert Attempt.objects.filter(job_run_id__in=kept).count() == 11


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("months_restored")
def test_retention_can_keep_a_detached_month_for_an_archive():
    old = add_months(month_start(now_db()), -3)
    settings = with_settings(RETENTION=timedelta(days=20), RETENTION_KEEP_DETACHED=True)
    retire_due_months(settings)
    ids = insert_month(old, 3)
    retire_due_months(settings)
    assert not JobRun.objects.filter(pk__in=ids).exists()
    assert old not in layout_now().attached["pgsched_job_run"]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM pgsched_job_run_p{old:%Y%m}_detached")
        assert cursor.fetchone()[0] == 3
        cursor.execute(f"SELECT count(*) FROM pgsched_attempt_p{old:%Y%m}_detached")
        assert cursor.fetchone()[0] == 3


@pytest.mark.django_db(transaction=True)
def test_replicas_racing_to_make_the_months_ahead_each_make_some_and_none_fails():
    settings = with_settings(PARTITIONS_AHEAD=9)
    current = month_start(now_db())
    before = layout_now()
    missing = sum(
        add_months(current, k) not in before.attached[t]
        for k in range(10)
        for t in ("pgsched_job_run", "pgsched_attempt")
    )
    assert missing  # the test database starts with three months ahead
    results: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def replica() -> None:
        try:
            start.wait()
            results.append(Upkeep(settings=settings).run_once())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=replica) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    made = sum(r.created for r in results)
    # each missing table made once, by one of them (whoever found a month's lock taken
    # left that month to its holder)
    assert made == missing, results
    assert layout_now().months_ahead(now_db()) == 9
    assert Upkeep(settings=settings).run_once().ahead == 9


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("months_restored")
def test_a_month_whose_last_run_finished_lately_waits_until_that_is_old_enough():
    old = add_months(month_start(now_db()), -3)
    settings = with_settings(RETENTION=timedelta(days=20))
    retire_due_months(settings)
    ids = insert_month(old, 4)
    JobRun.objects.filter(pk=ids[0]).update(finished_at=now_db() - timedelta(days=1))
    retire_due_months(settings)
    assert JobRun.objects.filter(pk__in=ids).count() == 4
    later = now_db() + timedelta(days=20)
    retire_due_months(settings, now=later)
    assert not JobRun.objects.filter(pk__in=ids).exists()
