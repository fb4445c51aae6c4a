"""django_pgsched.history.runs(): keyset pages of one tenant's runs, bound and checked."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.core import signing
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_pgsched import history
from django_pgsched.history import ALL_TENANTS, InvalidParameter
from django_pgsched.history.queries import check_query, select
from tests.conftest import at
from tests.integration.history_data import ensure_months, history_run, make

DAY = at("2026-03-10 00:00:00")


def every_page(**query: object) -> list[list[int]]:
    pages, cursor = [], None
    while True:
        page = history.runs(**query, cursor=cursor)  # type: ignore[arg-type]
        pages.append([r.pk for r in page.items])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def minutes(n: int) -> datetime:
    return DAY + timedelta(minutes=n)


def test_pages_are_newest_first_and_cover_the_tenants_runs_once(db):
    acme = make([history_run("acme", minutes(i % 7)) for i in range(23)])  # ties on the time
    make([history_run("globex", minutes(i)) for i in range(5)])
    make([history_run("", minutes(i)) for i in range(3)])
    pages = every_page(tenant="acme", limit=5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    flat = [pk for p in pages for pk in p]
    expected = sorted(acme, key=lambda r: (r.scheduled_for, r.pk), reverse=True)
    assert flat == [r.pk for r in expected]
    assert history.runs(tenant="acme", limit=23).next_cursor is None  # exactly one page
    assert {r.tenant for r in history.runs(tenant="", limit=500).items} == {""}
    assert len(history.runs(tenant="", limit=500).items) == 3
    everyone = history.runs(tenant=ALL_TENANTS, limit=500).items
    assert {r.tenant for r in everyone} == {"acme", "globex", ""} and len(everyone) == 31
    assert history.runs(tenant="initech").items == []


def test_pages_stay_stable_while_runs_are_added(db):
    first = make([history_run("acme", minutes(i)) for i in range(12)])
    page = history.runs(tenant="acme", limit=4)
    seen = [r.pk for r in page.items]
    boundary = page.items[-1].scheduled_for
    # newer runs, a run at the boundary's very time (a later id), and older ones
    make([history_run("acme", minutes(100 + i)) for i in range(5)])
    make([history_run("acme", boundary)])
    older = make([history_run("acme", minutes(-10 - i)) for i in range(3)])
    cursor = page.next_cursor
    while cursor is not None:
        page = history.runs(tenant="acme", limit=4, cursor=cursor)
        seen += [r.pk for r in page.items]
        cursor = page.next_cursor
        make([history_run("acme", minutes(200))])  # more keep arriving
    assert len(seen) == len(set(seen))  # nothing twice
    assert {r.pk for r in first} <= set(seen)  # nothing existing skipped
    assert {r.pk for r in older} <= set(seen)  # older arrivals are on later pages


def test_filters_schedule_status_and_the_time_range(db):
    runs = make(
        [
            history_run("acme", minutes(0), schedule="report"),
            history_run("acme", minutes(1), schedule="report", status="failed"),
            history_run("acme", minutes(2), schedule="sync", status="missed"),
            history_run("acme", minutes(3), schedule=None, status="pending"),
            history_run("acme", minutes(60 * 24), schedule="report"),  # the next day
        ]
    )

    def ids(**filters: object) -> set[int]:
        return {r.pk for r in history.runs(tenant="acme", **filters).items}  # type: ignore[arg-type]

    assert ids(schedule="report") == {runs[0].pk, runs[1].pk, runs[4].pk}
    assert ids(status="failed") == {runs[1].pk}
    assert ids(status=["failed", "missed"]) == {runs[1].pk, runs[2].pk}
    assert ids(since=DAY, until=DAY + timedelta(days=1)) == {r.pk for r in runs[:4]}
    assert ids(since=minutes(1), until=minutes(3)) == {runs[1].pk, runs[2].pk}  # [since, until)
    assert ids(schedule="report", status="succeeded", since=DAY, until=minutes(60)) == {runs[0].pk}


def test_a_cursor_is_bound_to_its_tenant_and_filters(db):
    make([history_run("acme", minutes(i)) for i in range(6)])
    make([history_run("globex", minutes(i)) for i in range(6)])
    cursor = history.runs(tenant="acme", limit=2).next_cursor
    assert cursor is not None
    assert len(history.runs(tenant="acme", limit=3, cursor=cursor).items) == 3  # limit may change
    refusals = [
        {"tenant": "globex"},
        {"tenant": ALL_TENANTS},
        {"tenant": "acme", "status": "succeeded"},
        {"tenant": "acme", "schedule": "report"},
        {"tenant": "acme", "since": DAY},
        {"tenant": "acme", "until": minutes(60)},
    ]
    for query in refusals:
        with pytest.raises(InvalidParameter, match=r"^cursor: ") as info:
            history.runs(**query, cursor=cursor)  # type: ignore[arg-type]
        assert info.value.parameter == "cursor"
    # altered or forged: a payload of our shape signed by anyone else, or edited
    payload = signing.loads(cursor, salt="django_pgsched.history.cursor")
    forged = signing.dumps(payload, key="not-our-secret", salt="django_pgsched.history.cursor")
    unsalted = signing.dumps(payload)
    edited = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    for bad in (forged, unsalted, edited, "", "x" * 2000, "a:b:c"):
        with pytest.raises(InvalidParameter, match=r"^cursor: "):
            history.runs(tenant="acme", cursor=bad)


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ({"tenant": None}, "tenant"),
        ({"tenant": 7}, "tenant"),
        ({"tenant": "a\nb"}, "tenant"),
        ({"tenant": "acme", "status": "done"}, "status"),
        ({"tenant": "acme", "status": []}, "status"),
        ({"tenant": "acme", "schedule": ""}, "schedule"),
        ({"tenant": "acme", "schedule": 5}, "schedule"),
        ({"tenant": "acme", "since": datetime(2026, 3, 1)}, "since"),
        ({"tenant": "acme", "until": "2026-03-01"}, "until"),
        ({"tenant": "acme", "since": DAY, "until": DAY}, "until"),
        ({"tenant": "acme", "limit": 0}, "limit"),
        ({"tenant": "acme", "limit": 501}, "limit"),
        ({"tenant": "acme", "limit": True}, "limit"),
        ({"tenant": "acme", "cursor": 5}, "cursor"),
    ],
)
def test_bad_parameters_are_refused_by_name(db, query, parameter):
    with pytest.raises(InvalidParameter) as info:
        history.runs(**query)
    assert info.value.parameter == parameter and str(info.value).startswith(f"{parameter}: ")


def test_a_page_is_one_statement_and_never_counts(db):
    make([history_run("acme", minutes(i)) for i in range(5)])
    cursor = history.runs(tenant="acme", limit=2).next_cursor
    with CaptureQueriesContext(connection) as ctx:
        history.runs(tenant="acme", limit=2, cursor=cursor, since=None)
    (sql,) = [q["sql"] for q in ctx.captured_queries]
    assert "COUNT(" not in sql.upper() and re.search(r"LIMIT 3$", sql), sql


def fill(tenants: int, days: int, per_day: int) -> None:
    """Runs of ``tenants`` tenants (and of no tenant) over ``days`` days, then ANALYZE."""
    start = DAY - timedelta(days=days // 2)
    ensure_months([start + timedelta(days=d) for d in range(days + 1)])
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (schedule_name, scheduled_for, idempotency_key, job,
                   queue, status, fire_after, attempts, max_attempts, timeout, started_at,
                   finished_at, tenant)
            SELECT 'report-' || (g %% 5), t, 'test:' || gen_random_uuid(), 'tests.noop',
                   'default', 'succeeded', t, 1, 3, interval '30 seconds', t,
                   t + interval '1 second',
                   CASE WHEN g %% (%(tenants)s + 1) = 0 THEN ''
                        ELSE 'tenant-' || (g %% (%(tenants)s + 1)) END
              FROM generate_series(1, %(n)s) AS g,
                   LATERAL (SELECT date_trunc('second', %(start)s::timestamptz
                                   + (g * %(step)s) * interval '1 second')) AS c(t)
            """,
            {
                "tenants": tenants,
                "n": days * per_day,
                "start": start,
                "step": 86400 / per_day,
            },
        )
        cursor.execute("ANALYZE pgsched_job_run")


