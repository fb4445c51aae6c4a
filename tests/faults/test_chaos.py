"""Full tier: the chaos soak's short variant (``chaos.py``; 30 minutes: ``bench/chaos.py``).

Every capability at once (zoned schedules across a real spring transition, a month
boundary with retention detaching, intervals, overlap and deadlines, HTTP deliveries that
fail, stall and answer 429, tenants with quotas under fair claiming, django.tasks enqueues,
claims through a three-node JetStream cluster) while a nemesis injects, every 6–12 s, each
of: ``kill -9``, SIGSTOP past the lease, a PostgreSQL immediate restart, a terminated
backend, a NATS node killed and restarted, and the network between a replica and PostgreSQL
cut in a namespace of the test's own. The safety set must find nothing, over the attached
months and the detached ones. Lateness and memory are reported, not asserted (they are the
benchmark's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from . import chaos
from .scenario import Scenario

pytestmark = [pytest.mark.full, pytest.mark.timeout(1200)]

SECONDS = float(os.environ.get("PGSCHED_CHAOS_SECONDS", "150"))


@pytest.mark.parametrize("seed", [1])
def test_every_capability_at_once_under_faults(
    scenario: Scenario, tmp_path: Path, seed: int
) -> None:
    if not scenario.cluster.faketime:
        pytest.skip("libfaketime is not installed (Debian package libfaketime)")
    config = chaos.Config(seconds=SECONDS, fault_gap=(6.0, 12.0), seed=seed)
    try:
        report = chaos.Chaos(scenario, config, tmp_path).run()
    finally:
        chaos.restore_clock(scenario)
    text = json.dumps(report.as_dict(), indent=1, default=str)
    print(f"\nchaos seed {seed}:\n{text}")
    assert not report.violations, text
    assert not report.problems, text
    # the witnesses: every capability and every fault was really there
    assert report.tenants["refused"] == ["allowed_jobs", "max_schedules"], text
    assert report.months["detached"] and report.months["runs_in_detached"] > 0, text
    assert report.dst["crossed"], text
    assert report.broker["replicas_that_claimed_through_it"], text
    assert report.tasks["succeeded"] > 0 and report.http["ok_succeeded"] > 0, text
    kinds = {f["kind"] for f in report.faults}
    expected = set(chaos.FAULTS) - ({"netcut"} if not report.netcut.get("connections") else set())
    assert kinds == expected, (kinds, text)
    if "netcut" in kinds:
        assert report.netcut["dropped_packets"] > 0, text  # packets went into the cut
    # no connection leak: settled, the replicas hold no more than after their start
    first = report.connections["max_by_third"][0]
    assert report.connections["settled"] <= first + config.replicas, text
