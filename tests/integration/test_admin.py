"""The admin against real PostgreSQL: pages, query budgets, index plans, actions, permissions.

Pages are fetched with Django's test client as a real user; "fast" is proven
by query counts that do not grow with the rows and by EXPLAIN plans (sequential
scans disabled) that read an index, in order wherever the matching rows are many.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.db.models.signals import pre_save
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_pgsched import api, enqueue, events
from django_pgsched.admin.common import BoundedCountPaginator
from django_pgsched.admin.runs import JobRunAdmin
from django_pgsched.admin.schedule_columns import RECENT_RUNS_SQL
from django_pgsched.engine.executor import Executor
from django_pgsched.models import Attempt, JobRun, Schedule, db_now
from django_pgsched.timing import describe, timetable
from tests.conftest import seconds
from tests.testapp import jobs

SCHEDULES = reverse("admin:pgsched_schedule_changelist")
RUNS = reverse("admin:pgsched_jobrun_changelist")
ADD_SCHEDULE = reverse("admin:pgsched_schedule_add")


def schedule_url(s: Schedule, view: str = "change") -> str:
    return reverse(f"admin:pgsched_schedule_{view}", args=[s.pk])


def run_url(r: JobRun, view: str = "change") -> str:
    return reverse(f"admin:pgsched_jobrun_{view}", args=[r.pk])


_start: list[datetime] = []


@pytest.fixture(autouse=True)
def _fresh_start() -> None:
    _start.clear()


def whole_seconds_ago(n: float) -> datetime:
    """``n`` seconds before the database's time at this test's first call (a whole second)."""
    if not _start:
        _start.append(db_now().replace(microsecond=0))
    return _start[0] - timedelta(seconds=n)


def new_run(
    *,
    name: str | None = None,
    schedule: Schedule | None = None,
    status: str = "succeeded",
    scheduled_for: datetime | None = None,
    job: str = "tests.noop",
    queue: str = "default",
    **fields: Any,
) -> JobRun:
    """An unsaved run in a consistent state (the CHECKs hold) for ``status``."""
    at = scheduled_for or whole_seconds_ago(60)
    values: dict[str, Any] = {
        "schedule": schedule,
        "schedule_name": name or (schedule.name if schedule else None),
        "scheduled_for": at,
        "idempotency_key": f"test:{uuid.uuid4()}",
        "job": job,
        "kwargs": {},
        "queue": queue,
        "status": status,
        "fire_after": at,
        "attempts": 0 if status == "pending" else 1,
        "max_attempts": 3,
        "timeout": seconds(30),
    }
    if status in ("succeeded", "failed", "cancelled"):
        values |= {"started_at": at, "finished_at": at + seconds(1), "worker": "replica-1"}
    if status == "running":
        values |= {
            "started_at": at,
            "worker": "replica-1",
            "claimed_by": uuid.uuid4(),
            "claim_expires_at": db_now() + seconds(45),
        }
    values |= fields
    return JobRun(**values)


def make_runs(runs: Iterable[JobRun]) -> list[JobRun]:
    return JobRun.objects.bulk_create(list(runs))


def staff(client: Client, django_user_model: Any, *codenames: str) -> Client:
    """``client`` logged in as a staff user holding exactly these pgsched permissions."""
    user = django_user_model.objects.create_user("operator", password="x", is_staff=True)
    perms = Permission.objects.filter(content_type__app_label="pgsched", codename__in=codenames)
    assert perms.count() == len(codenames)
    user.user_permissions.set(perms)
    client.force_login(user)
    return client


def strip(content: str, schedule: Schedule) -> list[str]:
    """The statuses in ``schedule``'s strip on a changelist page, left to right."""
    row = re.search(
        rf"<tr[^>]*>(?:(?!</tr>).)*?>{re.escape(schedule.name)}</a>(.*?)</tr>", content, re.S
    )
    assert row, f"no row for {schedule.name}"
    return re.findall(r'class="pgsched-cell pgsched-(\w+)"', row.group(1))


def queries_of(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    return [q["sql"] for q in ctx.captured_queries]


def offered_actions(page: Any) -> set[str]:
    form = page.context["action_form"]
    return {name for name, _ in form.fields["action"].choices if name} if form else set()


def action(client: Client, url: str, name: str, objs: Iterable[Any]) -> Any:
    data = {"action": name, "_selected_action": [o.pk for o in objs], "index": 0}
    return client.post(url, data, follow=True)


# -- words ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("0 30 9 * * MON-FRI", "At 09:30:00 AM, Monday through Friday"),  # seconds first
        ("30 0 2 * * *", "At 02:00:30 AM"),  # not "every minute 30 of hour 0 on day 2"
        ("*/15 * * * *", "Every 15 minutes"),
        ("0 9 * * *", "At 09:00 AM"),
        ("*/10 * * * * *", "Every 10 seconds"),
        ("@daily", "At 12:00 AM"),
        # Vixie: both day fields restricted -> either matches; a '*' step -> both must
        ("0 0 13 * FRI", "At 12:00 AM, on day 13 of the month or on Friday"),
        ("0 0 */2 * MON", "At 12:00 AM, every 2 days, but only on Monday"),
    ],
)
def test_cron_reads_in_words_in_our_dialect(expression, words):
    assert describe.cron(expression) == words


