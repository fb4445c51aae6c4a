"""The ledger of occurrences that did not run, as the planner writes it.

Every occurrence ends up as a run or in exactly one ``SkippedRange``; ranges
are compact (one row per decision, merged with an adjacent range of the same
reason) and written in the planner's own statement.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_pgsched import api, events
from django_pgsched.engine.planner import Planner
from django_pgsched.ledger.accounting import account
from django_pgsched.models import JobRun, Schedule, SkippedRange, db_now
from django_pgsched.statuses import COUNTED_REASONS
from tests.conftest import at, seconds

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


T = at("2026-03-01 12:00:00")


def ledger(s: Schedule) -> list[tuple[str, str, int, str]]:
    return [
        (r.first.strftime("%H:%M:%S"), r.last.strftime("%H:%M:%S"), r.count, r.reason)
        for r in SkippedRange.objects.filter(schedule=s).order_by("first")
    ]


def counted(s: Schedule) -> int:
    return sum(
        SkippedRange.objects.filter(schedule=s, reason__in=COUNTED_REASONS).values_list(
            "count", flat=True
        )
    )


def sql(query: str, params: list[object] | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(query, params)


@pytest.mark.parametrize(
    ("policy", "limit", "expected"),
    # 09:00 .. 11:58 are missed (179); 11:59 and 12:00 are within the 60 s grace
    [
        ("skip", 10, ("09:00:00", "11:58:00", 179, "misfire_skip")),
        ("latest", 10, ("09:00:00", "11:57:00", 178, "misfire_latest")),
        ("catch_up", 5, ("09:00:00", "11:53:00", 174, "catch_up_limit")),
    ],
)
def test_an_outage_is_one_range_per_policy_and_equals_the_skipped_count(
    make_schedule, policy, limit, expected
):
    s = make_schedule(
        cron="0 * * * * *",
        next_fire_at=T - timedelta(hours=3),
        misfire_policy=policy,
        catch_up_limit=limit,
    )
    Planner().run_once(now=T)
    s.refresh_from_db()
    assert ledger(s) == [expected]
    assert s.skipped_occurrences == counted(s) == expected[2]
    report = account(s, T - timedelta(hours=3), s.next_fire_at)
    assert report.problems == [] and report.ledgered == expected[2]


def test_a_day_of_a_per_second_schedule_is_one_row(make_schedule):
    s = make_schedule(next_fire_at=T - timedelta(days=1), misfire_policy="skip")
    Planner().run_once(now=T)
    assert ledger(s) == [("12:00:00", "11:58:59", 86400 - 60, "misfire_skip")]


def test_consecutive_misses_merge_into_one_range(make_schedule):
    """Two outages with no run between them are one range: hourly, planned at 12:30 and 15:30."""
    s = make_schedule(
        cron="0 0 * * * *", next_fire_at=at("2026-03-01 09:00:00"), misfire_policy="skip"
    )
    Planner().run_once(now=at("2026-03-01 12:30:00"))  # 09, 10, 11, 12 missed; none on time
    Planner().run_once(now=at("2026-03-01 15:30:00"))  # 13, 14, 15 missed
    assert ledger(s) == [("09:00:00", "15:00:00", 7, "misfire_skip")]
    s.refresh_from_db()
    assert s.skipped_occurrences == 7


def test_a_run_between_two_misses_keeps_them_apart(make_schedule):
    s = make_schedule(
        cron="0 0 * * * *", next_fire_at=at("2026-03-01 09:00:00"), misfire_policy="latest"
    )
    Planner().run_once(now=at("2026-03-01 12:30:00"))  # 09-11 skipped, 12 runs
    Planner().run_once(now=at("2026-03-01 15:30:00"))  # 13-14 skipped, 15 runs
    assert ledger(s) == [
        ("09:00:00", "11:00:00", 3, "misfire_latest"),
        ("13:00:00", "14:00:00", 2, "misfire_latest"),
    ]


def test_pause_and_resume_by_sql_records_the_paused_occurrences(make_schedule):
    s = make_schedule(next_fire_at=T)
    Planner().run_once(now=T)  # runs T .. T+5, next T+6
    sql("UPDATE pgsched_schedule SET status = 'paused' WHERE id = %s", [s.pk])
    sql("UPDATE pgsched_schedule SET status = 'active' WHERE id = %s", [s.pk])
    result = Planner().run_once(now=T + seconds(100))
    assert result.skipped == 0  # paused time is not a misfire
    assert ledger(s) == [("12:00:06", "12:01:40", 95, "paused")]
    s.refresh_from_db()
    assert s.skipped_occurrences == 0
    report = account(s, T, s.next_fire_at)
    assert report.problems == [] and report.runs == 6 + 5 and report.ledgered == 95


def test_resume_through_the_orm_records_the_paused_occurrences(make_schedule):
    now = db_now().replace(microsecond=0)
    s = make_schedule(next_fire_at=now - seconds(60), status="paused")
    api.resume(s)  # the ORM sets next_fire_at to the first occurrence after now
    s.refresh_from_db()
    Planner().run_once()
    [(first, _last, count, reason)] = ledger(s)
    assert reason == "paused" and first == (now - seconds(60)).strftime("%H:%M:%S")
    assert count == (s.next_fire_at - (now - seconds(60))).total_seconds()


def test_reactivating_a_broken_schedule_records_the_broken_occurrences(make_schedule):
    s = make_schedule(next_fire_at=T)
    sql("UPDATE pgsched_schedule SET status = 'broken', last_error = 'x' WHERE id = %s", [s.pk])
    sql("UPDATE pgsched_schedule SET status = 'active' WHERE id = %s", [s.pk])
    Planner().run_once(now=T + seconds(10))
    assert ledger(s) == [("12:00:00", "12:00:10", 11, "broken")]


def test_pausing_twice_before_the_planner_sees_it_records_from_the_first_pause(make_schedule):
    s = make_schedule(next_fire_at=T)
    for status in ("paused", "active", "paused", "active"):
        sql("UPDATE pgsched_schedule SET status = %s WHERE id = %s", [status, s.pk])
    Planner().run_once(now=T + seconds(10))
    assert ledger(s) == [("12:00:00", "12:00:10", 11, "paused")]


def test_a_pause_is_counted_on_the_timetable_in_force_when_it_is_recorded(make_schedule):
    s = make_schedule(next_fire_at=T, status="paused")
    sql("UPDATE pgsched_schedule SET status = 'active' WHERE id = %s", [s.pk])
    sql("UPDATE pgsched_schedule SET cron = '*/10 * * * * *' WHERE id = %s", [s.pk])
    Planner().run_once(now=T + seconds(100))
    assert ledger(s) == [("12:00:00", "12:01:40", 11, "paused")]


def test_retiming_a_paused_schedule_starts_afresh_when_it_is_resumed(make_schedule):
    s = make_schedule(next_fire_at=T, status="paused")
    sql("UPDATE pgsched_schedule SET cron = '*/10 * * * * *' WHERE id = %s", [s.pk])
    sql("UPDATE pgsched_schedule SET status = 'active' WHERE id = %s", [s.pk])
    Planner().run_once(now=T + seconds(100))
    assert ledger(s) == []  # re-timed: a new timetable from after now; nothing is owed before


def test_the_planner_reports_what_it_ledgered(make_schedule):
    got = []

    def receiver(sender, ledgered, **kwargs):
        got.append(ledgered)

    events.occurrences_planned.connect(receiver, dispatch_uid="test-ledger")
    try:
        s = make_schedule(next_fire_at=T - timedelta(hours=1), misfire_policy="skip", queue="q")
        Planner().run_once(now=T)
    finally:
        events.occurrences_planned.disconnect(dispatch_uid="test-ledger")
    assert got == [{("q", "tests.noop", "cron", "misfire_skip"): 3600 - 60}]
    assert JobRun.objects.filter(schedule=s).count() == 66


def test_retention_deletes_ranges_that_ended_before_the_cutoff(make_schedule):
    from django_pgsched.engine.maintenance import Retention

    s = make_schedule(
        cron="0 0 * * * *", next_fire_at=T - timedelta(days=40), misfire_policy="latest"
    )
    Planner().run_once(now=T - timedelta(days=39))  # a day missed, long ago
    Planner().run_once(now=T)  # 39 days missed: a range that ends recently
    assert len(ledger(s)) == 2
    result = Retention().run_once(now=T)
    assert result.history == 1
    [(_, last, _, _)] = ledger(s)
    assert last == "10:00:00"  # the recent one: 11:00 ran (latest), 12:00 is on time


def test_times_a_clock_change_skipped_are_a_dst_gap_range(make_schedule):
    before_gap = at("2026-03-28 01:59:30")  # Berlin, the day before clocks go forward
    s = make_schedule(
        cron="*/30 * 2 * * *", timezone="Europe/Berlin", dst_gap="skip", next_fire_at=before_gap
    )
    Planner().run_once(now=before_gap)
    s.refresh_from_db()
    [gap] = SkippedRange.objects.filter(schedule=s)
    assert (gap.reason, gap.count) == ("dst_gap", 120)
    # the local times 02:00:00 .. 02:59:30 that never existed, at the offset before the change
    assert (gap.first, gap.last) == (at("2026-03-29 01:00:00"), at("2026-03-29 01:59:30"))
    assert s.skipped_occurrences == counted(s) == 120
    report = account(s, before_gap, s.next_fire_at)
    assert report.problems == [] and report.runs == 1
