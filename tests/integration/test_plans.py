"""The generic plans of the hot statements (the scheduler's sessions force them).

The engine's statements are prepared, and its sessions set ``plan_cache_mode =
force_generic_plan`` so that PostgreSQL plans each once instead of at every
execution. A generic plan does not see the parameters' values, so these tests
check that it still reads the indexes the statements are written for.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_pgsched import enqueue
from django_pgsched.engine import db as db_module
from django_pgsched.engine import queries
from django_pgsched.models import JobRun
from tests.integration.test_executor import executor_params, now_db, walk

PARAM = re.compile(r"%\((\w+)\)[sb]")

# the claim cursor as the index condition: (priority * -1, fire_after, id) >= (...), the
# columns cast to their types under their domains (migrations/sql/domains.sql), as
# PostgreSQL deparses it
CLAIM_ORDER_BOUND = re.compile(
    r"ROW\(\(+priority\)?(?:::smallint)? \* '-1'::integer\), \(?fire_after\)?"
    r"(?:::timestamp with time zone)?, id\) >= ROW\("
)


def generic_plan(
    sql: str, params: dict[str, Any], *, analyze: bool = True, role: str = "executor"
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE) of ``sql`` as a prepared statement under its generic plan.

    With the query planner settings of ``role``'s sessions (db.ROLE_PLANNER_SETTINGS).
    """
    order: list[str] = []
    for name in PARAM.findall(sql):
        if name not in order:
            order.append(name)
    numbered = PARAM.sub(lambda m: f"${order.index(m.group(1)) + 1}", sql)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        for name, value in db_module.ROLE_PLANNER_SETTINGS.get(role, {}).items():
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
        cursor.execute(f"PREPARE pgsched_plan_test AS {numbered}")
        try:
            placeholders = ", ".join(["%s"] * len(order))
            cursor.execute(
                f"EXPLAIN (ANALYZE {analyze}, FORMAT JSON)"
                f" EXECUTE pgsched_plan_test({placeholders})",
                [params[name] for name in order],
            )
            plan: dict[str, Any] = cursor.fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE pgsched_plan_test")
    return plan


def _index_of(scan: dict[str, Any]) -> str | None:
    """The index a scan reads: its own, or its bitmap's only index scan."""
    if scan["Node Type"] == "Bitmap Heap Scan" and len(scan.get("Plans", [])) == 1:
        (child,) = scan["Plans"]
        if child["Node Type"] == "Bitmap Index Scan":
            return child.get("Index Name")
    return scan.get("Index Name")


def parent_index(name: str | None) -> str | None:
    """The index of the partitioned table that a partition's index ``name`` belongs to.

    ``pgsched_job_run`` is partitioned by month: a plan reads each month's own
    copy of an index (``pgsched_job_run_p202612_..._idx``), attached to the
    named index of the partitioned table.
    """
    if name is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.relname FROM pg_inherits i"
            "  JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE c.relname = %s AND c.relkind = 'i'",
            [name],
        )
        row = cursor.fetchone()
    return row[0] if row else name


def indexes_used(plan: dict[str, Any]) -> set[str | None]:
    return {parent_index(n.get("Index Name")) for n in walk(plan)}


def test_the_scheduler_sessions_plan_prepared_statements_once(db):
    connection.ensure_connection()
    # configure anew (an earlier test's rolled-back transaction took its settings along)
    setattr(connection.connection, db_module.sessions._CONFIGURED_ATTR, None)
    with db_module.session("executor") as conn, conn.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


def test_no_statement_of_the_executor_sessions_is_jit_compiled(db):
    """The guard's decision sorts; with the executor's enable_sort = off its estimate
    passed jit_above_cost, and JIT compiled it at every pass (about a second each)."""
    connection.ensure_connection()
    setattr(connection.connection, db_module.sessions._CONFIGURED_ATTR, None)
    with db_module.session("executor") as conn, conn.cursor() as cursor:
        cursor.execute("SET LOCAL jit_above_cost = 0")  # any cost would be compiled
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) "
            + PARAM.sub("NULL", queries.GUARD_DECIDE.sql.replace("%(batch)s", "100"))
        )
        plan = cursor.fetchone()[0][0]
        assert "JIT" not in plan, plan["JIT"]