def test_the_day_rule_in_words_matches_the_timetable():
    # "or" really means either: the 13th that is not a Friday fires
    either = timetable.cron("0 0 13 * FRI")
    assert either.contains(datetime.fromisoformat("2026-01-13T00:00:00+00:00"))  # a Tuesday
    assert either.contains(datetime.fromisoformat("2026-01-16T00:00:00+00:00"))  # a Friday
    # "but only" really means both: an odd day that is not a Monday does not
    both = timetable.cron("0 0 */2 * MON")
    assert not both.contains(datetime.fromisoformat("2026-01-07T00:00:00+00:00"))  # Wednesday
    assert both.contains(datetime.fromisoformat("2026-01-05T00:00:00+00:00"))  # Monday the 5th


def test_nicknames_in_words_describe_the_same_grid():
    for nickname, expansion in describe._NICKNAMES.items():
        a, b = timetable.cron(nickname), timetable.cron(expansion)
        t = datetime.fromisoformat("2026-02-27T13:00:00+00:00")
        assert list(a.occurrences(t, t + timedelta(days=400))) == list(
            b.occurrences(t, t + timedelta(days=400))
        )


@pytest.mark.parametrize(
    ("every", "words"),
    [
        (1, "Every second"),
        (900, "Every 15 minutes"),
        (3600, "Every hour"),
        (6000, "Every 1 h 40 min"),
    ],
)
def test_intervals_read_in_words(every, words):
    assert describe.interval(seconds(every)) == words


def test_leases_read_in_words():
    now = datetime.fromisoformat("2026-01-01T12:00:00+00:00")
    assert describe.lease("running", "replica-1", now + seconds(12), now) == (
        "held by replica-1, 12 s left"
    )
    assert describe.lease("running", "replica-1", now - seconds(3), now) == (
        "expired 3 s ago (held by replica-1)"
    )
    assert describe.lease("succeeded", "replica-1", None, now) == "—"


# -- schedule list ----------------------------------------------------------------------------


def test_schedule_list_shows_words_state_and_the_strip(admin_client, make_schedule):
    cron = make_schedule(name="weekday-report", cron="0 30 9 * * MON-FRI")
    every = make_schedule(name="every-quarter", cron=None, interval=seconds(900))
    paused = make_schedule(name="paused-one", status="paused")
    statuses = ["succeeded", "failed", "succeeded", "cancelled", "failed"]
    make_runs(
        new_run(schedule=cron, status=s, scheduled_for=whole_seconds_ago(600 - 60 * i))
        for i, s in enumerate(statuses)
    )
    content = admin_client.get(SCHEDULES).content.decode()
    assert "At 09:30:00 AM, Monday through Friday" in content
    assert "Every 15 minutes" in content
    assert strip(content, cron) == statuses  # oldest on the left, newest on the right
    assert strip(content, every) == [] and strip(content, paused) == []
    assert "pgsched-badge pgsched-paused" in content


def test_strip_keeps_the_last_ten_due_runs_including_run_now(admin_client, make_schedule):
    s = make_schedule(name="busy")
    old = [new_run(schedule=s, scheduled_for=whole_seconds_ago(1000 - i)) for i in range(15)]
    failed = new_run(schedule=s, status="failed", scheduled_for=whole_seconds_ago(100))
    ahead = new_run(schedule=s, status="pending", scheduled_for=whole_seconds_ago(-3))
    make_runs([*old, failed, ahead])
    run_now = enqueue("tests.noop", schedule_name="busy")  # not an occurrence, same name
    content = admin_client.get(SCHEDULES).content.decode()
    cells = strip(content, s)
    assert len(cells) == 10
    assert cells[-2:] == ["failed", "pending"]  # then the run-now run; the one ahead is not due
    last_run = re.search(r'href="([^"]+)"><span class="pgsched-badge pgsched-pending"', content)
    assert last_run and last_run.group(1) == run_url(run_now)


def test_schedule_list_costs_the_same_queries_for_3_or_60_schedules(admin_client, make_schedule):
    def fill(n: int, runs_each: int) -> None:
        for i in range(n):
            s = make_schedule(name=f"s-{n}-{i}")
            make_runs(
                new_run(schedule=s, scheduled_for=whole_seconds_ago(100 + k))
                for k in range(runs_each)
            )

    fill(3, 2)
    few = queries_of(admin_client, SCHEDULES)
    fill(57, 15)
    many = queries_of(admin_client, SCHEDULES)
    assert Schedule.objects.count() == 60
    assert len(few) == len(many), "\n".join(many)
    # the whole strip is one query (the other: the stranded-runs warning, one per page)
    assert sum("pgsched_job_run" in q and "stranded" not in q for q in many) == 1


