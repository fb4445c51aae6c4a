"""The planner against real PostgreSQL: claims, grids, policies, isolation, locks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule, ScheduleStatus
from tests.conftest import at, seconds

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


def runs_of(schedule: Schedule) -> list[str]:
    return [
        r.scheduled_for.strftime("%H:%M:%S")
        for r in JobRun.objects.filter(schedule=schedule).order_by("scheduled_for")
    ]


def test_materialises_due_occurrences_within_lookahead(make_schedule):
    s = make_schedule(cron="*/2 * * * * *", next_fire_at=T)
    result = Planner().run_once(now=T)
    s.refresh_from_db()
    # lookahead 5 s: occurrences at :00 :02 :04, next one :06
    assert runs_of(s) == ["12:00:00", "12:00:02", "12:00:04"]
    assert s.next_fire_at == at("2026-03-01 12:00:06")
    assert s.last_fire_at == at("2026-03-01 12:00:04")
    assert result.created == 3 and result.skipped == 0 and result.schedules == 1
    run = JobRun.objects.filter(schedule=s).first()
    assert run.fire_after == run.scheduled_for
    assert run.schedule_name == s.name and run.job == "tests.noop" and run.status == "pending"
    assert run.idempotency_key == f"pgsched:{s.pk}:{run.scheduled_for:%Y-%m-%dT%H:%M:%SZ}"


def test_second_pass_over_the_same_window_creates_nothing(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    first = Planner().run_once(now=T)
    second = Planner().run_once(now=T)
    assert first.created == 6 and second.schedules == 0 and second.created == 0
    assert len(runs_of(s)) == 6


def test_operator_replan_backwards_cannot_duplicate(make_schedule):
    """Guard 2 alone: moving next_fire_at back re-plans occurrences that already have runs."""
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    Planner().run_once(now=T)
    Schedule.objects.filter(pk=s.pk).update(next_fire_at=T)  # replan: same window again
    again = Planner().run_once(now=T)
    assert again.schedules == 1 and again.created == 0
    assert len(runs_of(s)) == 6
    assert JobRun.objects.filter(schedule=s).values("scheduled_for").distinct().count() == 6


def test_new_schedule_fires_first_after_database_now(db):
    s = Schedule.objects.create(name="n", job="tests.noop", cron="0 0 * * * *")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
    assert now < s.next_fire_at <= now + timedelta(hours=1)
    assert s.next_fire_at.minute == 0 and s.next_fire_at.second == 0


def test_interval_grid_is_anchored_not_now_plus_interval(make_schedule):
    anchor = at("2026-03-01 11:00:03")
    s = make_schedule(cron=None, interval=seconds(7), anchor=anchor, next_fire_at=T)
    Planner().run_once(now=T)
    # anchor + 7k in [12:00:00, 12:00:05]: 12:00:03 is 3600 s = 514*7 + 2 after... check directly
    expected = [
        t.strftime("%H:%M:%S")
        for t in (anchor + seconds(7 * k) for k in range(1000))
        if T <= t <= T + seconds(5)
    ]
    assert runs_of(s) == expected
    s.refresh_from_db()
    assert (s.next_fire_at - anchor).total_seconds() % 7 == 0


@pytest.mark.parametrize(
    ("policy", "limit", "runs_in_outage", "skipped"),
    # 09:00..11:58 are missed (179 occurrences); 11:59 and 12:00 are within the 60 s grace
    [("skip", 10, 0, 179), ("latest", 10, 1, 178), ("catch_up", 5, 5, 174)],
)
def test_three_hour_outage_under_each_policy(make_schedule, policy, limit, runs_in_outage, skipped):
    # per-minute cron, last planned 3 h ago; grace 60 s makes 12:00:00 on time (not missed)
    s = make_schedule(
        cron="0 * * * * *",
        next_fire_at=T - timedelta(hours=3),
        misfire_policy=policy,
        catch_up_limit=limit,
    )
    result = Planner().run_once(now=T)
    s.refresh_from_db()
    missed_runs = JobRun.objects.filter(schedule=s, scheduled_for__lt=T - seconds(60))
    assert missed_runs.count() == runs_in_outage
    assert JobRun.objects.filter(schedule=s, scheduled_for__gte=T - seconds(60)).count() == 2
    assert s.skipped_occurrences == skipped == result.skipped
    if runs_in_outage:
        latest = missed_runs.order_by("-scheduled_for").first()
        assert latest.scheduled_for == T - seconds(120)  # most recent missed ones are kept
    # every occurrence is either a run or counted, never both
    total = 3 * 60 + 1  # 09:00 .. 12:00 inclusive
    assert JobRun.objects.filter(schedule=s).count() + s.skipped_occurrences == total


def test_one_day_outage_of_a_per_second_schedule_is_counted_not_listed(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T - timedelta(days=1), misfire_policy="skip")
    result = Planner().run_once(now=T)
    s.refresh_from_db()
    assert s.skipped_occurrences == 86400 - 60
    assert result.created == 66  # 60 s of grace + now + 5 s lookahead
    assert s.next_fire_at == T + seconds(6)


def test_a_broken_row_is_isolated_and_marked(make_schedule):
    good = make_schedule(cron="* * * * * *", next_fire_at=T)
    bad = make_schedule(cron="* * * * * *", next_fire_at=T)
    with connection.cursor() as cursor:  # slips past the model: the planner must cope
        cursor.execute(
            "UPDATE pgsched_schedule SET cron = 'R * * * *', next_fire_at = %s WHERE id = %s",
            [T, bad.pk],
        )
    result = Planner().run_once(now=T)
    good.refresh_from_db()
    bad.refresh_from_db()
    assert result.broken == (bad.pk,)
    assert bad.status == ScheduleStatus.BROKEN and "cron" in bad.last_error
    assert len(runs_of(good)) == 6 and runs_of(bad) == []
    # a broken schedule is not claimed again
    assert Planner().run_once(now=T + seconds(10)).broken == ()


def test_absurd_next_fire_at_does_not_abort_the_batch(make_schedule):
    late = at("9998-12-31 00:00:00")
    good = make_schedule(cron="* * * * * *", next_fire_at=late)
    odd = make_schedule(cron="0 0 0 29 2 *", next_fire_at=late)  # no 29 Feb before 10000
    result = Planner().run_once(now=late)
    odd.refresh_from_db()
    assert odd.status == ScheduleStatus.BROKEN and result.broken == (odd.pk,)
    good.refresh_from_db()
    assert good.status == ScheduleStatus.ACTIVE


def test_paused_schedule_is_not_planned_and_its_pending_runs_are_cancelled(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    Planner().run_once(now=T)
    s.status = ScheduleStatus.PAUSED
    s.save()
    statuses = set(JobRun.objects.filter(schedule=s).values_list("status", flat=True))
    assert statuses == {"cancelled"}
    assert Planner().run_once(now=T + seconds(30)).schedules == 0


def test_resume_fires_from_now_without_catching_up(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T, status="paused")
    s.status = ScheduleStatus.ACTIVE
    s.save()
    s.refresh_from_db()
    assert s.next_fire_at > T  # recomputed from the database clock, not the old T


def test_raw_sql_resume_clears_next_fire_at_and_planner_recomputes(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T, status="paused")
    Schedule.objects.filter(pk=s.pk).update(status="active")
    s.refresh_from_db()
    assert s.next_fire_at is None
    later = T + timedelta(hours=5)
    result = Planner().run_once(now=later)
    s.refresh_from_db()
    assert result.skipped == 0 and result.created == 5  # later+1 .. later+5
    assert s.next_fire_at == later + seconds(6)


def test_changing_the_cron_retimes_the_schedule(make_schedule):
    s = make_schedule(cron="0 0 0 * * *", next_fire_at=T)
    Schedule.objects.filter(pk=s.pk).update(cron="*/10 * * * * *")
    s.refresh_from_db()
    assert s.next_fire_at is None


def test_second_connection_holding_a_schedule_lock_makes_the_planner_skip_it(
    transactional_db, other_connection
):
    locked = Schedule.objects.create(
        name="locked", job="tests.noop", cron="* * * * * *", next_fire_at=T
    )
    free = Schedule.objects.create(
        name="free", job="tests.noop", cron="* * * * * *", next_fire_at=T
    )
    other_connection.execute("SELECT 1 FROM pgsched_schedule WHERE id = %s FOR UPDATE", [locked.pk])
    result = Planner().run_once(now=T)  # must not wait for the lock
    assert result.schedules == 1
    assert runs_of(free) and runs_of(locked) == []
    other_connection.rollback()
    assert Planner().run_once(now=T).schedules == 1
    assert len(runs_of(locked)) == 6


def test_two_planners_racing_over_one_window_create_each_occurrence_once(transactional_db):
    import threading

    for i in range(300):
        Schedule.objects.create(name=f"r{i}", job="tests.noop", cron="* * * * * *", next_fire_at=T)
    barrier = threading.Barrier(3)
    results = []

    def plan() -> None:
        barrier.wait()
        total = 0
        try:
            while (r := Planner(batch=50).run_once(now=T)).schedules:
                total += r.created
        finally:
            connection.close()
        results.append(total)

    threads = [threading.Thread(target=plan) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 300 * 6 == JobRun.objects.count()
    assert (
        not JobRun.objects.values("schedule_id", "scheduled_for")
        .annotate(n=__import__("django.db.models", fromlist=["Count"]).Count("id"))
        .filter(n__gt=1)
        .exists()
    )
    assert all(r > 0 for r in results), results  # SKIP LOCKED shared the work


def test_planner_claim_uses_the_due_index(db):
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        from django_pgsched.engine import queries

        cursor.execute(
            "EXPLAIN " + queries.get("planner_claim"),
            {"now": T, "lookahead": seconds(5), "batch": 500},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pgsched_schedule_due_idx" in plan, plan


def test_deleting_a_schedule_keeps_its_history_and_cancels_unstarted_runs(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    Planner().run_once(now=T)
    done = JobRun.objects.filter(schedule=s).first()
    JobRun.objects.filter(pk=done.pk).update(status="succeeded", finished_at=T)
    s.delete()
    assert not Schedule.objects.filter(pk=s.pk).exists()
    runs = JobRun.objects.filter(schedule_name=s.name)
    assert runs.count() == 6 and not runs.exclude(schedule=None).exists()  # ON DELETE SET NULL
    assert set(runs.exclude(pk=done.pk).values_list("status", flat=True)) == {"cancelled"}
    assert runs.get(pk=done.pk).status == "succeeded"


def test_a_row_the_database_refuses_is_marked_broken_and_the_others_planned(make_schedule):
    good = make_schedule(cron="* * * * * *", next_fire_at=T)
    poison = make_schedule(name="poison", cron="* * * * * *", next_fire_at=T)
    with connection.cursor() as cursor:  # the database refuses this schedule's runs
        cursor.execute(
            """
            CREATE FUNCTION pgsched_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.schedule_name = 'poison' THEN RAISE EXCEPTION 'refused by a test'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER pgsched_test_refuse BEFORE INSERT ON pgsched_job_run
                FOR EACH ROW EXECUTE FUNCTION pgsched_test_refuse();
            """
        )
    result = Planner().run_once(now=T)
    good.refresh_from_db()
    poison.refresh_from_db()
    assert result.broken == (poison.pk,) and result.created == 6
    assert len(runs_of(good)) == 6 and good.next_fire_at == T + seconds(6)
    assert poison.status == ScheduleStatus.BROKEN
    assert "could not store its runs" in poison.last_error and "refused" in poison.last_error


def test_the_advance_is_one_plain_transaction_not_a_multixact(transactional_db, other_connection):
    """The claim's lock and the advance come from one transaction id, never a savepoint's.

    An update made in a subtransaction of the transaction that locked the row stores
    a MultiXact as the old version's xmax; index scans cannot mark such versions dead,
    so every claim walked every schedule advanced since the last vacuum.
    """
    s = Schedule.objects.create(name="m", job="tests.noop", cron="* * * * * *", next_fire_at=T)
    other_connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    other_connection.execute("SELECT 1 FROM pgsched_schedule WHERE id = %s", [s.pk])  # snapshot
    assert Planner().run_once(now=T).created == 6
    # the old snapshot still sees the version the planner replaced, and its xmax
    (old_xmax,) = other_connection.execute(
        "SELECT xmax::text FROM pgsched_schedule WHERE id = %s", [s.pk]
    ).fetchone()
    other_connection.rollback()
    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM pgsched_schedule WHERE id = %s", [s.pk])
        (new_xmin,) = cursor.fetchone()
    assert old_xmax == new_xmin  # with a savepoint: a MultiXact id, and the savepoint's xid
