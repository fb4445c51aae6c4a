"""Poisoned rows beside healthy per-second schedules, under real replicas.

A catalogue of rows written straight into the tables with SQL, each holding a
value at a column's extreme or a type's edge (a time Python cannot hold, a
duration that overflows the lease or the planner's arithmetic, a payload too
deep or a number too long to decode, a counter at the end of its type, a run
running on a lease from year 1 BC), beside 20 per-second schedules and one-off
runs. Two replicas run them. Each poisoned schedule must end ``broken`` with its
error and each poisoned run ``failed`` (or where its own rules put it) with an
attempt row naming it, while every healthy occurrence runs: nothing stays
``running`` without an owner, and ``/healthz`` answers 200 because every loop
keeps ticking (which is the truth).

First, with the database's bounds in place, each value of the catalogue that a
CHECK covers is refused when written. Then the bounds are dropped (as SQL run by the
tables' owner may drop them) and the rows go in.

Each case is a negative control on the engine before per-row isolation: there, one such row
made every planner pass, or every executor pass, fail (no healthy occurrence
ran), or left the pass's other claims ``running`` without an owner.
"""

from __future__ import annotations

import json
import statistics
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from ..dropped_checks import drop_checks_sql
from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults]

DEEP = "('{\"a\": ' || repeat('[', 3000) || repeat(']', 3000) || '}')::jsonb"
DIGITS = "('{\"a\": ' || repeat('9', 5001) || '}')::jsonb"
BC = "'0001-06-01 00:00:00+00 BC'::timestamptz"
YEARS = "interval '100000000 years'"
TD_MAX = "interval '999999999 days 86399.999999 seconds'"  # timedelta.max

# Every CHECK that stands between these values and the tables: the bounds of times,
# durations and payloads (the tables' CHECKs and the domains'), and those on the columns
# the catalogue pushes to their type's end.
BOUNDS = {
    "pgsched_schedule": [
        "pgsched_schedule_times_range",
        "pgsched_schedule_durations_range",
        "pgsched_schedule_kwargs_readable",
        "pgsched_schedule_times_finite",
        "pgsched_schedule_jitter_range",
        "pgsched_schedule_start_deadline_range",
        "pgsched_schedule_interval_whole_seconds",
        "pgsched_schedule_max_attempts_range",
    ],
    "pgsched_job_run": [
        "pgsched_run_times_range",
        "pgsched_run_timeout_range",
        "pgsched_run_json_readable",
    ],
}


@dataclass
class Poison:
    """A row with one poisoned value, and what must become of it."""

    name: str
    values: dict[str, str]  # column -> SQL expression, over the healthy row's
    expect: str  # words the error (last_error, or the attempt's error) must hold
    status: str  # what the row ends as: broken / failed / missed / succeeded
    refused_by: str | None = None  # the CHECK that refuses it while the bounds stand
    id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def schedule_poisons() -> list[Poison]:
    every_second = {"cron": "'* * * * * *'"}
    interval = {"cron": "NULL", '"interval"': "interval '1 second'", "anchor": "now()"}
    return [
        Poison("s-nfa-bc", {**every_second, "next_fire_at": BC}, "next_fire_at", "broken",
               "times_range"),
        Poison("s-nfa-minus-infinity", {**every_second, "next_fire_at": "'-infinity'"},
               "next_fire_at", "broken", "times_finite"),
        Poison("s-anchor-bc", {**interval, "anchor": BC}, "anchor", "broken", "times_range"),
        Poison("s-timeout-years", {**every_second, "timeout": YEARS}, "timeout", "broken",
               "durations_range"),
        Poison("s-timeout-max", {**every_second, "timeout": TD_MAX}, "timeout", "broken",
               "durations_range"),
        Poison("s-grace-years", {**every_second, "misfire_grace": YEARS}, "misfire_grace",
               "broken", "durations_range"),
        Poison("s-grace-max", {**every_second, "misfire_grace": "interval '999999999 days'"},
               "misfire_grace", "broken", "durations_range"),
        Poison("s-jitter-years", {**every_second, "jitter": YEARS}, "jitter", "broken",
               "jitter_range"),
        Poison("s-deadline-years", {**every_second, "start_deadline": YEARS}, "start_deadline",
               "broken", "start_deadline_range"),
        Poison("s-interval-years", {**interval, '"interval"': YEARS}, "interval", "broken",
               "interval_whole_seconds"),
        Poison("s-interval-fraction", {**interval, '"interval"': "interval '1.5 seconds'"},
               "interval", "broken", "interval_whole_seconds"),
        Poison("s-unplanned-bc", {**every_second, "unplanned_from": BC,
                                  "unplanned_reason": "'paused'"},
               "unplanned_from", "broken"),
        # the counter at the end of bigint: the advance overflows (one schedule's statement)
        Poison("s-skipped-bigint", {**every_second, "skipped_occurrences": "9223372036854775807",
                                    "misfire_policy": "'latest'",
                                    "next_fire_at": "now() - interval '1 hour'"},
               "bigint out of range", "broken"),
        # a run the database refuses to store (max_attempts beyond the run's CHECK)
        Poison("s-attempts-smallint", {**every_second, "max_attempts": "32767"},
               "could not store its runs", "broken", "max_attempts_range"),
    ]  # fmt: skip