# -- run list ---------------------------------------------------------------------------------


def test_run_list_costs_the_same_queries_for_50_or_500_runs(admin_client, make_schedule):
    s = make_schedule(name="many")
    make_runs(new_run(schedule=s, scheduled_for=whole_seconds_ago(1000 + i)) for i in range(50))
    few = queries_of(admin_client, RUNS)
    make_runs(
        new_run(name="many", status="running", scheduled_for=whole_seconds_ago(i))
        for i in range(450)
    )
    many = queries_of(admin_client, RUNS)
    assert len(few) == len(many), "\n".join(many)
    assert not any("JOIN" in q and "pgsched_job_run" in q for q in many)  # no related object read


def test_run_list_never_counts_the_whole_table(admin_client, monkeypatch):
    monkeypatch.setattr(BoundedCountPaginator, "exact_limit", 20)
    make_runs(new_run(scheduled_for=whole_seconds_ago(i)) for i in range(150))
    sql = queries_of(admin_client, RUNS)
    counts = [q for q in sql if "COUNT(" in q.upper() and "pgsched_job_run" in q]
    assert counts and all("LIMIT 21" in q for q in counts), counts
    response = admin_client.get(RUNS)
    assert re.search(r"about</span> \d+ runs", response.content.decode())
    assert response.context["cl"].paginator.num_pages >= 2


@pytest.mark.parametrize(
    ("query", "index", "sorts"),
    [
        ("", "pgsched_run_recent_idx", False),
        ("?status__exact=failed", "pgsched_run_unsuccessful_idx", False),
        ("?status__exact=cancelled", "pgsched_run_unsuccessful_idx", False),
        ("?status__exact=succeeded", "pgsched_run_recent_idx", False),  # dense: filter in order
        # few: sorted; either partial index over the claimable runs serves it
        ("?status__exact=pending", "pgsched_run_claimable_idx|pgsched_run_claim_order_idx", True),
        ("?status__exact=running", "pgsched_run_running_idx", True),  # few: sorted
        ("?queue=reports", "pgsched_run_by_queue_idx", False),
    ],
)
def test_each_run_filter_reads_an_index(
    admin_client, make_schedule, monkeypatch, query, index, sorts
):
    monkeypatch.setattr(JobRunAdmin, "list_per_page", 10)
    make_schedule(name="nightly", queue="reports")
    make_runs(
        new_run(name="nightly", queue="reports", status=status, scheduled_for=whole_seconds_ago(i))
        for i in range(60)
        for status in [("failed", "cancelled", "succeeded", "pending", "running")[i % 5]]
    )
    sql = [q for q in queries_of(admin_client, RUNS + query) if "pgsched_job_run" in q]
    page = [q for q in sql if q.endswith("LIMIT 10")]
    count = [q for q in sql if "COUNT(*)" in q]
    assert len(page) == 1 and len(count) == 1, sql
    for statement in (*page, *count):
        plan = explain(statement)
        assert any(name in plan for name in index.split("|")) and "Seq Scan" not in plan, plan
        # the index gives the page its order (the count's order, over a few small months, may
        # come from a sort: nothing is returned in it)
        assert sorts or statement in count or "Sort" not in plan, plan


def fill_history(schedules: list[Schedule], runs: int) -> None:
    """``runs`` past runs, round-robin over ``schedules``: nine occurrences in ten, one
    one-off by name (run now, a retry); a seventh in the queue "reports". Then ANALYZE,
    so the plans below are the planner's own choice (no enable_* switched off): use
    with the ``private_runs`` fixture, so the statistics stay with the test."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO pgsched_job_run (schedule_id, schedule_name, scheduled_for,
                   idempotency_key, job, queue, status, fire_after, attempts, max_attempts,
                   timeout, started_at, finished_at, worker)
            SELECT CASE WHEN g %% 10 = 0 THEN NULL ELSE s.id END, s.name, t,
                   'test:' || gen_random_uuid(), 'tests.noop',
                   CASE WHEN g %% 7 = 0 THEN 'reports' ELSE 'default' END,
                   'succeeded', t, 1, 3, interval '30 seconds', t, t + interval '1 second', 'w'
              FROM generate_series(1, %(runs)s) AS g
              JOIN unnest(%(ids)s::bigint[], %(names)s::text[]) WITH ORDINALITY
                   AS s(id, name, k) ON s.k = g %% %(n)s + 1,
                   LATERAL (SELECT date_trunc('second', statement_timestamp())
                                   - g * interval '1 minute') AS c(t)
            """,
            {
                "runs": runs,
                "ids": [x.pk for x in schedules],
                "names": [x.name for x in schedules],
                "n": len(schedules),
            },
        )
        cursor.execute("ANALYZE pgsched_job_run")