def explain(query: object, *, cursor: str | None = None) -> str:
    from django_pgsched.history.cursors import decode

    position = decode(cursor, query.digest()) if cursor else None  # type: ignore[attr-defined]
    qs = select(query, position)[: query.limit + 1]  # type: ignore[attr-defined]
    return qs.explain()


def test_one_tenant_and_one_day_read_the_tenant_index(private_runs):
    fill(tenants=20, days=30, per_day=2000)
    query = check_query(tenant="tenant-3", since=DAY, until=DAY + timedelta(days=1), limit=100)
    plan = explain(query)
    assert "pgsched_run_tenant_idx" in plan and "Seq Scan" not in plan, plan
    # the index is read for the tenant's day only (whether in order or as a bitmap)
    assert re.search(
        r"Index Cond: \(\(\(tenant\)::text = 'tenant-3'::text\) AND \(scheduled_for >= .*"
        r"AND \(scheduled_for < ",
        plan,
    ), plan
    day = {"since": DAY, "until": DAY + timedelta(days=1)}
    cursor = history.runs(tenant="tenant-3", **day, limit=20).next_cursor
    assert cursor is not None
    plan = explain(check_query(tenant="tenant-3", **day, limit=20), cursor=cursor)
    assert "pgsched_run_tenant_idx" in plan and "Seq Scan" not in plan, plan
    assert re.search(r"Index Cond: .*ROW\(scheduled_for, id\) < ROW\(", plan), plan
    # a small tenant's pages, even without a range, read its entries only
    make([history_run("rare", DAY - timedelta(days=i), status="cancelled") for i in range(12)])
    with connection.cursor() as c:
        c.execute("ANALYZE pgsched_job_run")
    plan = explain(check_query(tenant="rare", limit=10))
    assert "pgsched_run_tenant_idx" in plan and "Seq Scan" not in plan, plan
    # a filter by status or schedule stays within the tenant's day of the index
    plan = explain(check_query(tenant="tenant-3", **day, status="succeeded", schedule="report-1"))
    assert "pgsched_run_tenant_idx" in plan and "Seq Scan" not in plan, plan


