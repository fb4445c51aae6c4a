"""A tenant's ``max_running``: exact across replicas, given back when leases expire.

Executors here run without their slot threads, so a claimed run stays ``running``
(its lease live) until the test ends it: the count of running runs is what the
claims decided, nothing else. Each "replica" is an Executor on its own thread and
so its own connection.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections

from django_pgsched import enqueue
from django_pgsched.engine import executor as executor_module
from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun, Tenant, db_now


@pytest.fixture(autouse=True)
def recheck_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pass reads whether a tenant has a max_running (production: every 2 s)."""
    monkeypatch.setattr(executor_module, "HELD_RECHECK", 0.0)


def _due(tenant: str, n: int) -> list[int]:
    past = db_now() - timedelta(seconds=5)
    return [enqueue("tests.noop", tenant=tenant, run_at=past).pk for _ in range(n)]


def _running(tenant: str) -> int:
    return JobRun.objects.filter(tenant=tenant, status="running").count()


def test_a_held_tenant_gets_at_most_max_running_and_others_are_not_held(db):
    Tenant.objects.create(key="acme", max_running=2)
    _due("acme", 5)
    _due("globex", 3)
    _due("", 2)
    replica = Executor(concurrency=10)
    first = replica.run_once()
    assert first.claimed == 7  # globex's 3, the 2 without a tenant, acme's 2
    assert _running("acme") == 2 and _running("globex") == 3
    assert Executor(concurrency=10).run_once().claimed == 0  # acme is at its limit
    # one of acme's runs ends: its slot goes to the next of acme's runs
    done = JobRun.objects.filter(tenant="acme", status="running").first()
    assert done is not None
    JobRun.objects.filter(pk=done.pk).update(
        status="succeeded", claimed_by=None, claim_expires_at=None, finished_at=db_now()
    )
    assert Executor(concurrency=10).run_once().claimed == 1
    assert _running("acme") == 2


def test_a_tenant_without_a_limit_is_claimed_by_the_main_claim_only(db):
    Tenant.objects.create(key="acme", max_running=None, weight=3)
    _due("acme", 4)
    replica = Executor(concurrency=10)
    assert replica.run_once().claimed == 4
    assert replica._held is False  # no held tenant: no held claim ran


def test_expired_leases_give_their_slots_back(db):
    """A replica killed with its tenant's slots: they return when its leases expire."""
    Tenant.objects.create(key="acme", max_running=3)
    _due("acme", 6)
    assert Executor(concurrency=10).run_once().claimed == 3
    assert Executor(concurrency=10).run_once().claimed == 0
    # the holder dies: nothing ends its runs, their leases run out
    JobRun.objects.filter(tenant="acme", status="running").update(
        claim_expires_at=db_now() - timedelta(seconds=1)
    )
    assert Executor(concurrency=10).run_once().claimed == 3
    live = JobRun.objects.filter(
        tenant="acme", status="running", claim_expires_at__gt=db_now()
    ).count()
    assert live == 3


def test_lowering_max_running_below_the_running_count_claims_nothing_more(db):
    Tenant.objects.create(key="acme", max_running=4)
    _due("acme", 8)
    assert Executor(concurrency=10).run_once().claimed == 4
    Tenant.objects.filter(key="acme").update(max_running=2)
    assert Executor(concurrency=10).run_once().claimed == 0
    assert _running("acme") == 4


def test_a_paused_held_tenant_is_not_claimed(db):
    Tenant.objects.create(key="acme", max_running=5, paused=True)
    _due("acme", 3)
    assert Executor(concurrency=10).run_once().claimed == 0