def honest_plan(sql: str, params: Any = None) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_strip_reads_two_index_ranges_per_schedule(make_schedule, private_runs):
    schedules = [make_schedule(name=f"h-{i}") for i in range(20)]
    fill_history(schedules, 4000)
    params = {"ids": [s.pk for s in schedules[:5]], "names": [s.name for s in schedules[:5]]}
    plan = honest_plan(RECENT_RUNS_SQL, params | {"limit": 10})
    assert "Seq Scan" not in plan and "Bitmap" not in plan, plan
    # its occurrences, from the unique occurrence index; its one-offs, from their own
    assert "Index Scan Backward using pgsched_one_run_per_occurrence" in plan, plan
    assert "Index Scan Backward using pgsched_run_one_off_idx" in plan, plan
    assert plan.count("Limit") >= 3, plan  # each range stops after the strip's length


def test_the_strip_and_the_run_filter_take_occurrences_by_id_and_one_offs_by_name(
    admin_client, make_schedule
):
    s = make_schedule(name="nightly")
    other = make_schedule(name="other")
    occurrences = make_runs(
        new_run(schedule=s, scheduled_for=whole_seconds_ago(600 - 60 * i)) for i in range(3)
    )
    failed = new_run(schedule=s, status="failed", scheduled_for=whole_seconds_ago(200))
    (failed,) = make_runs([failed])
    retry, _ = api.retry_run(failed)  # a one-off carrying the name
    run_now = api.run_schedule_now(s)  # a one-off too
    make_runs(new_run(schedule=other, scheduled_for=whole_seconds_ago(100 + i)) for i in range(5))
    make_runs([new_run(name="nightly-ish"), new_run(name="other")])  # one-offs of other names
    expected = {r.pk for r in (*occurrences, failed, retry, run_now)}
    page = admin_client.get(RUNS + "?schedule=nightly")
    assert {r.pk for r in page.context["cl"].result_list} == expected
    strip_ids = re.findall(
        r'class="pgsched-cell pgsched-\w+" href="[^"]*/(\d+)/change/"',
        admin_client.get(schedule_url(s)).content.decode(),
    )
    assert {int(i) for i in strip_ids} == expected
    s.delete()  # its history keeps the name and is found by it, as one-offs
    page = admin_client.get(RUNS + "?schedule=nightly")
    assert {r.pk for r in page.context["cl"].result_list} == expected


def admin_run_queries(client: Client, query: str) -> list[str]:
    """The page and the count of the run list behind ``query``."""
    sql = [q for q in queries_of(client, RUNS + query) if "pgsched_job_run" in q]
    page = [q for q in sql if re.search(r"LIMIT \d+$", q) and "COUNT(" not in q.upper()]
    count = [q for q in sql if "COUNT(" in q.upper()]
    assert len(page) == 1 and len(count) == 1, "\n".join(sql)
    return [*page, *count]


def test_the_schedule_filter_reads_both_index_ranges(
    admin_client, make_schedule, monkeypatch, private_runs
):
    monkeypatch.setattr(JobRunAdmin, "list_per_page", 10)
    schedules = [make_schedule(name=f"h-{i}") for i in range(20)]
    fill_history(schedules, 4000)
    rare = make_schedule(name="rare")
    make_runs(
        new_run(schedule=rare, scheduled_for=whole_seconds_ago(100 + 60 * i)) for i in range(8)
    )
    make_runs(new_run(name="rare", scheduled_for=whole_seconds_ago(130 + 60 * i)) for i in range(5))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgsched_job_run")
    for statement in admin_run_queries(admin_client, "?schedule=rare"):
        plan = honest_plan(statement)
        assert "Seq Scan on pgsched_job_run" not in plan, plan
        assert "BitmapOr" in plan, plan
        assert "Bitmap Index Scan on pgsched_one_run_per_occurrence" in plan, plan
        assert "Bitmap Index Scan on pgsched_run_one_off_idx" in plan, plan
    # a schedule with many runs: never a sequential scan either
    for statement in admin_run_queries(admin_client, "?schedule=h-3"):
        plan = honest_plan(statement)
        assert "Seq Scan on pgsched_job_run" not in plan, plan
        assert "pgsched_run_" in plan or "pgsched_one_run_per_occurrence" in plan, plan
    page = admin_client.get(RUNS + "?schedule=rare")
    assert len(page.context["cl"].result_list) == 10
    assert page.context["cl"].paginator.count == 13