def partitioned() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_partitioned_table"
            " WHERE partrelid = 'pgsched_job_run'::regclass)"
        )
        return bool(cursor.fetchone()[0])


def test_a_days_page_reads_only_its_months_partition(db):
    """With monthly partitions, a day's page reads one month."""
    assert partitioned()  # a regression that undid the partitions fails here, never skips
    for month in (1, 2, 3, 4):
        make([history_run("acme", at(f"2026-0{month}-10 12:00:00") + timedelta(minutes=i),
                          status="cancelled") for i in range(3)])  # fmt: skip
    march = {"since": at("2026-03-10 00:00:00"), "until": at("2026-03-11 00:00:00")}
    query = check_query(tenant="acme", **march, limit=2)
    scanned = set(re.findall(r"on (pgsched_job_run\w*)", explain(query)))
    assert scanned == {"pgsched_job_run_p202603"}, explain(query)
    cursor = history.runs(tenant="acme", **march, limit=2).next_cursor
    assert cursor is not None
    scanned = set(re.findall(r"on (pgsched_job_run\w*)", explain(query, cursor=cursor)))
    assert scanned == {"pgsched_job_run_p202603"}, explain(query, cursor=cursor)
    # a cursor alone (no range) still prunes the months after its position
    open_query = check_query(tenant="acme", limit=2)
    first = history.runs(tenant="acme", limit=2)
    page = history.runs(tenant="acme", limit=2, cursor=first.next_cursor)
    while page.items[-1].scheduled_for >= at("2026-03-01 00:00:00"):
        page = history.runs(tenant="acme", limit=2, cursor=page.next_cursor)
    plan = explain(open_query, cursor=page.next_cursor)
    assert "pgsched_job_run_p202604" not in plan and "pgsched_job_run_p202603" not in plan, plan
