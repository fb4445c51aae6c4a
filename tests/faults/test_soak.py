"""A random-fault nemesis soak (River #1603 style), full tier only.

Three supervised replicas run a mixed workload while a seeded nemesis, every
2–4 s, picks one fault: kill -9 a replica (the supervisor restarts it),
``pg_terminate_backend`` a random scheduler session, SIGSTOP a replica for 3 s,
or blackhole one replica's proxy for 3 s. Then everything heals, settles, and
the checker runs (with the accounting of every occurrence, I12, and the
exclusive schedules' runs never overlapping, I13, among the workload). A failure prints the seed.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from .harness import FaultProxy
from .invariants import ACCOUNTED
from .scenario import Scenario

pytestmark = [pytest.mark.full, pytest.mark.timeout(900)]

SOAK_SECONDS = float(os.environ.get("PGSCHED_SOAK_SECONDS", "90"))


@pytest.mark.parametrize("seed", [1, 2])
def test_random_fault_soak(scenario: Scenario, seed: int) -> None:
    rng = random.Random(seed)
    scenario.add_schedules(30, prefix="fast", cron="* * * * * *")
    scenario.add_schedules(6, prefix="long", cron="*/3 * * * * *", kwargs={"seconds": 1.5})
    scenario.add_schedules(4, prefix="every7", interval=7)
    # overlap policies and start deadlines (jobs longer than their period): I12, I13
    scenario.add_schedules(4, prefix="skip", cron="* * * * * *", kwargs={"seconds": 1.5},
                           timeout=2, overlap="skip")  # fmt: skip
    scenario.add_schedules(3, prefix="buffer", cron="*/2 * * * * *", kwargs={"seconds": 2.5},
                           timeout=4, overlap="buffer_one", start_deadline=1)  # fmt: skip
    scenario.snapshot_baseline()
    proxy = FaultProxy(scenario.cluster.port)
    try:
        replicas = [
            scenario.start("a", database_url=proxy.url(scenario.dbname)),
            scenario.start("b"),
            scenario.start("c"),
        ]
        for replica in replicas:
            scenario.fleet.supervise(replica, max_restarts=50)
        faults: list[str] = []
        deadline = time.monotonic() + SOAK_SECONDS
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(2, 4))
            live = scenario.fleet.live()
            if not live:
                continue
            victim = rng.choice(live)
            fault = rng.choice(["kill", "terminate", "stop", "blackhole"])
            if fault == "kill":
                victim.kill9()
            elif fault == "terminate":
                scenario.sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'pgsched %%' ORDER BY random() LIMIT 1"
                )
            elif fault == "stop":
                victim.signal(signal.SIGSTOP)
                time.sleep(3)
                victim.signal(signal.SIGCONT)
            else:
                proxy.blackhole()
                time.sleep(3)
                proxy.heal()
            faults.append(f"{fault}:{victim.worker_id}")
        print(f"\nsoak seed {seed}: {len(faults)} faults: {' '.join(faults)}")
        scenario.fleet.stop_supervising()
        time.sleep(2)
        for replica in scenario.fleet.live():
            replica.signal(signal.SIGCONT)
        scenario.settle(timeout=120)
        scenario.fleet.stop_all(60)
        # SIGSTOP and blackholes are pauses: overlapping deliveries are allowed, nothing else
        violations = scenario.check(allow_overlap=True)
        reasons = scenario.sql(
            "SELECT reason, sum(count)::int FROM pgsched_skipped_range GROUP BY 1 ORDER BY 1"
        )
        print(f"soak seed {seed}: accounted {ACCOUNTED[-1]}, ledger {dict(reasons)}")
        assert not violations, f"seed {seed}: " + "\n".join(map(str, violations[:30]))
    finally:
        proxy.close()
