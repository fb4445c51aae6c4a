"""Fair claiming: when demand exceeds the slots, tenants share the claims by weight.

An inline executor runs each pass's claims at once, so every pass has all its slots
to give: the first pass fills them (in due order: the burst's), and from then on
the pass is contended and shares its claim among the tenants with due runs.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from django_pgsched import enqueue
from django_pgsched.engine import executor as executor_module
from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun, Tenant, db_now


@pytest.fixture(autouse=True)
def recheck_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor_module, "HELD_RECHECK", 0.0)
    monkeypatch.setattr(executor_module, "FAIR_INTERVAL", 0.0)


def _due(tenant: str, n: int, seconds_ago: float) -> None:
    at = db_now() - timedelta(seconds=seconds_ago)
    for _ in range(n):
        enqueue("tests.noop", tenant=tenant, run_at=at)


def _started_by_pass(replica: Executor, passes: int) -> list[Counter[str]]:
    seen: set[int] = set()
    out = []
    for _ in range(passes):
        replica.run_once()
        started = JobRun.objects.exclude(started_at=None).exclude(pk__in=seen)
        out.append(Counter(started.values_list("tenant", flat=True)))
        seen.update(started.values_list("pk", flat=True))
    return out


def test_a_burst_does_not_hold_back_another_tenants_runs(db):
    _due("burst", 200, seconds_ago=60)  # due first: the usual claim's order puts it first
    _due("small", 6, seconds_ago=1)
    passes = _started_by_pass(Executor(concurrency=10, inline=True), 3)
    assert passes[0] == {"burst": 10}  # uncontended so far: the usual claim
    # contended: shared equally (weight 1 each)
    assert passes[1] == {"burst": 5, "small": 5}
    assert passes[2] == {"burst": 9, "small": 1}


def test_without_tenanted_runs_the_fair_claim_never_runs(db, monkeypatch):
    picks = []
    real = executor_module.Executor._claim_fair

    def counting(self, conn, at, limit):  # type: ignore[no-untyped-def]
        picks.append(limit)
        return real(self, conn, at, limit)

    monkeypatch.setattr(executor_module.Executor, "_claim_fair", counting)
    _due("", 100, seconds_ago=60)
    passes = _started_by_pass(Executor(concurrency=10, inline=True), 3)
    assert passes == [{"": 10}] * 3  # contended at every pass, in due order
    assert picks == []


def test_claims_are_shared_by_weight(db):
    Tenant.objects.create(key="gold", weight=3)
    _due("bronze", 100, seconds_ago=60)
    _due("gold", 100, seconds_ago=30)
    passes = _started_by_pass(Executor(concurrency=8, inline=True), 4)
    assert passes[0] == {"bronze": 8}
    for shared in passes[1:]:
        assert shared == {"gold": 6, "bronze": 2}


def test_runs_without_a_tenant_take_the_slots_the_tenants_leave(db):
    _due("", 50, seconds_ago=60)
    _due("acme", 3, seconds_ago=1)
    passes = _started_by_pass(Executor(concurrency=10, inline=True), 2)
    assert passes[0] == {"": 10}
    assert passes[1] == {"acme": 3, "": 7}


def test_a_held_or_paused_tenant_is_not_shared_in(db):
    Tenant.objects.create(key="held", max_running=1)
    Tenant.objects.create(key="paused", paused=True)
    _due("burst", 100, seconds_ago=60)
    _due("held", 20, seconds_ago=2)
    _due("paused", 20, seconds_ago=2)
    passes = _started_by_pass(Executor(concurrency=6, inline=True), 3)
    assert passes[0] == {"burst": 6}
    for shared in passes[1:]:
        # the held tenant gets its one slot from the held claim (after the others)
        assert shared["paused"] == 0 and shared["held"] <= 1 and sum(shared.values()) == 6


def test_the_rotation_visits_every_tenant(db, monkeypatch):
    monkeypatch.setattr(executor_module, "FAIR_TENANTS", 2)
    _due("a-burst", 100, seconds_ago=60)
    for t in ("b", "c", "d", "e"):
        _due(t, 10, seconds_ago=1)
    passes = _started_by_pass(Executor(concurrency=4, inline=True), 5)
    reached = set().union(*passes[1:])
    assert {"b", "c", "d", "e"} <= reached


def test_the_fair_claim_backs_off_while_one_tenant_alone_wants_more_than_its_share(db, monkeypatch):
    """A fair pass costs about two usual ones: while the others' due runs fit in their
    shares, a replica runs it at intervals doubling up to FAIR_INTERVAL (a tenant whose
    runs fall due during another's burst waits about that long); while two tenants want
    more than their shares, at every pass."""
    monkeypatch.setattr(executor_module, "FAIR_STEP", 0.025)
    monkeypatch.setattr(executor_module, "FAIR_INTERVAL", 0.25)
    now = [100.0]
    replica = Executor(concurrency=4, inline=True, clock=lambda: now[0])
    _due("burst", 300, seconds_ago=60)
    picks = []
    real = executor_module.Executor._claim_fair

    def counting(self, conn, at, limit):  # type: ignore[no-untyped-def]
        picks.append(round(now[0] - 100.0, 3))
        return real(self, conn, at, limit)

    monkeypatch.setattr(executor_module.Executor, "_claim_fair", counting)

    def at(delay: float) -> None:
        now[0] += delay
        replica.run_once()

    at(0)  # fills the slots: contended from now on
    at(0)  # the fair claim, the burst alone: next one in 0.025 s
    at(0.02)  # the usual claim
    at(0.01)  # 0.03: fair again, next in 0.05
    assert picks == [0.0, 0.03]
    _due("small", 2, seconds_ago=1)

    def small_started() -> int:
        return JobRun.objects.filter(tenant="small").exclude(started_at=None).count()

    at(0.03)  # 0.06: the usual claim, in due order (the burst's)
    assert small_started() == 0
    at(0.03)  # 0.09: the fair claim; small's 2 fit in its share (2 of 4): next in 0.1
    assert small_started() == 2 and picks == [0.0, 0.03, 0.09]
    for _ in range(6):  # backs off to 0.25 s at most
        at(0.25)
    assert len(picks) == 9
    assert [round(b - a, 3) for a, b in zip(picks[-3:], picks[-2:], strict=False)] == [0.25, 0.25]
    _due("other", 50, seconds_ago=1)  # two tenants want more than their shares
    at(0.25)  # a fair claim finds it: from now on, every pass
    at(0)
    at(0)
    assert len(picks) == 12
    other = JobRun.objects.filter(tenant="other").exclude(started_at=None).count()
    assert other == 6  # 2 of 4 at each of the three fair passes
