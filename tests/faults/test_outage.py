"""A 3-hour outage under each misfire policy, exact skipped accounting (I7), metrics (I11).

The schedules are put in the state they would have after every replica was
down for 3 hours (``next_fire_at`` 3 h back, the River/Graphile "backdate"
technique), then two replicas start together. Their second is chosen 30 s
away from the database clock's current second, so the missed/on-time boundary
(``now − grace``) cannot move across an occurrence while the replicas start:
the expected split is exact.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta

import pytest

from django_pgsched.timing import timetable

from .harness import wait_until
from .invariants import Expectation, check_metrics, check_policy
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

GRACE = 10
POLICIES = [("skip", 10), ("latest", 10), ("catch_up", 10), ("catch_up", 1000)]
OVERRIDES = {"MISFIRE_GRACE": GRACE, "PLANNER_BATCH": 2, "PLANNER_LOOKAHEAD": 1}


def kept(policy: str, limit: int, missed: int) -> int:
    if policy == "skip":
        return 0
    if policy == "latest":
        return min(1, missed)
    return min(limit, missed)


def ceil_second(t: datetime) -> datetime:
    return t if t.microsecond == 0 else t.replace(microsecond=0) + timedelta(seconds=1)


def backdated_workload(scenario: Scenario, per_kind: int) -> dict[int, tuple[str, str, int]]:
    """Schedules of each policy × {every minute, every 15 minutes}, 3 h behind."""
    second = (scenario.db_now().second + 30) % 60
    made: dict[int, tuple[str, str, int]] = {}
    for policy, limit in POLICIES:
        for cron in (f"{second} * * * * *", f"{second} */15 * * * *"):
            first = timetable.cron(cron).next_after(scenario.db_now()) - timedelta(hours=3)
            ids = scenario.add_schedules(
                per_kind,
                prefix=f"{policy}{limit}-{cron.split()[1].replace('*/', 'q')}",
                cron=cron,
                policy=policy,
                catch_up_limit=limit,
                first=first,
            )
            made.update(dict.fromkeys(ids, (cron, policy, limit)))
    scenario.snapshot_baseline()
    return made


def expectations(
    scenario: Scenario, made: dict[int, tuple[str, str, int]], n_lo: datetime, n_hi: datetime
) -> dict[int, Expectation]:
    result = {}
    for sid, (cron, policy, limit) in made.items():
        table = timetable.cron(cron)
        start = scenario.baselines[sid].start
        lo, hi = (ceil_second(n - timedelta(seconds=GRACE)) for n in (n_lo, n_hi))
        missed = table.count(start, lo)
        assert missed == table.count(start, hi), "the missed/on-time boundary moved: too slow"
        assert missed in (180, 12), (cron, missed)
        runs = kept(policy, limit, missed)
        result[sid] = Expectation(start, lo, runs, missed - runs)
    return result


def caught_up(scenario: Scenario, ids: list[int]) -> bool:
    return not scenario.one(
        "SELECT count(*) FROM pgsched_schedule WHERE id = ANY(%s) "
        "AND next_fire_at < clock_timestamp() - interval '1 minute'",
        [ids],
    )


def test_three_hour_outage_two_replicas_one_killed_mid_catch_up(scenario: Scenario) -> None:
    made = backdated_workload(scenario, per_kind=3)
    n_lo = scenario.db_now()
    a = scenario.start(
        "a", ready=False, overrides=OVERRIDES, failpoints="planner.before_commit=kill"
    )
    # b starts once a's loops run (or a has died already): started together, b sometimes
    # caught everything up before a's first planner pass found anything to plan, and a
    # never reached its failpoint
    wait_until(lambda: "running loops" in a.log() or a.proc.poll() is not None, 30, "a to start")
    b = scenario.start("b", ready=False, overrides=OVERRIDES)
    wait_until(lambda: caught_up(scenario, list(made)), 60, "the catch-up", interval=0.05)
    n_hi = scenario.db_now()
    # witness: a died by SIGKILL in its first planner pass, holding a batch of the catch-up
    assert a.proc.wait(30) == -9, a.log()[-2000:]
    assert [line.split()[2:] for line in a.failpoint_hits()] == [["planner.before_commit", "kill"]]
    scenario.settle(timeout=60, grace=GRACE)
    assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
    assert b.proc.returncode == 0
    expect = expectations(scenario, made, n_lo, n_hi)
    violations = check_policy(scenario.conn, expect, scenario.baselines) + scenario.check()
    assert not violations, "\n".join(map(str, violations[:30]))
    # I10: catch-up never inserted more than the limit for a schedule
    assert scenario.one(
        "SELECT max(n) FROM (SELECT count(*) n FROM pgsched_job_run WHERE scheduled_for < %s "
        "GROUP BY schedule_id) t",
        [n_lo - timedelta(seconds=GRACE)],
    ) <= max(limit for _, limit in POLICIES)
    # negative control: a ledger range lost, or recorded twice, is exactly I12
    scenario.sql("CREATE TABLE lost_range AS SELECT * FROM pgsched_skipped_range LIMIT 1")
    scenario.sql("DELETE FROM pgsched_skipped_range WHERE id = (SELECT id FROM lost_range)")
    lost = scenario.check()
    assert lost and {v.invariant for v in lost} == {"I12"}, lost[:5]
    assert any("neither a run nor in the ledger" in v.detail for v in lost)
    scenario.sql("INSERT INTO pgsched_skipped_range SELECT * FROM lost_range")
    scenario.sql(
        "INSERT INTO pgsched_skipped_range (schedule_id, first, last, count, reason) "
        "SELECT schedule_id, first, last, count, reason FROM lost_range"
    )
    twice = scenario.check()
    assert twice and {v.invariant for v in twice} == {"I12"}, twice[:5]
    assert any("ranges overlap" in v.detail for v in twice)


def test_three_hour_outage_metrics_equal_the_database(scenario: Scenario) -> None:
    made = backdated_workload(scenario, per_kind=2)
    n_lo = scenario.db_now()
    replicas = [scenario.start(n, ready=False, overrides=OVERRIDES) for n in ("a", "b")]
    wait_until(lambda: caught_up(scenario, list(made)), 60, "the catch-up", interval=0.05)
    n_hi = scenario.db_now()
    scenario.settle(timeout=60, grace=GRACE)

    def totals() -> tuple[int, int]:
        return (
            int(scenario.one("SELECT count(*) FROM pgsched_job_run WHERE schedule_id IS NOT NULL")),
            int(scenario.one("SELECT sum(skipped_occurrences) FROM pgsched_schedule")),
        )

    for _ in range(20):  # a pass may commit between the scrape and the query: retry until still
        before = [r.scrape() for r in replicas]
        created, skipped = totals()
        after = [r.scrape() for r in replicas]
        if before == after and (created, skipped) == totals():
            break
        time.sleep(0.3)
    violations = check_metrics(after, created=created, skipped=skipped)
    assert not violations, violations
    assert skipped > 0
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    expect = expectations(scenario, made, n_lo, n_hi)
    violations = check_policy(scenario.conn, expect, scenario.baselines) + scenario.check()
    assert not violations, "\n".join(map(str, violations[:30]))
    assert math.isclose(sum(e.skipped for e in expect.values()), skipped)
