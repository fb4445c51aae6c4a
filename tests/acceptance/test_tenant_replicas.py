"""A tenant's max_running across real replicas, with one of them killed (kill -9).

Three ``runscheduler`` processes claim one tenant's 60 long runs together
(``max_running = 3``); a sampler reads, every 50 ms for at least 60 s, how many
of the tenant's runs hold a live lease, and the witness table says which
executions overlapped and that each run was done once. The victim is killed
while it holds the tenant's slots: they come back when its leases expire.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections

from django_pgsched import enqueue
from django_pgsched.models import JobRun, Tenant, db_now
from tests.acceptance.test_replicas import wait_until
from tests.testapp.models import Witness

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(300)]

LIMIT = 3
RUNS = 60


def _max_overlap(intervals: list[tuple[object, object]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    worst = now = 0
    for _, step in edges:  # an end sorts before a start at the same instant (-1 < 1)
        now += step
        worst = max(worst, now)
    return worst


def test_max_running_holds_across_replicas_and_a_kill_9(replicas):
    Tenant.objects.create(key="acme", max_running=LIMIT)
    due = db_now() - timedelta(seconds=1)
    runs = [
        enqueue(
            "tests.sleep",
            kwargs={"seconds": 2.5, "label": "held"},
            tenant="acme",
            run_at=due,
            timeout=timedelta(seconds=4),
            max_attempts=5,
        ).pk
        for _ in range(RUNS)
    ]
    seen: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        try:
            with connections["default"].cursor() as cur:
                while not stop.is_set():
                    cur.execute(
                        "SELECT count(*) FROM pgsched_job_run WHERE tenant = 'acme'"
                        " AND status = 'running' AND claim_expires_at >= clock_timestamp()"
                    )
                    seen.append(cur.fetchone()[0])
                    stop.wait(0.05)
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample)
    sampler.start()
    sampling_since = time.monotonic()
    try:

        def victim_holds_a_slot() -> bool:
            return JobRun.objects.filter(tenant="acme", status="running", worker="victim").exists()

        # the victim first, so that it surely holds a slot when it is killed: among three
        # replicas, the one whose job just finished claims the freed slot in the same
        # pass, and a replica that only polls may never get one
        victim = replicas("victim", "--concurrency", "4")
        victim.wait_for_log("running loops")
        wait_until(victim_holds_a_slot, timeout=60, interval=0.02, what="the victim to run one")
        started = [victim, *(replicas(n, "--concurrency", "4") for n in ("b", "c"))]
        for replica in started[1:]:
            replica.wait_for_log("running loops")
        wait_until(victim_holds_a_slot, timeout=60, interval=0.02, what="the victim to run one")
        victim.kill9()
        wait_until(
            lambda: JobRun.objects.filter(pk__in=runs, status="succeeded").count() == len(runs),
            timeout=120,
            what="every run of the tenant to succeed",
        )
        stop.wait(max(0.0, 60 - (time.monotonic() - sampling_since)))  # 60 s at least
    finally:
        stop.set()
        sampler.join(10)
    for replica in started[1:]:
        assert replica.stop() == 0, replica.log()[-3000:]
    assert len(seen) >= 60 / 0.05 / 2, len(seen)  # sampled throughout (a loaded machine: half)
    assert max(seen) <= LIMIT, max(seen)
    assert max(seen) == LIMIT  # the limit was reached, not merely never approached
    witnessed = list(Witness.objects.filter(label="held").values_list("started_at", "finished_at"))
    # every run done once: one execution ran to its end per run (the victim's did not)
    done = list(Witness.objects.filter(label="held").values_list("run_id", flat=True))
    assert sorted(done) == sorted(runs), (len(done), len(set(done)))
    assert _max_overlap(witnessed) <= LIMIT, witnessed
    # the victim's run came back after its lease expired and ran again elsewhere
    lost = JobRun.objects.filter(pk__in=runs, attempts__gt=1)
    assert lost.exists()
