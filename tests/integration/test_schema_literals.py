"""The schema's literals agree with the Python homes of the status groups and bounds.

The migrations spell the status groups and the bounds out as SQL (CHECKs, partial
indexes' predicates, the PL/pgSQL bodies of the triggers), and a migration is never
edited once written. This test reads what the migrations actually built, from the
catalog of the test database, and compares every status list and every bound with
``statuses`` and ``limits``: a group or a bound changed in Python alone fails here.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection

from django_pgsched import limits, statuses
from django_pgsched.timing.jitter import MAX_JITTER
from django_pgsched.timing.timetable import MAX_INTERVAL, MIN_INTERVAL

GROUPS = [
    set(statuses.CLAIMABLE_STATUSES),
    set(statuses.TERMINAL_STATUSES),
    set(statuses.UNFINISHED_STATUSES),
    set(statuses.UNSUCCESSFUL_STATUSES),
    set(statuses.RunStatus.values),
    set(statuses.AttemptStatus.values),
    set(statuses.ScheduleStatus.values),
]
KNOWN = set().union(*GROUPS)

# the tables' CHECKs and the domains' (a bound on one column, on VALUE: domains.sql)
CONSTRAINTS = """
SELECT c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
 WHERE c.contype = 'c' AND t.relname LIKE 'pgsched%%' AND NOT t.relispartition
UNION ALL
SELECT c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c
 WHERE c.contype = 'c' AND c.contypid::regtype::text LIKE 'pgsched%%'
"""
PREDICATES = """
SELECT i.relname, pg_get_expr(x.indpred, x.indrelid)
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
 WHERE t.relname LIKE 'pgsched%%' AND NOT t.relispartition AND x.indpred IS NOT NULL
"""
FUNCTIONS = "SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'pgsched%%'"

# a status list: status = ANY (ARRAY[...]), status <> ALL (ARRAY[...]), status IN (...)
STATUS_LIST = re.compile(
    r"\bstatus\)?(?:::\w+(?: \w+)?)?\s*(?:=\s*ANY|<>\s*ALL)\s*\(+ARRAY\[([^\]]*)\]"
    r"|\bstatus\s+(?:NOT\s+)?IN\s*\(([^)]*)\)",
    re.IGNORECASE,
)


def catalog(query: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(query)
        return dict(cursor.fetchall())


def status_lists(text: str) -> list[set[str]]:
    found = []
    for match in STATUS_LIST.finditer(text):
        body = match.group(1) or match.group(2)
        found.append(set(re.findall(r"'(\w+)'", body)))
    return found


@pytest.mark.parametrize("source", [CONSTRAINTS, PREDICATES, FUNCTIONS])
def test_every_status_list_the_schema_spells_is_a_named_group(db, source):
    texts = catalog(source)
    seen = 0
    for name, text in texts.items():
        for values in status_lists(text):
            seen += 1
            if len(values) == 1:
                assert values <= KNOWN, f"{name}: unknown status {values}"
            else:
                assert values in GROUPS, f"{name}: {sorted(values)} is no status group"
    assert seen, f"no status list found in {source.split()[3]}"  # the regex still matches


def intervals(definition: str) -> list[timedelta]:
    literals = re.findall(r"'([^']*)'::interval", definition)
    with connection.cursor() as cursor:
        cursor.execute("SELECT unnest(%s::interval[])", [literals])
        return [row[0] for row in cursor.fetchall()]


def integers(definition: str, column: str) -> list[int]:
    # a table's CHECK names the column; a domain's says VALUE
    return [int(n) for n in re.findall(rf"\b(?:{column}|VALUE) <= \(?'?(-?\d+)", definition)]


def test_every_bound_the_schema_spells_is_its_limit(db):
    checks = catalog(CONSTRAINTS)
    most = limits.MAX_ATTEMPTS
    assert integers(checks["pgsched_run_attempts_range"], "attempts") == [most]
    assert integers(checks["pgsched_run_max_attempts_range"], "max_attempts") == [most]
    assert integers(checks["pgsched_schedule_max_attempts_range"], "max_attempts") == [most]
    assert integers(checks["pgsched_attempt_number_range"], "number") == [most]
    assert integers(checks["pgsched_schedule_catch_up_limit_range"], "catch_up_limit") == [
        limits.MAX_CATCH_UP_LIMIT
    ]
    timeout = [limits.MIN_TIMEOUT, limits.MAX_TIMEOUT]
    assert intervals(checks["pgsched_run_timeout_range"]) == timeout
    assert intervals(checks["pgsched_schedule_durations_range"]) == [
        *timeout,
        timedelta(0),
        limits.MAX_MISFIRE_GRACE,
    ]
    assert intervals(checks["pgsched_schedule_start_deadline_range"]) == [
        limits.MIN_START_DEADLINE,
        limits.MAX_START_DEADLINE,
    ]
    assert intervals(checks["pgsched_schedule_interval_whole_seconds"]) == [
        MIN_INTERVAL,
        MAX_INTERVAL,
    ]
    assert intervals(checks["pgsched_schedule_jitter_range"]) == [timedelta(0), MAX_JITTER]
    last = limits.LAST_FIRE_TIME.strftime("%Y-%m-%d %H:%M:%S+00")
    assert checks["pgsched_schedule_times_finite"].count(f"'{last}'") == 2