def run_poisons() -> list[Poison]:
    return [
        Poison("r-kwargs-deep", {"kwargs": DEEP}, "kwargs nested deeper", "failed",
               "json_readable"),
        Poison("r-kwargs-digits", {"kwargs": DIGITS}, "kwargs", "failed", "json_readable"),
        Poison("r-kwargs-huge-number", {"kwargs": "'{\"a\": -1e4300}'::jsonb"}, "kwargs",
               "failed", "json_readable"),
        Poison("r-task-call-deep", {"task_call": DEEP}, "task_call nested deeper", "failed",
               "json_readable"),
        Poison("r-fire-after-bc", {"fire_after": BC}, "fire_after", "failed", "times_range"),
        Poison("r-fire-after-minus-infinity", {"fire_after": "'-infinity'"}, "fire_after",
               "failed", "times_range"),
        Poison("r-scheduled-for-bc", {"scheduled_for": BC}, "scheduled_for", "failed",
               "times_range"),
        Poison("r-timeout-years", {"timeout": YEARS}, "timeout", "failed", "timeout_range"),
        Poison("r-timeout-max", {"timeout": TD_MAX}, "timeout", "failed", "timeout_range"),
        # edges the engine never reads, or reads by its own rules: they run or end as usual
        Poison("r-created-bc", {"created_at": BC}, "", "succeeded", "times_range"),
        Poison("r-start-by-bc", {"start_by": BC}, "", "missed", "times_range"),
        # running with no live owner on a lease that expired in year 1 BC: reaped, then run
        Poison("r-running-since-bc", {"status": "'running'", "attempts": "1",
                                      "claimed_by": "gen_random_uuid()", "worker": "'gone'",
                                      "claim_expires_at": BC, "started_at": BC},
               "", "succeeded", "times_range"),
    ]  # fmt: skip


RUN_STATE = "SELECT status, attempts, worker, note FROM pgsched_job_run WHERE id = %s"

SCHEDULE_BASE = {
    "job": "'faults.work'",
    "updated_at": "now()",
    "next_fire_at": "date_trunc('second', clock_timestamp()) + interval '1 second'",
}
RUN_BASE = {
    "scheduled_for": "date_trunc('second', clock_timestamp())",
    "job": "'faults.work'",
    "kwargs": "'{}'::jsonb",
    "queue": "'default'",
    "fire_after": "clock_timestamp()",
    "max_attempts": "3",
    "timeout": "interval '2 seconds'",
}


def insert(scenario: Scenario, poison: Poison, table: str) -> int:
    base = SCHEDULE_BASE if table == "pgsched_schedule" else RUN_BASE
    key = "name" if table == "pgsched_schedule" else "idempotency_key"
    values = {**base, key: f"'{poison.name}'", **poison.values}
    if table == "pgsched_job_run":  # its month first (monthly partitions): the CHECK decides
        scenario.sql(
            f"SELECT pgsched_ensure_months(ARRAY[({values['scheduled_for']})::timestamptz])"
        )
    columns = ", ".join(values)
    return int(
        scenario.one(
            f"INSERT INTO {table} ({columns}) VALUES ({', '.join(values.values())}) RETURNING id"
        )
    )


