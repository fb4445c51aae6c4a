"""Hostile rows and least privilege.

- A poison schedule in a planner batch (stored by SQL: passes the database's
  CHECKs, not the parser) is marked ``broken`` with its reason while the rest
  of the batch fires; the replica never crashes.
- A run naming ``os.system`` (inserted by SQL) is never executed: executors
  claim only registered jobs, and nothing is imported from the database.
- The database backstops payload size for writers that bypass validation.
- The scheduler runs as a role without superuser: only CONNECT, USAGE and
  SELECT/INSERT/UPDATE/DELETE on its tables and their sequences. LISTEN included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from .harness import wait_until
from .scenario import Scenario

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]

POISON = ["0 0 30 2 *", "R * * * *", "61 * * * *", "0 0 * * MON#2"]


def test_poison_schedules_are_isolated_and_imports_never_come_from_the_database(
    scenario: Scenario, tmp_path: Path
) -> None:
    scenario.add_schedules(20, prefix="good", cron="* * * * * *")
    scenario.snapshot_baseline()
    for i, cron in enumerate(POISON):
        scenario.sql(
            "INSERT INTO pgsched_schedule (name, job, cron, next_fire_at, updated_at) "
            "VALUES (%s, 'faults.work', %s, clock_timestamp(), now())",
            [f"poison-{i}", cron],
        )
    marker = tmp_path / "pwned"
    evil = scenario.one(
        "INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue, "
        "fire_after, max_attempts, timeout) VALUES (date_trunc('second', now()), 'evil', "
        "'os.system', %s::jsonb, 'default', now(), 3, interval '5 seconds') RETURNING id",
        [json.dumps({"command": f"touch {marker}"})],
    )
    a = scenario.start("a")
    wait_until(
        lambda: (
            scenario.one("SELECT count(*) FROM pgsched_schedule WHERE status = 'broken'")
            == len(POISON)
        ),
        20,
        "the poison schedules to be marked broken",
    )
    for name, error in scenario.sql(
        "SELECT name, last_error FROM pgsched_schedule WHERE status = 'broken' ORDER BY name"
    ):
        assert "cron" in error, (name, error)
    time.sleep(3)
    assert a.alive and len(scenario.fleet.replicas) == 1
    assert scenario.run_state(evil) == ("pending", 0, None)  # never claimed
    assert not marker.exists()
    assert "os.system" not in a.log()
    scenario.sql("DELETE FROM pgsched_job_run WHERE id = %s", [evil])
    scenario.settle(timeout=30)
    assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
    scenario.assert_clean()


def test_the_database_refuses_oversized_payloads_written_by_sql(scenario: Scenario) -> None:
    big = json.dumps({"x": "y" * (1024 * 1024 + 10)})
    with pytest.raises(psycopg.errors.CheckViolation):
        scenario.sql(
            "INSERT INTO pgsched_schedule (name, job, cron, kwargs, updated_at) "
            "VALUES ('big', 'faults.work', '* * * * *', %s::jsonb, now())",
            [big],
        )
    with pytest.raises(psycopg.errors.CheckViolation):
        scenario.sql(
            "INSERT INTO pgsched_schedule (name, job, cron, kwargs, updated_at) "
            "VALUES ('list', 'faults.work', '* * * * *', '[1]'::jsonb, now())"
        )


TABLES = ("pgsched_schedule", "pgsched_job_run", "pgsched_attempt", "pgsched_skipped_range",
          "pgsched_schedule_change", "pgsched_breaker", "pgsched_tenant", "testapp_ledger",
          "testapp_witness",
          "faults_run_audit", "faults_range_audit")  # fmt: skip


@contextmanager
def least_privileged(scenario: Scenario) -> Iterator[str]:
    """A role with only what ``how-to/database.md`` grants; dropped afterwards."""
    role = f"pgsched_app_{scenario.dbname}"
    cluster = scenario.cluster
    cluster.sql("postgres", f"CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE")
    try:
        scenario.sql(f'GRANT CONNECT ON DATABASE "{scenario.dbname}" TO {role}')
        scenario.sql(f"GRANT USAGE ON SCHEMA public TO {role}")
        scenario.sql(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(TABLES)} TO {role}")
        scenario.sql(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")
        scenario.sql(f"GRANT SELECT ON django_migrations TO {role}")
        assert scenario.one("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [role]) is False
        yield role
    finally:
        scenario.fleet.close()
        scenario.sql(f"DROP OWNED BY {role}")
        scenario.sql(f'REVOKE CONNECT ON DATABASE "{scenario.dbname}" FROM {role}')
        cluster.sql("postgres", f"DROP ROLE IF EXISTS {role}")


def test_the_scheduler_needs_no_superuser(scenario: Scenario) -> None:
    cluster = scenario.cluster
    with least_privileged(scenario) as role:
        scenario.add_schedules(5, prefix="fast", cron="* * * * * *")
        scenario.snapshot_baseline()
        a = scenario.start("a", database_url=cluster.url(scenario.dbname, user=role))
        wait_until(
            lambda: scenario.one(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s "
                "AND application_name LIKE 'pgsched listener%%' AND query LIKE 'LISTEN%%'",
                [role],
            ),
            20,
            "the listener to LISTEN as the unprivileged role",
        )
        # NOTIFY reaches it: a schedule created now fires within the first seconds
        (late,) = scenario.add_schedules(1, prefix="late", cron="* * * * * *")
        scenario.track([late])
        wait_until(
            lambda: (
                scenario.one(
                    "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = %s AND status = "
                    "'succeeded'",
                    [late],
                )
                >= 2
            ),
            15,
            "the new schedule to fire",
        )
        assert "permission denied" not in a.log(), a.log()[-3000:]
        scenario.settle(timeout=30)
        assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
        scenario.assert_clean()


MONTHS_AFTER = """
SELECT c.relname FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
 WHERE p.relname IN ('pgsched_job_run', 'pgsched_attempt')
   AND right(c.relname, 6) > to_char(now() AT TIME ZONE 'UTC', 'YYYYMM')