def claim_scan(plan: dict[str, Any]) -> dict[str, Any]:
    """The claim's read of pgsched_run_claim_order_idx: an ordered scan with nothing sorted."""
    (claimable,) = [n for n in walk(plan) if n.get("Subplan Name") == "CTE claimable"]
    types = {n["Node Type"] for n in walk(claimable)}
    assert not types & {"Sort", "Incremental Sort"}, json.dumps(claimable)
    # no bitmap of the runs (a bitmap of pgsched_tenant_paused_idx, read once for the
    # hashed NOT EXISTS of the paused tenants, is the plan it should have)
    bitmaps = {
        n.get("Relation Name") for n in walk(claimable) if n["Node Type"] == "Bitmap Heap Scan"
    }
    assert bitmaps <= {"pgsched_tenant"}, json.dumps(claimable)
    (lock,) = [n for n in walk(claimable) if n["Node Type"] == "LockRows"]
    scan = lock["Plans"][0]
    assert scan["Node Type"] == "Index Scan", json.dumps(lock)
    assert scan["Index Name"] == "pgsched_run_claim_order_idx", json.dumps(scan)
    return dict(scan)


def insert_runs(cursor: Any, count: int, status: str) -> None:
    """``count`` runs of tests.noop: finished (``succeeded``) or due (``pending``)."""
    finished = status == "succeeded"
    cursor.execute(
        """
        INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
               status, fire_after, attempts, max_attempts, timeout, note, worker,
               started_at, finished_at)
        SELECT date_trunc('second', now()) - g * interval '1 s', %(key)s || g, 'tests.noop',
               '{}', 'default', %(status)s, now() - g * interval '1 ms', %(attempts)s, 3,
               interval '1 minute', '', 'w',
               CASE WHEN %(finished)s THEN now() END, CASE WHEN %(finished)s THEN now() END
          FROM generate_series(1, %(count)s) g
        """,
        {
            "key": f"{status}-",
            "status": status,
            "attempts": int(finished),
            "finished": finished,
            "count": count,
        },
    )


def test_the_generic_claim_reads_the_claimable_index_and_stops_at_the_limit(private_runs):
    # A table of this test's own (private_runs): the real one, never analyzed in the test
    # database, is estimated from the size that earlier tests' rolled-back rows left it;
    # after the whole suite (about 15,000 such rows) PostgreSQL sorted a bitmap of the
    # index instead, while sorts were allowed in the executor's sessions (they are not:
    # db.ROLE_PLANNER_SETTINGS, and the next test).
    for _ in range(50):
        enqueue("tests.noop")
    plan = generic_plan(queries.EXECUTOR_PASS.sql, executor_params(limit=4))
    scan = claim_scan(plan)
    assert scan["Actual Rows"] == 4, json.dumps(scan)
    floor = JobRun.objects.order_by("fire_after", "id").values_list("fire_after", "id")[10]
    plan = generic_plan(
        queries.EXECUTOR_PASS.sql,
        {**executor_params(limit=4), "floor_rank": 0, "floor_at": floor[0], "floor_id": floor[1]},
    )
    scan = claim_scan(plan)
    assert CLAIM_ORDER_BOUND.search(scan.get("Index Cond", "")), scan
    assert scan["Actual Rows"] == 4, json.dumps(scan)


def test_the_generic_claim_stays_ordered_when_a_burst_comes_after_statistics_of_none_due(
    private_runs,
):
    # The statistics of a steady day: a history of finished runs, none claimable. Then
    # a burst falls due before autovacuum analyzes the table again. Planned for the
    # statistics (about one claimable run), the claim read the burst whole from
    # pgsched_run_claimable_idx and sorted it, in every pass; it reads 4 index entries.
    with connection.cursor() as cursor:
        insert_runs(cursor, 20_000, "succeeded")
        cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        insert_runs(cursor, 3_000, "pending")
    plan = generic_plan(queries.EXECUTOR_PASS.sql, executor_params(limit=4))
    scan = claim_scan(plan)
    assert scan["Actual Rows"] == 4, json.dumps(scan)