def healthz(port: int | None) -> int:
    assert port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def lateness(scenario: Scenario, ids: list[int], since: Any, until: Any) -> list[float]:
    """Start lateness (first attempt's start - occurrence), seconds, of each occurrence."""
    rows = scenario.sql(
        "SELECT extract(epoch FROM a.started_at - r.scheduled_for) FROM pgsched_job_run r "
        "JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1 "
        "WHERE r.schedule_id = ANY(%s) AND r.scheduled_for BETWEEN %s AND %s",
        [ids, since, until],
    )
    return [float(r[0]) for r in rows]


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else max(values)


def poisoned_rows(scenario: Scenario, window: float) -> dict[str, Any]:
    schedules, runs = schedule_poisons(), run_poisons()
    # 1. with the bounds in place, the database refuses what a CHECK covers
    for poison, table in [*((p, "pgsched_schedule") for p in schedules),
                          *((p, "pgsched_job_run") for p in runs)]:  # fmt: skip
        if poison.refused_by is None:
            continue
        with pytest.raises(psycopg.errors.CheckViolation, match=poison.refused_by):
            insert(scenario, poison, table)
    # 2. the bounds dropped (as for rows written before them; before the replicas start:
    # ALTER TABLE would hold their statements), healthy load, two replicas
    scenario.sql(drop_checks_sql(name for names in BOUNDS.values() for name in names))
    healthy = scenario.add_schedules(20, prefix="good", cron="* * * * * *")
    scenario.snapshot_baseline()
    replicas = [scenario.start("a", concurrency=8), scenario.start("b", concurrency=8)]
    time.sleep(1)  # both replicas running
    # 3. the poison goes in
    since = scenario.db_now()
    for poison in schedules:
        poison.id = insert(scenario, poison, "pgsched_schedule")
    for poison in runs:
        poison.id = insert(scenario, poison, "pgsched_job_run")
    scenario.sql("SELECT pg_notify('pgsched_wait', 'poison')")
    one_offs = []
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        one_offs.append(scenario.add_run(timeout=5))
        time.sleep(0.5)
    until = scenario.db_now()

    # each poisoned schedule is broken, naming what is wrong
    def schedules_done() -> bool:
        return all(
            scenario.one("SELECT status FROM pgsched_schedule WHERE id = %s", [p.id]) == p.status
            for p in schedules
        )

    def diagnose() -> str:
        return (
            "\n".join(
                f"{p.name}: {scenario.sql('SELECT status, last_error FROM pgsched_schedule WHERE id = %s', [p.id])}"  # noqa: E501
                for p in schedules
            )
            + "\n"
            + scenario.fleet.logs()[-6000:]
        )

    wait_until(schedules_done, 20, "every poisoned schedule to be broken", diagnose=diagnose)
    for p in schedules:
        error = scenario.one("SELECT last_error FROM pgsched_schedule WHERE id = %s", [p.id])
        assert p.expect in error, (p.name, error)

    # each poisoned run ends where its rules put it, with an attempt row naming the poison
    def runs_done() -> bool:
        return all(scenario.run_state(p.id)[0] == p.status for p in runs)

    wait_until(
        runs_done,
        20,
        "every poisoned run to end",
        diagnose=lambda: (
            "\n".join(
                f"{p.name}: {scenario.sql(RUN_STATE, [p.id])} {scenario.attempts(p.id)}"
                for p in runs
            )
            + "\n"
            + scenario.fleet.logs()[-6000:]
        ),
    )
    for p in runs:
        if p.status == "failed":
            errors = [
                r[0]
                for r in scenario.sql(
                    "SELECT error FROM pgsched_attempt WHERE job_run_id = %s AND status = 'failed'",
                    [p.id],
                )
            ]
            assert len(errors) == 1 and p.expect in errors[0], (p.name, errors)
            assert "cannot be read" in errors[0]

    # every healthy occurrence of the window ran, every one-off too
    def healthy_done() -> bool:
        return not scenario.one(
            "SELECT count(*) FROM pgsched_job_run WHERE (schedule_id = ANY(%s) "
            "AND scheduled_for BETWEEN %s AND %s OR id = ANY(%s)) AND status <> 'succeeded'",
            [healthy, since, until, one_offs],
        )

    wait_until(healthy_done, 20, "the healthy runs of the window to succeed")
    ran = scenario.one(
        "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = ANY(%s) "
        "AND scheduled_for BETWEEN %s AND %s",
        [healthy, since, until],
    )
    seconds = int((until - since).total_seconds())
    assert ran >= 20 * (seconds - 1), (ran, seconds)  # one per schedule per second
    late = lateness(scenario, healthy, since, until)
    worst = scenario.sql(  # the seconds whose occurrences started latest, and when planned
        "SELECT extract(epoch FROM r.scheduled_for - %s)::int, "
        "max(extract(epoch FROM a.started_at - r.scheduled_for)) AS late, "
        "max(extract(epoch FROM r.created_at - r.scheduled_for)) AS planned "
        "FROM pgsched_job_run r "
        "JOIN pgsched_attempt a ON a.job_run_id = r.id AND a.number = 1 "
        "WHERE r.schedule_id = ANY(%s) AND r.scheduled_for BETWEEN %s AND %s "
        "GROUP BY 1 ORDER BY late DESC LIMIT 3",
        [since, healthy, since, until],
    )

    # nobody's run is left running without an owner; the loops tick, and /healthz says so
    scenario.settle(timeout=30)
    for replica in replicas:
        assert replica.alive, replica.log()[-3000:]
        assert healthz(replica.metrics_port) == 200
        assert "Traceback" not in replica.log(), replica.log()[-6000:]
    assert scenario.fleet.stop_all() == [0, 0], scenario.fleet.logs()
    # the safety invariants, read by Python: without the poisoned rows (asserted above)
    poisoned_runs = [p.id for p in runs] + [
        r[0]
        for r in scenario.sql(
            "SELECT id FROM pgsched_job_run WHERE schedule_id = ANY(%s)",
            [[p.id for p in schedules]],
        )
    ]
    scenario.sql("DELETE FROM faults_run_audit WHERE run_id = ANY(%s)", [poisoned_runs])
    scenario.sql("DELETE FROM pgsched_job_run WHERE id = ANY(%s)", [poisoned_runs])
    scenario.sql("DELETE FROM pgsched_schedule WHERE id = ANY(%s)", [[p.id for p in schedules]])
    scenario.assert_clean()
    assert not scenario.one("SELECT count(*) FROM pgsched_job_run WHERE status = 'running'"), (
        scenario.sql(
            "SELECT id, idempotency_key, worker FROM pgsched_job_run WHERE status = 'running'"
        )
    )
    return {"lateness": late, "occurrences": ran, "worst": worst}


@pytest.mark.timeout(120)
def test_poisoned_rows_stall_nothing(scenario: Scenario) -> None:
    result = poisoned_rows(scenario, window=6)
    late = result["lateness"]
    print(f"healthy start lateness over {len(late)} occurrences: p50 "
          f"{statistics.median(late):.3f}s p99 {p99(late):.3f}s (loaded machine)")  # fmt: skip
    # a stall (passes that fail until the poison is isolated, a loop that stops) shows as
    # seconds of lateness, not the tens of milliseconds of a healthy pass; the p99 bound
    # (under a second) is the full tier's
    assert max(late) < 5.0, (max(late), result["worst"])


@pytest.mark.full
@pytest.mark.timeout(300)
def test_poisoned_rows_keep_p99_start_lateness_under_a_second(scenario: Scenario) -> None:
    """The issue's bound, over a minute of poison: the full tier only (a timing claim)."""
    result = poisoned_rows(scenario, window=60)
    late = result["lateness"]
    summary = json.dumps({"occurrences": len(late), "p50": statistics.median(late),
                          "p99": p99(late), "max": max(late),
                          "worst (second of the window, lateness, planned)": result["worst"]},
                         default=float)  # fmt: skip
    print(summary)
    assert p99(late) < 1.0, summary
