"""The unique index is the guard against an operator replan; without it the checker must fail.

An operator moves ``next_fire_at`` back over occurrences that already have runs.
With the index (and the idempotency-key constraint) in place the planner's
``ON CONFLICT DO NOTHING`` absorbs the replan. Negative control: with both
unique guards dropped, the same replan must make the checker report I1, and
only I1.
"""

from __future__ import annotations

import time

import pytest

from .harness import wait_until
from .invariants import Violation, by_invariant
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


def diagnose(scenario: Scenario) -> str:
    runs = scenario.sql("SELECT id, schedule_id, scheduled_for, status FROM pgsched_job_run")
    schedules = scenario.sql("SELECT id, next_fire_at, status FROM pgsched_schedule")
    now = scenario.one("SELECT clock_timestamp()")
    return f"runs {runs}\nschedules {schedules}\nnow {now}\n{scenario.fleet.logs()}"


def replan(scenario: Scenario, *, drop_guards: bool) -> list[Violation]:
    scenario.add_schedules(3, cron="* * * * * *")
    scenario.snapshot_baseline()
    scenario.start("a")
    wait_until(
        lambda: scenario.one("SELECT count(*) FROM pgsched_job_run") >= 9,
        20,
        "runs to be planned",
        diagnose=lambda: diagnose(scenario),
    )
    if drop_guards:
        # the idempotency key ('pgsched:<schedule>:<time>') is unique too: a second guard
        scenario.sql("DROP INDEX pgsched_one_run_per_occurrence")
        scenario.sql("ALTER TABLE pgsched_job_run DROP CONSTRAINT pgsched_run_idempotency_key")
    replanned = scenario.sql(
        "UPDATE pgsched_schedule SET next_fire_at = next_fire_at - interval '5 seconds' "
        "RETURNING id"
    )
    assert len(replanned) == 3
    time.sleep(3)  # the planner re-plans the five seconds it had already planned
    scenario.settle(timeout=30)
    assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
    return scenario.check()


def test_an_operator_replan_is_absorbed_by_the_unique_index(scenario: Scenario) -> None:
    violations = replan(scenario, drop_guards=False)
    assert not violations, "\n".join(map(str, violations))


def test_negative_control_without_the_unique_guards_the_checker_reports_i1(
    scenario: Scenario,
) -> None:
    violations = replan(scenario, drop_guards=True)
    assert set(by_invariant(violations)) == {"I1"}, "\n".join(map(str, violations))
    assert any("is missing" in v.detail for v in violations)
    assert sum("runs for" in v.detail for v in violations) >= 3  # duplicated occurrences