def test_a_claim_planned_while_the_month_was_small_reads_it_by_index_once_it_is_large(
    private_runs,
):
    # A replica plans its statements at its first passes; a burst planned later fills the
    # month. The plan is kept: made for a month of a page, it joined the claim's update to
    # the month by a sequential scan for each claimed run (400 ms a pass once the month
    # held 100,000 runs, bench/fairness.py with auto_explain). With the executor's
    # settings alone (db.ROLE_PLANNER_SETTINGS, not generic_plan's enable_seqscan = off),
    # no statement of the pass reads the month whole.
    params = executor_params(limit=4)
    order: list[str] = []
    for name in PARAM.findall(queries.EXECUTOR_PASS.sql):
        if name not in order:
            order.append(name)
    numbered = PARAM.sub(lambda m: f"${order.index(m.group(1)) + 1}", queries.EXECUTOR_PASS.sql)
    values = [params[name] for name in order]
    placeholders = ", ".join(["%s"] * len(order))
    with connection.cursor() as cursor:
        insert_runs(cursor, 40, "pending")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for name, value in db_module.ROLE_PLANNER_SETTINGS["executor"].items():
            cursor.execute("SELECT set_config(%s, %s, true)", [name, value])
        cursor.execute(f"PREPARE pgsched_plan_test AS {numbered}")
        try:
            cursor.execute("SAVEPOINT first_pass")
            cursor.execute(f"EXECUTE pgsched_plan_test({placeholders})", values)  # planned now
            cursor.execute("ROLLBACK TO SAVEPOINT first_pass")
            cursor.execute(
                """
                INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
                       status, fire_after, attempts, max_attempts, timeout, note)
                SELECT date_trunc('second', now()) - g * interval '1 s', 'burst-' || g,
                       'tests.noop', '{}', 'default', 'pending', now() - g * interval '1 ms',
                       0, 3, interval '1 minute', ''
                  FROM generate_series(1, 30000) g
                """
            )
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE pgsched_plan_test({placeholders})",
                values,
            )
            plan = cursor.fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE pgsched_plan_test")
    whole = [
        n
        for n in walk(plan)
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "pgsched_job_run"
    ]
    assert not whole, json.dumps(whole)
    (claimed,) = [n for n in walk(plan) if n.get("Subplan Name") == "CTE claimed"]
    assert claimed["Actual Rows"] == 4, json.dumps(claimed)


