"""Each status group and bound has one home; every other spelling of it must agree."""

from __future__ import annotations

import re
from pathlib import Path

import django_pgsched
from django_pgsched import limits, sqlfiles, statuses
from django_pgsched.delivery.models import BreakerState
from django_pgsched.engine import queries
from django_pgsched.models import Attempt, JobRun, Schedule

GROUPS = {
    "claimable": set(statuses.CLAIMABLE_STATUSES),
    "terminal": set(statuses.TERMINAL_STATUSES),
    "unfinished": set(statuses.UNFINISHED_STATUSES),
    "unsuccessful": set(statuses.UNSUCCESSFUL_STATUSES),
}


ROOMS = ("admin", "broker", "delivery", "engine", "ledger", "ops", "partitions")
MIGRATION_SQL = Path(django_pgsched.__file__).parent / "migrations" / "sql"


def room_text() -> str:
    """Every named statement of every room."""
    return "\n".join(sqlfiles.get(room, name) for room in ROOMS for name in sqlfiles.names(room))


def sql_text() -> str:
    """Every named statement, and the migration's SQL (its functions' bodies, its
    indexes' predicates, its CHECKs)."""
    migration = [path.read_text(encoding="utf-8") for path in sorted(MIGRATION_SQL.glob("*.sql"))]
    return "\n".join([room_text(), *migration])


def test_the_rooms_are_every_package_with_sql():
    root = Path(django_pgsched.__file__).parent
    assert {p.parent.name for p in root.glob("*/queries.sql")} == set(ROOMS)


def test_every_status_list_in_the_sql_is_a_named_group():
    # the SQL repeats the groups literally so that PostgreSQL's query planner can
    # match the partial indexes; each list must be one of the groups, exactly
    lists = re.findall(r"status IN \(([^)]*)\)", sql_text())
    assert lists, "no status lists found"
    for found in lists:
        if found.startswith("{"):  # a template's field, filled with a group in Python
            continue
        values = {v.strip().strip("'") for v in found.split(",")}
        assert values in GROUPS.values(), found


def test_every_status_literal_in_the_sql_is_a_known_status():
    known = set(statuses.RunStatus.values) | set(statuses.AttemptStatus.values)
    known |= set(statuses.ScheduleStatus.values)
    known |= set(statuses.SkipReason.values)  # the guard's decisions (guard_decide)
    known |= set(BreakerState.values)  # the breaker's states (delivery/queries.sql)
    for literal in re.findall(r"(?:status|was)\s*(?:=|<>)\s*'(\w+)'", sql_text()):
        assert literal in known, literal
    # the statements' CASE results (the migration's CASEs also name columns and ports)
    for literal in re.findall(r"THEN '([a-z_]+)'|ELSE '([a-z_]+)'", room_text()):
        value = next(v for v in literal if v)
        assert value in known, value


def test_the_claim_counts_attempts_below_max_attempts():
    # the attempt counted at the claim stays within the CHECK (1..MAX_ATTEMPTS) because
    # only runs with attempts < max_attempts are claimable
    claim = queries.get("executor_pass")
    assert "r.attempts < r.max_attempts" in claim and "attempts = r.attempts + 1" in claim


def constraint(model, name: str):
    (found,) = [c for c in model._meta.constraints if c.name == name]
    return found


def test_the_models_constraints_use_the_bounds_and_groups():
    assert ("max_attempts__lte", limits.MAX_ATTEMPTS) in constraint(
        JobRun, "pgsched_run_max_attempts_range"
    ).condition.children
    assert ("number__lte", limits.MAX_ATTEMPTS) in constraint(
        Attempt, "pgsched_attempt_number_range"
    ).condition.children
    assert ("catch_up_limit__lte", limits.MAX_CATCH_UP_LIMIT) in constraint(
        Schedule, "pgsched_schedule_catch_up_limit_range"
    ).condition.children
    status = constraint(JobRun, "pgsched_run_status_valid").condition.children
    assert status == [("status__in", statuses.RunStatus.values)]


def test_the_groups_partition_the_run_statuses():
    assert set(statuses.CLAIMABLE_STATUSES) | {statuses.RunStatus.RUNNING} == set(
        statuses.UNFINISHED_STATUSES
    )
    assert set(statuses.UNFINISHED_STATUSES) | set(statuses.TERMINAL_STATUSES) == set(
        statuses.RunStatus.values
    )
    assert not set(statuses.UNFINISHED_STATUSES) & set(statuses.TERMINAL_STATUSES)
    assert set(statuses.UNSUCCESSFUL_STATUSES) <= set(statuses.TERMINAL_STATUSES)


def test_every_named_statement_is_run_as_a_statement_or_command():
    # or filled in first (queries.TEMPLATES: engine/stranded.py's)
    named = [s.name for s in queries.STATEMENTS] + list(queries.TEMPLATES)
    assert sorted(named) == queries.names()


def test_every_note_the_hot_path_sql_writes_is_cut_to_the_note_limit():
    # note = left(..., N): each N is limits.MAX_NOTE_CHARS (what Python cuts notes to)
    cuts = re.findall(r"note = (?:CASE .*? ELSE )?left\((?:.|\n)*?, (\d+)\)", sql_text())
    assert len(cuts) >= 2, cuts
    assert {int(n) for n in cuts} == {limits.MAX_NOTE_CHARS}