def test_a_queue_filter_other_than_default_reads_the_partial_queue_index(
    admin_client, make_schedule, monkeypatch, private_runs
):
    monkeypatch.setattr(JobRunAdmin, "list_per_page", 10)
    schedules = [make_schedule(name=f"h-{i}") for i in range(20)]
    fill_history(schedules, 4000)
    make_runs(new_run(queue="rare", scheduled_for=whole_seconds_ago(100 + i)) for i in range(12))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pgsched_job_run")
    for statement in admin_run_queries(admin_client, "?queue=rare"):  # page and count
        plan = honest_plan(statement)
        assert "pgsched_run_by_queue_idx" in plan and "Seq Scan" not in plan, plan
    # pages of a big queue: in order from the index, stopping after the page (its count,
    # a seventh of this small table spread over every page, may rightly read the table)
    page, _count = admin_run_queries(admin_client, "?queue=reports")
    plan = honest_plan(page)
    assert "Index Scan Backward using pgsched_run_by_queue_idx" in plan, plan
    assert "Sort" not in plan, plan
    # "default" is left out of that index: the dense case, read in order with a filter
    page, _count = admin_run_queries(admin_client, "?queue=default")
    plan = honest_plan(page)
    assert "Index Scan Backward using pgsched_run_recent_idx" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan
    page = admin_client.get(RUNS + "?queue=rare")
    assert len(page.context["cl"].result_list) == 10
    assert page.context["cl"].paginator.count == 12


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan")
        cursor.execute("RESET enable_bitmapscan")
    return plan


def test_run_page_shows_lease_attempts_and_lateness(admin_client):
    run = new_run(status="running", attempts=2, scheduled_for=whole_seconds_ago(30))
    run.fire_after = run.scheduled_for
    run.started_at = run.scheduled_for + seconds(2)
    run.save()
    Attempt.objects.create(
        job_run=run,
        number=1,
        status="failed",
        started_at=run.scheduled_for,
        finished_at=run.scheduled_for + seconds(1),
        worker="replica-2",
        error="Traceback (most recent call last):\nRuntimeError: disk full",
    )
    content = admin_client.get(run_url(run)).content.decode()
    assert re.search(r"held by replica-1, \d+ s left", content)
    assert "RuntimeError: disk full" in content and "replica-2" in content
    assert ">2 s<" in content  # late by: started 2 s after it was due
    assert "2/3" in content
    listing = admin_client.get(RUNS).content.decode()
    assert re.search(r"held by replica-1, \d+ s left", listing)


def test_search_finds_a_run_by_id_or_key(admin_client):
    a, b = make_runs([new_run(), new_run(idempotency_key="order-42")])
    by_id = admin_client.get(RUNS, {"q": str(a.pk)}).context["cl"].result_list
    by_key = admin_client.get(RUNS, {"q": "order-42"}).context["cl"].result_list
    assert [r.pk for r in by_id] == [a.pk] and [r.pk for r in by_key] == [b.pk]


# -- schedule form ----------------------------------------------------------------------------


def schedule_form(**fields: Any) -> dict[str, Any]:
    data = {
        "name": "nightly",
        "job": "tests.noop",
        "kwargs": "{}",
        "cron": "",
        "interval": "",
        "anchor_0": "",
        "anchor_1": "",
        "misfire_policy": "latest",
        "catch_up_limit": "10",
        "misfire_grace": "",
        "max_attempts": "",
        "timeout": "",
        "queue": "",
    }
    data.update(fields)
    return data


def test_a_bad_cron_shows_the_cores_message(admin_client):
    response = admin_client.post(ADD_SCHEDULE, schedule_form(cron="0 0 0 30 2 *"))
    assert response.status_code == 200
    with pytest.raises(timetable.TimetableError) as core:
        timetable.cron("0 0 0 30 2 *")
    assert html.escape(str(core.value)) in response.content.decode()
    assert response.context["adminform"].form.errors["cron"] == [str(core.value)]
    assert not Schedule.objects.exists()


def test_the_job_is_a_choice_among_registered_jobs(admin_client):
    response = admin_client.post(ADD_SCHEDULE, schedule_form(cron="* * * * *", job="os.system"))
    assert "os.system" in str(response.context["adminform"].form.errors["job"])
    assert not Schedule.objects.exists()
    choices = dict(admin_client.get(ADD_SCHEDULE).context["adminform"].form.fields["job"].choices)
    assert "tests.witness" in choices and "os.system" not in choices


def test_a_good_schedule_is_created_and_previews_its_next_fires(admin_client):
    response = admin_client.post(
        ADD_SCHEDULE, schedule_form(cron="0 30 9 * * MON-FRI", kwargs='{"region": "eu"}')
    )
    assert response.status_code == 302
    s = Schedule.objects.get(name="nightly")
    assert s.kwargs == {"region": "eu"} and s.next_fire_at is not None
    content = admin_client.get(schedule_url(s)).content.decode()
    expected = s.next_fire_at.strftime("%Y-%m-%d %H:%M:%S")
    preview = re.search(r'<ol class="pgsched-preview">(.*?)</ol>', content, re.S)
    assert preview and preview.group(1).count("<li>") == 5 and expected in preview.group(1)
    assert "At 09:30:00 AM, Monday through Friday" in content