"""


def test_a_least_privileged_replica_makes_the_months_ahead(scenario: Scenario) -> None:
    """The months are made by whichever replica gets there first, whatever its role.

    The months after the current one are dropped (as at the end of a month that the
    migration's months ran out at): the replica's upkeep, as the least-privileged
    role, must make them again; and the planner's on-demand months
    (``pgsched_ensure_months``) must work for that role too. The functions that make
    a month run as the tables' owner, and refuse any table but the history's.
    """
    for (name,) in scenario.sql(MONTHS_AFTER):
        scenario.sql(f"DROP TABLE {name}")
    assert scenario.sql(MONTHS_AFTER) == []
    with least_privileged(scenario) as role:
        scenario.add_schedules(3, prefix="fast", cron="* * * * * *")
        scenario.snapshot_baseline()
        a = scenario.start("a", database_url=scenario.cluster.url(scenario.dbname, user=role))
        wait_until(
            lambda: len(scenario.sql(MONTHS_AFTER)) >= 6,  # three months of both tables
            30,
            "the upkeep to make three months ahead",
            diagnose=a.log,
        )
        with psycopg.connect(scenario.cluster.url(scenario.dbname, user=role)) as conn:
            made = conn.execute(
                "SELECT pgsched_ensure_months(ARRAY[now() + interval '8 months'])"
            ).fetchone()
            assert made == (1,)
            for call in (
                "SELECT pgsched_partition_create('pg_authid', now())",
                "SELECT pgsched_partition_attach('pgsched_schedule', now())",
            ):
                with pytest.raises(psycopg.Error, match="only the run history"):
                    conn.execute(call)
                conn.rollback()
        assert "permission denied" not in a.log(), a.log()[-3000:]
        scenario.settle(timeout=30)
        assert scenario.fleet.stop_all() == [0], scenario.fleet.logs()
        scenario.assert_clean()