def test_the_generic_recording_finds_runs_by_primary_key(private_runs):
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
                   status, fire_after, attempts, max_attempts, timeout, note, claimed_by, worker,
                   started_at, claim_expires_at, finished_at)
            SELECT date_trunc('second', now()) - g * interval '1 s', 'k' || g, 'tests.noop',
                   '{}', 'default', CASE WHEN g <= 8 THEN 'running' ELSE 'succeeded' END,
                   now(), 1, 3, interval '1 minute', '',
                   CASE WHEN g <= 8 THEN gen_random_uuid() END, 'w', now(),
                   CASE WHEN g <= 8 THEN now() + interval '2 minutes' END,
                   CASE WHEN g > 8 THEN now() END
              FROM generate_series(1, 20000) g
            """
        )
        cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        cursor.execute("SELECT id, claimed_by FROM pgsched_job_run WHERE status = 'running'")
        held = cursor.fetchall()
    params = {
        **executor_params(limit=0),
        "record_since": None,  # every month
        "ids": [row[0] for row in held],
        "tokens": [row[1] for row in held],
        "results": ["succeeded"] * len(held),
        "errors": [""] * len(held),
        "statuses": ["succeeded"] * len(held),
        "delays": [None] * len(held),
    }
    plan = generic_plan(queries.EXECUTOR_PASS.sql, params, analyze=False)
    used = indexes_used(plan)
    assert "pgsched_run_running_idx" not in used, used
    assert "pgsched_job_run_pkey" in used, used


def test_the_generic_renewal_finds_runs_by_primary_key(db):
    run = enqueue("tests.noop")
    plan = generic_plan(
        queries.EXECUTOR_RENEW.sql,
        {"now": None, "ids": [run.pk], "tokens": [None], "lease_factor": 2.0},
    )
    used = indexes_used(plan)
    assert "pgsched_job_run_pkey" in used, used


@pytest.mark.parametrize("burst_after_statistics", [False, True])
def test_the_generic_claim_by_id_finds_runs_by_primary_key(private_runs, burst_after_statistics):
    # PGSCHED["CLAIMS"] "nats" (the claim of the runs named by the broker's messages,
    # broker/consumer.py), the fair claim's and the held claim's picks: read by primary
    # key, not the claim index. Also when the picks come from a burst planned after
    # statistics of a steady day (none due): the generic plan then probed
    # pgsched_run_claimable_idx for each id ("fire_after <= now AND id = named.id", every
    # due entry per id: 27-86 ms a pass in bench/fairness.py's 100k burst). The status is
    # read as text there, so that no partial index can serve the lookup.
    with connection.cursor() as cursor:
        insert_runs(cursor, 20_000, "succeeded")
        if burst_after_statistics:
            cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        insert_runs(cursor, 3_000, "pending")
        if not burst_after_statistics:
            cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        cursor.execute("SELECT id FROM pgsched_job_run WHERE status = 'pending' LIMIT 4")
        ids = [row[0] for row in cursor.fetchall()]
    plan = generic_plan(
        queries.EXECUTOR_PASS_BY_ID.sql, {**executor_params(limit=4), "claim_ids": ids}
    )
    (claimable,) = [n for n in walk(plan) if n.get("Subplan Name") == "CTE claimable"]
    used = {n.get("Index Name") for n in walk(claimable)}
    assert "pgsched_job_run_pkey" in used, json.dumps(claimable)
    # the claim's indexes are not read (the overlap guard's subplans may be there)
    assert not used & {"pgsched_run_claimable_idx", "pgsched_run_claim_order_idx"}, used
    (lock,) = [n for n in walk(claimable) if n["Node Type"] == "LockRows"]
    scanned = {_index_of(n) for n in walk(lock) if "Scan" in n["Node Type"]}
    assert "pgsched_job_run_pkey" in scanned, json.dumps(lock)
    assert not scanned & {"pgsched_run_claimable_idx", "pgsched_run_claim_order_idx"}, scanned
    assert lock["Actual Rows"] == 4, json.dumps(lock)


def test_the_generic_claim_updates_each_claimed_run_in_its_own_month_only(db):
    # the claim reads each run's scheduled_for with its id: the update that leases it
    # prunes the other months at run time (one index probe per run, not one per month)
    for _ in range(6):
        enqueue("tests.noop")
    enqueue("tests.noop", run_at=now_db() - timedelta(days=62))  # a month of its own, due
    plan = generic_plan(queries.EXECUTOR_PASS.sql, executor_params(limit=10))
    (claimed,) = [
        n for n in walk(plan) if n["Node Type"] == "ModifyTable" and n.get("Actual Rows") == 7
    ]
    (append,) = [n for n in walk(claimed) if n["Node Type"] == "Append"]
    months = len(append["Plans"]) + append.get("Subplans Removed", 0)
    assert months >= 5, json.dumps(append)
    probes = sum(scan["Actual Loops"] for scan in append["Plans"])
    assert probes == 7, json.dumps(append)  # one per claimed run
    # by (id, scheduled_for) or (scheduled_for, id): either finds the one row (read
    # directly or as a bitmap, as the month's statistics make it cheaper)
    assert {parent_index(_index_of(scan)) for scan in append["Plans"]} <= {
        "pgsched_job_run_pkey",
        "pgsched_run_recent_idx",
    }, json.dumps(append)


def _tenant_runs(cursor: Any, tenant: str, count: int) -> None:
    insert_runs(cursor, count, "pending")
    cursor.execute(
        "UPDATE pg_temp.pgsched_job_run SET tenant = %s,"
        " idempotency_key = idempotency_key || %s WHERE tenant = ''",
        [tenant, tenant],
    )


def _lateral_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        n
        for n in walk(plan)
        if n.get("Relation Name") == "pgsched_job_run" and "tenant" in n.get("Index Cond", "")
    ]


def test_the_fair_and_held_claims_read_each_tenants_runs_from_its_own_index(private_runs):
    # a burst of one tenant ahead of another's few: each tenant's runs are a range of
    # pgsched_run_tenant_due_idx, never a walk through the burst in the claim's order
    with connection.cursor() as cursor:
        _tenant_runs(cursor, "a-burst", 3_000)
        _tenant_runs(cursor, "b-small", 3)
        cursor.execute("ANALYZE pg_temp.pgsched_job_run")
    base = {"now": None, "live_since": None, "jobs": ["tests.noop"], "queues": None}
    fair = generic_plan(
        queries.EXECUTOR_FAIR_PICK.sql,
        {**base, "limit": 8, "after": "", "tenants": 64, "default_weight": 1,
         "default_held": False},
    )  # fmt: skip
    held = generic_plan(
        queries.EXECUTOR_HELD_PICK.sql,
        {**base, "limit": 8, "keys": ["a-burst", "b-small"], "maxes": [4, 4]},
    )
    lock = generic_plan(
        queries.EXECUTOR_HELD_LOCK.sql, {**base, "default_max_running": 4}, analyze=False
    )
    assert not [n for n in walk(lock) if n.get("Index Name") == "pgsched_run_tenant_idx"]
    for plan in (fair, held):
        scans = _lateral_scans(plan)
        assert scans, json.dumps(plan)
        assert {s["Index Name"] for s in scans} <= {
            "pgsched_run_tenant_due_idx",
            "pgsched_run_tenant_running_idx",
        }, json.dumps(scans)
        # bounded by the limit (8; the fair claim reads twice: demand, then picks),
        # never by the burst's 3,000
        read = sum(s["Actual Rows"] * s["Actual Loops"] for s in scans)
        assert read <= 4 * 8, json.dumps(scans)
    # the fair claim's tenants: a probe each of the tenants' claimable runs, not of
    # their history (pgsched_run_tenant_idx, which holds every finished run)
    visits = [n for n in walk(fair) if n.get("Index Name") == "pgsched_run_tenant_idx"]
    assert not visits, json.dumps(visits)


def test_the_fair_and_held_claims_read_a_burst_after_statistics_of_another_tenant_alone(
    private_runs,
):
    # The statistics of a quiet time: one tenant's few runs (every run is "b-small"s).
    # Then another tenant's burst, before autovacuum analyzes again. Planned for those
    # statistics ("tenant = b-small" is every row), the fair claim counted b-small's
    # due runs by walking the burst in pgsched_run_claim_order_idx's order, filtering
    # on the tenant (30,486 rows removed a pass in bench/fairness.py, 42 ms).
    with connection.cursor() as cursor:
        _tenant_runs(cursor, "b-small", 20)
        cursor.execute("ANALYZE pg_temp.pgsched_job_run")
        _tenant_runs(cursor, "a-burst", 5_000)
    base = {"now": None, "live_since": None, "jobs": ["tests.noop"], "queues": None}
    fair = generic_plan(
        queries.EXECUTOR_FAIR_PICK.sql,
        {**base, "limit": 8, "after": "", "tenants": 64, "default_weight": 1,
         "default_held": False},
    )  # fmt: skip
    held = generic_plan(
        queries.EXECUTOR_HELD_PICK.sql,
        {**base, "limit": 8, "keys": ["a-burst", "b-small"], "maxes": [4, 4]},
    )
    lock = generic_plan(queries.EXECUTOR_HELD_LOCK.sql, {**base, "default_max_running": 4})
    for plan in (fair, held, lock):
        runs = [n for n in walk(plan) if n.get("Relation Name") == "pgsched_job_run"]
        filtered = [n for n in runs if "tenant)::text = " in n.get("Filter", "")]
        assert not filtered, json.dumps(filtered)
        removed = sum(n.get("Rows Removed by Filter", 0) * n["Actual Loops"] for n in runs)
        assert removed <= 8, json.dumps(runs)