def change_form_data(client: Client, s: Schedule, **changes: str) -> dict[str, Any]:
    """The change form's fields as the page shows them, with ``changes``."""
    form = client.get(schedule_url(s)).context["adminform"].form
    data = {k: ("" if v is None else v) for k, v in form.initial.items() if k in form.fields}
    data |= {"kwargs": json.dumps(s.kwargs), "anchor_0": "", "anchor_1": ""}
    return data | changes


def test_an_interval_schedule_takes_seconds(admin_client):
    response = admin_client.post(ADD_SCHEDULE, schedule_form(name="quarterly", interval="900"))
    assert response.status_code == 302
    s = Schedule.objects.get(name="quarterly")
    assert s.interval == seconds(900) and s.cron is None and s.anchor is not None
    assert "Every 15 minutes" in admin_client.get(SCHEDULES).content.decode()
    neither = admin_client.post(ADD_SCHEDULE, schedule_form(name="nothing"))
    assert neither.context["adminform"].form.errors["cron"] == [
        "cron: set a cron expression or an interval"
    ]


def test_an_edit_keeps_what_the_planner_wrote_meanwhile(admin_client, make_schedule):
    s = make_schedule(name="nightly", cron="0 0 2 * * *")
    data = change_form_data(admin_client, s, kwargs='{"x": 1}')

    def planner_commits_meanwhile(sender: Any, instance: Schedule, **kwargs: Any) -> None:
        Schedule.objects.filter(pk=instance.pk).update(skipped_occurrences=42)

    pre_save.connect(planner_commits_meanwhile, sender=Schedule)
    try:
        response = admin_client.post(schedule_url(s), data)
    finally:
        pre_save.disconnect(planner_commits_meanwhile, sender=Schedule)
    assert response.status_code == 302, response.context["adminform"].form.errors
    s.refresh_from_db()
    assert s.kwargs == {"x": 1} and s.skipped_occurrences == 42


def test_a_settings_schedule_warns_that_edits_are_overwritten(admin_client, make_schedule):
    s = make_schedule(name="declared")
    Schedule.objects.filter(pk=s.pk).update(source="settings")
    content = admin_client.get(schedule_url(s)).content.decode()
    assert "edits made here are overwritten at the next sync" in content
    assert "settings</span>" in admin_client.get(SCHEDULES).content.decode()


# -- schedule actions -------------------------------------------------------------------------


def test_pause_and_resume_take_effect_at_once(admin_client, make_schedule, listening):
    s = make_schedule(name="p")
    listening()  # drop the creation's notification
    unstarted = make_runs(
        [new_run(schedule=s, status="pending", scheduled_for=whole_seconds_ago(-3))]
    )[0]
    action(admin_client, SCHEDULES, "pause_selected", [s])
    s.refresh_from_db()
    unstarted.refresh_from_db()
    assert s.status == "paused" and unstarted.status == "cancelled"
    assert listening() == [("pgsched_schedule", str(s.pk))]
    action(admin_client, SCHEDULES, "resume_selected", [s])
    s.refresh_from_db()
    assert s.status == "active"
    assert listening() == [("pgsched_schedule", str(s.pk))]
    edited = admin_client.post(
        schedule_url(s), change_form_data(admin_client, s, cron="*/5 * * * *")
    )
    assert edited.status_code == 302
    assert listening() == [("pgsched_schedule", str(s.pk))]  # an edit, too, wakes the planners


def test_pause_resume_and_run_now_buttons(admin_client, make_schedule):
    s = make_schedule(name="b")
    assert admin_client.post(schedule_url(s, "pause")).status_code == 302
    s.refresh_from_db()
    assert s.status == "paused"
    assert 'data-tool="resume"' in admin_client.get(schedule_url(s)).content.decode()
    admin_client.post(schedule_url(s, "resume"))
    s.refresh_from_db()
    assert s.status == "active"
    history = LogEntry.objects.filter(object_id=str(s.pk)).order_by("pk")
    assert [e.get_change_message() for e in history] == ["Paused", "Resumed"]
    assert admin_client.get(schedule_url(s, "pause")).status_code == 405  # POST only


def test_deleting_a_schedule_keeps_its_history(admin_client, make_schedule):
    s = make_schedule(name="gone")
    done, ahead = make_runs(
        [
            new_run(schedule=s),
            new_run(schedule=s, status="pending", scheduled_for=whole_seconds_ago(-3)),
        ]
    )
    confirm = admin_client.get(schedule_url(s, "delete"))
    assert confirm.status_code == 200
    assert admin_client.post(schedule_url(s, "delete"), {"post": "yes"}).status_code == 302
    assert not Schedule.objects.filter(pk=s.pk).exists()
    done.refresh_from_db()
    ahead.refresh_from_db()
    assert (done.schedule_id, done.schedule_name, done.status) == (None, "gone", "succeeded")
    assert ahead.status == "cancelled"  # never started: the database's trigger cancelled it