@pytest.mark.django_db(transaction=True)
def test_eight_replicas_claiming_at_once_never_exceed_max_running(db):
    """Eight executors on eight connections claim together, ten rounds: never above 3."""
    Tenant.objects.create(key="acme", max_running=3)
    Tenant.objects.create(key="globex", max_running=5)
    _due("acme", 40)
    _due("globex", 40)
    replicas = 8
    errors: list[BaseException] = []
    worst = {"acme": 0, "globex": 0}

    def replica(barrier: threading.Barrier) -> None:
        try:
            barrier.wait(10)
            Executor(concurrency=4).run_once()
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    for _ in range(10):
        barrier = threading.Barrier(replicas)
        threads = [threading.Thread(target=replica, args=(barrier,)) for _ in range(replicas)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        for tenant in worst:
            worst[tenant] = max(worst[tenant], _running(tenant))
        # every running run ends (as a finish would), freeing the slots for the next round
        with connection.cursor() as cur:
            cur.execute(
                "UPDATE pgsched_job_run SET status = 'succeeded', claimed_by = NULL,"
                " claim_expires_at = NULL, finished_at = now() WHERE status = 'running'"
            )
    assert worst == {"acme": 3, "globex": 5}
    assert JobRun.objects.filter(tenant="acme", status="succeeded").count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_second_replica_waits_for_the_first_ones_claim_to_commit(db, monkeypatch):
    """Replicas serving different queues pick different runs of one tenant: without the
    tenant's lock each would count none running and both would claim (2 of 1)."""
    Tenant.objects.create(key="acme", max_running=1)
    past = db_now() - timedelta(seconds=5)
    enqueue("tests.noop", tenant="acme", run_at=past, queue="a")
    enqueue("tests.noop", tenant="acme", run_at=past, queue="b")
    picked, go = threading.Event(), threading.Event()
    real_fetch = executor_module.db.fetch

    def fetch(conn, statement, params):  # type: ignore[no-untyped-def]
        rows = real_fetch(conn, statement, params)
        if statement is executor_module.queries.EXECUTOR_HELD_PICK and params["queues"] == ["a"]:
            picked.set()
            go.wait(20)  # the first replica holds the tenant's lock, its claim not committed
        return rows

    monkeypatch.setattr(executor_module.db, "fetch", fetch)
    claimed: dict[str, int] = {}

    def replica(queue: str) -> None:
        try:
            claimed[queue] = Executor(concurrency=2, queues=[queue]).run_once().claimed
        finally:
            connections.close_all()

    first = threading.Thread(target=replica, args=("a",))
    first.start()
    assert picked.wait(20)
    second = threading.Thread(target=replica, args=("b",))
    second.start()
    second.join(1.5)
    assert second.is_alive(), "the second replica claimed without waiting for the tenant's lock"
    go.set()
    first.join(20)
    second.join(20)
    assert claimed == {"a": 1, "b": 0}
    assert _running("acme") == 1


def test_the_defaults_hold_every_tenant_without_a_record(db, settings):
    settings.PGSCHED = {"TENANT_DEFAULTS": {"max_running": 2}}
    Tenant.objects.create(key="big", max_running=None)  # its record: no limit
    Tenant.objects.create(key="capped", max_running=1)
    _due("newco", 5)
    _due("other", 3)
    _due("big", 4)
    _due("capped", 3)
    _due("", 2)
    assert Executor(concurrency=20).run_once().claimed == 2 + 2 + 4 + 1 + 2
    assert [_running(t) for t in ("newco", "other", "big", "capped", "")] == [2, 2, 4, 1, 2]
    assert Executor(concurrency=20).run_once().claimed == 0


def test_a_held_tenants_run_due_later_wakes_the_executor(db):
    """Its future runs count for the next pass's time; its due ones at the limit do not
    (else a tenant at its limit would keep the executor passing without pause)."""
    Tenant.objects.create(key="acme", max_running=1)
    _due("acme", 2)
    replica = Executor(concurrency=4)
    assert replica.run_once().claimed == 1
    second = replica.run_once()
    assert second.claimed == 0 and second.next_due_in is None
    enqueue("tests.noop", tenant="acme", run_at=db_now() + timedelta(seconds=30))
    later = replica.run_once()
    assert later.next_due_in is not None and 25 < later.next_due_in <= 30