def test_run_now_keeps_kwargs_queue_attempts_and_timeout(admin_client, make_schedule):
    s = make_schedule(
        name="report",
        job="tests.witness",
        kwargs={"label": "x", "n": [1, 2]},
        queue="reports",
        max_attempts=5,
        timeout=seconds(90),
    )
    response = action(admin_client, SCHEDULES, "run_selected_now", [s])
    run = JobRun.objects.get(schedule_name="report")
    assert (run.job, run.kwargs, run.queue, run.max_attempts, run.timeout) == (
        "tests.witness",
        {"label": "x", "n": [1, 2]},
        "reports",
        5,
        seconds(90),
    )
    assert run.schedule_id is None and run.status == "pending"  # one-off: never an occurrence
    assert run_url(run) in response.content.decode()
    admin_client.post(schedule_url(s, "run_now"))
    assert JobRun.objects.filter(schedule_name="report").count() == 2


def test_schedule_operations_need_their_permissions(client, django_user_model, make_schedule):
    s = make_schedule(name="guarded")
    viewer = staff(client, django_user_model, "view_schedule", "change_schedule")
    page = viewer.get(SCHEDULES)
    assert page.status_code == 200
    assert offered_actions(page) == set()
    assert "data-tool=" not in viewer.get(schedule_url(s)).content.decode()
    assert viewer.post(schedule_url(s, "pause")).status_code == 403
    assert viewer.post(schedule_url(s, "run_now")).status_code == 403
    action(viewer, SCHEDULES, "pause_selected", [s])
    s.refresh_from_db()
    assert s.status == "active" and not JobRun.objects.exists()

    Permission.objects.get(codename="pause_schedule").user_set.add(viewer.session["_auth_user_id"])
    assert viewer.post(schedule_url(s, "pause")).status_code == 302
    s.refresh_from_db()
    assert s.status == "paused"
    assert viewer.post(schedule_url(s, "run_now")).status_code == 403


# -- run actions ------------------------------------------------------------------------------


def test_cancel_a_pending_run(admin_client):
    run = make_runs([new_run(status="pending")])[0]
    action(admin_client, RUNS, "cancel_selected", [run])
    run.refresh_from_db()
    assert run.status == "cancelled" and run.finished_at is not None
    assert "cancelled by admin in the admin" in run.note


def test_cancel_of_a_running_run_makes_its_replica_abandon_it(admin_client):
    clock = FakeClock()
    run = enqueue("tests.noop", timeout=seconds(30))
    executor = Executor(concurrency=1, clock=clock)  # threads not started: the claim waits
    assert executor.run_once().claimed == 1
    (claim,) = executor.in_flight.values()
    page = admin_client.get(run_url(run)).content.decode()
    assert 'data-tool="cancel"' in page
    token = re.search(r'name="token" value="([0-9a-f-]+)"', page)
    assert token and token.group(1) == str(claim.token)
    admin_client.post(run_url(run, "cancel"), {"token": token.group(1)})
    clock.t += 21  # time to renew: the renewal no longer finds the token
    assert executor.run_once().lost == 1 and claim.context.is_cancelled()
    executor.flush()
    run.refresh_from_db()
    assert run.status == "cancelled" and run.claimed_by is None and run.finished_at
    assert list(Attempt.objects.filter(job_run=run).values_list("number", "status")) == [
        (1, "cancelled")
    ]
    assert jobs.CALLS == []  # the job never ran


def test_cancel_is_fenced_on_the_token_that_was_read(admin_client):
    run = make_runs([new_run(status="running")])[0]
    seen = admin_client.get(run_url(run)).content.decode()
    token = re.search(r'name="token" value="([0-9a-f-]+)"', seen).group(1)
    # meanwhile the lease expired, was reaped, and another replica claimed the run
    JobRun.objects.filter(pk=run.pk).update(claimed_by=uuid.uuid4(), worker="replica-2")
    response = admin_client.post(run_url(run, "cancel"), {"token": token}, follow=True)
    after = JobRun.objects.get(pk=run.pk)
    assert after.status == "running" and after.worker == "replica-2"
    assert not Attempt.objects.filter(job_run=run).exists()
    assert "Left 1 run" in response.content.decode()


def test_cancelling_a_running_run_reports_its_attempt_after_commit(
    db, django_capture_on_commit_callbacks
):
    running, pending = make_runs([new_run(status="running"), new_run(status="pending")])
    sent: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        sent.append({"sender": sender, **kwargs})

    events.attempt_finished.connect(receiver, weak=False, dispatch_uid="test-cancel")
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            result = api.cancel_runs(
                [(running.pk, running.claimed_by), (pending.pk, None)], note="test"
            )
            assert sent == []  # not before the commit
        assert len(callbacks) == 1  # nothing for the pending run
    finally:
        events.attempt_finished.disconnect(dispatch_uid="test-cancel")
    assert (result.cancelled, result.interrupted, result.unchanged) == (
        sorted([running.pk, pending.pk]),
        [running.pk],
        [],
    )
    assert sent == [
        {
            "sender": JobRun,
            "signal": events.attempt_finished,
            "run_id": running.pk,
            "job": "tests.noop",
            "queue": "default",
            "attempt": 1,
            "outcome": "cancelled",
            "status": "cancelled",
            "duration": 0.0,
            "tenant": "",
        }
    ]


def test_retry_creates_a_new_run_once(admin_client):
    failed = make_runs(
        [new_run(status="failed", name="nightly", kwargs={"a": 1}, queue="reports", max_attempts=5)]
    )[0]
    action(admin_client, RUNS, "retry_selected", [failed])
    retry = JobRun.objects.exclude(pk=failed.pk).get()
    assert (retry.job, retry.kwargs, retry.queue, retry.max_attempts, retry.schedule_name) == (
        "tests.noop",
        {"a": 1},
        "reports",
        5,
        "nightly",
    )
    assert retry.status == "pending" and retry.note.startswith(f"retry of run {failed.pk}")
    failed.refresh_from_db()
    assert failed.status == "failed"  # its history is untouched
    response = admin_client.post(run_url(failed, "retry"), follow=True)
    assert JobRun.objects.count() == 2
    assert "already retried" in response.content.decode()


def test_run_operations_need_their_permissions(client, django_user_model):
    pending, failed = make_runs([new_run(status="pending"), new_run(status="failed")])
    viewer = staff(client, django_user_model, "view_jobrun")
    page = viewer.get(RUNS)
    assert offered_actions(page) == set()
    assert viewer.post(run_url(pending, "cancel"), {"token": ""}).status_code == 403
    assert viewer.post(run_url(failed, "retry")).status_code == 403
    action(viewer, RUNS, "cancel_selected", [pending])
    pending.refresh_from_db()
    assert pending.status == "pending" and JobRun.objects.count() == 2
    assert viewer.get(run_url(failed)).status_code == 200  # read-only, not hidden


# -- fixtures ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def listening(transactional_db: None) -> Callable[..., list[tuple[str, str]]]:
    import psycopg

    from tests.conftest import dsn

    with psycopg.connect(**dsn(), autocommit=True) as conn:
        conn.execute("LISTEN pgsched_schedule")

        def received(wait: float = 0.5) -> list[tuple[str, str]]:
            return [(n.channel, n.payload) for n in conn.notifies(timeout=wait, stop_after=50)]

        yield received


def test_the_replica_page_lists_connected_replicas_and_what_they_hold(
    admin_client, transactional_db
):
    """Live replicas come from pg_stat_activity: nothing is written to keep the list."""
    import psycopg

    from tests.conftest import dsn

    run = enqueue("tests.noop")
    JobRun.objects.filter(pk=run.pk).update(
        status="running",
        attempts=1,
        claimed_by=uuid.uuid4(),
        worker="replica-7",
        claim_expires_at=db_now() + timedelta(minutes=5),
        started_at=db_now(),
    )
    with psycopg.connect(**dsn(), application_name="pgsched executor replica-7") as other:
        other.execute("SELECT 1")
        response = admin_client.get(reverse("admin:pgsched_replica_changelist"))
        assert response.status_code == 200
        body = response.content.decode()
        assert "replica-7" in body and "executor" in body
        assert "?status__exact=running&amp;worker=replica-7" in body
        held = admin_client.get(
            reverse("admin:pgsched_jobrun_changelist"),
            {"status__exact": "running", "worker": "replica-7"},
        )
        assert held.status_code == 200 and f">{run.pk}<" in held.content.decode()
    gone = admin_client.get(reverse("admin:pgsched_replica_changelist")).content.decode()
    assert "replica-7" not in gone


def test_every_change_page_button_is_a_post_behind_the_admin_login(admin_client, db):
    """admin.common.ObjectButtons: each admin's ``buttons`` become ``<id>/<slug>/`` URLs
    named ``admin:pgsched_<model>_<slug>``, refusing GET and answering only staff."""
    from django.contrib import admin as django_admin

    from django_pgsched.admin.common import ObjectButtons

    with_buttons = [
        model_admin
        for model_admin in django_admin.site._registry.values()
        if isinstance(model_admin, ObjectButtons)
    ]
    names = sorted(
        f"pgsched_{a.model._meta.model_name}_{slug.replace('-', '_')}"
        for a in with_buttons
        for slug, _ in a.buttons
    )
    assert names == [
        "pgsched_breaker_reset",
        "pgsched_jobrun_cancel",
        "pgsched_jobrun_retry",
        "pgsched_schedule_pause",
        "pgsched_schedule_resume",
        "pgsched_schedule_run_now",
    ]
    for name in names:
        url = reverse(f"admin:{name}", args=[12345])
        assert url.endswith("/12345/" + name.split("_", 2)[2].replace("run_now", "run-now") + "/")
        assert admin_client.get(url).status_code == 405, name  # POST only
        anonymous = Client().post(url)
        assert anonymous.status_code == 302 and "/login/" in anonymous["Location"], name
        assert admin_client.post(url).status_code == 404, name  # no such object
