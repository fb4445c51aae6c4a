"""Misfire policies and retry backoff: pure functions, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_pgsched.engine.policies import (
    Skipped,
    ceil_second,
    decide,
    floor_second,
    retry_delay,
    span,
)
from django_pgsched.timing import timetable

T = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)
GRACE = timedelta(seconds=60)
LOOKAHEAD = timedelta(seconds=5)
EVERY_MINUTE = timetable.cron("0 * * * * *")


def plan(
    policy: str,
    *,
    start: datetime | None,
    now: datetime = T,
    limit: int = 10,
    grid: timetable.Timetable = EVERY_MINUTE,
    grace: timedelta = GRACE,
    max_runs: int = 2000,
):
    return decide(
        grid,
        next_fire_at=start,
        now=now,
        lookahead=LOOKAHEAD,
        grace=grace,
        policy=policy,
        catch_up_limit=limit,
        max_runs=max_runs,
    )


def test_rounding_to_whole_seconds():
    assert floor_second(T + timedelta(microseconds=999_999)) == T
    assert ceil_second(T + timedelta(microseconds=1)) == T + S
    assert ceil_second(T) == T


def test_nothing_missed_runs_everything_due_within_the_lookahead():
    d = plan("skip", start=T - 30 * S, grid=timetable.cron("*/10 * * * * *"))
    assert [t - T for t in d.runs] == [-30 * S, -20 * S, -10 * S, 0 * S]
    assert d.skipped == 0 and d.next_fire_at == T + 10 * S


def test_occurrence_exactly_at_now_plus_lookahead_is_included():
    d = plan("skip", start=T, grid=timetable.cron("* * * * * *"))
    assert d.runs[-1] == T + LOOKAHEAD and d.next_fire_at == T + LOOKAHEAD + S


def test_fractional_now():
    now = T + timedelta(milliseconds=500)
    d = plan("skip", start=T, now=now, grid=timetable.cron("* * * * * *"))
    assert d.runs[0] == T and d.runs[-1] == T + 5 * S  # <= now + 5 s


@pytest.mark.parametrize(
    ("policy", "kept", "skipped"), [("skip", 0, 179), ("latest", 1, 178), ("catch_up", 10, 169)]
)
def test_three_hour_outage(policy, kept, skipped):
    d = plan(policy, start=T - timedelta(hours=3))
    missed = [t for t in d.runs if t < T - GRACE]
    assert len(missed) == kept and d.skipped == skipped
    assert missed == [T - GRACE - S * 60 * k for k in range(kept, 0, -1)]  # most recent
    assert [t for t in d.runs if t >= T - GRACE] == [T - GRACE, T]
    assert len(d.runs) + d.skipped == 181  # every occurrence accounted once


def test_grace_boundary_is_strict():
    # an occurrence exactly grace seconds old is on time; a second older is missed
    d = plan("skip", start=T - GRACE - S, grid=timetable.cron("* * * * * *"))
    assert d.skipped == 1 and d.runs[0] == T - GRACE


def test_zero_grace_counts_everything_before_now_as_missed():
    d = plan("latest", start=T - 10 * S, grace=timedelta(0), grid=timetable.cron("* * * * * *"))
    assert d.skipped == 9 and d.runs[0] == T - S and d.runs[1] == T


def test_new_schedule_starts_after_now_with_nothing_missed():
    d = plan("catch_up", start=None, grid=timetable.cron("* * * * * *"))
    assert d.runs[0] == T + S and d.skipped == 0


def test_long_outage_is_counted_arithmetically():
    d = plan("skip", start=T - timedelta(days=365), grid=timetable.cron("* * * * * *"))
    assert d.skipped == 365 * 86400 - 60 and len(d.runs) == 66


def test_max_runs_splits_a_pass_without_double_counting():
    grid = timetable.cron("* * * * * *")
    first = plan("catch_up", start=T - timedelta(minutes=10), limit=5, grid=grid, max_runs=20)
    assert len(first.runs) == 20 and first.skipped == 540 - 5
    second = plan("catch_up", start=first.next_fire_at, limit=5, grid=grid)
    assert second.skipped == 0 and second.runs[0] == first.next_fire_at
    assert len(first.runs) + len(second.runs) + first.skipped == 600 + 6


@pytest.mark.parametrize(
    ("policy", "last", "count", "reason"),
    [
        ("skip", T - GRACE - 60 * S, 179, "misfire_skip"),
        ("latest", T - GRACE - 120 * S, 178, "misfire_latest"),
        ("catch_up", T - GRACE - 11 * 60 * S, 169, "catch_up_limit"),
    ],
)
def test_the_discarded_occurrences_are_one_span_with_the_policys_reason(
    policy, last, count, reason
):
    d = plan(policy, start=T - timedelta(hours=3))
    assert d.spans == (Skipped(T - timedelta(hours=3), last, count, reason),)
    assert sum(s.count for s in d.spans) == d.skipped
    # the span ends just before the first missed occurrence that still runs
    assert all(t > last for t in d.runs)


def test_a_long_outage_is_one_span_counted_arithmetically():
    d = plan("skip", start=T - timedelta(days=365), grid=timetable.cron("* * * * * *"))
    assert d.spans == (
        Skipped(T - timedelta(days=365), T - GRACE - S, 365 * 86400 - 60, "misfire_skip"),
    )


def test_nothing_missed_is_no_span():
    assert plan("skip", start=T).spans == ()
    assert plan("latest", start=T - 2 * 60 * S).spans == ()  # the one missed occurrence runs
    assert plan("catch_up", start=None).spans == ()


def test_a_split_pass_puts_its_span_in_the_first_part_only():
    grid = timetable.cron("* * * * * *")
    first = plan("catch_up", start=T - timedelta(minutes=10), limit=5, grid=grid, max_runs=20)
    second = plan("catch_up", start=first.next_fire_at, limit=5, grid=grid)
    assert [s.count for s in first.spans] == [535] and second.spans == ()


def test_span_of_an_empty_range_is_none():
    assert span(EVERY_MINUTE, T + S, T + 59 * S, "paused") is None
    assert span(EVERY_MINUTE, T, T - S, "paused") is None
    assert span(EVERY_MINUTE, T - S, T + S, "paused") == Skipped(T, T, 1, "paused")


def test_interval_grid():
    grid = timetable.interval(timedelta(seconds=7), T - timedelta(seconds=3))
    d = plan("skip", start=T - 3 * S, grid=grid)
    assert d.runs == (T - 3 * S, T + 4 * S) and d.next_fire_at == T + 11 * S


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="misfire_policy"):
        plan("all", start=T)


@pytest.mark.parametrize(
    ("attempt", "low", "high"), [(1, 1, 2), (2, 2, 4), (3, 4, 8), (30, 30, 60)]
)
def test_retry_delay_grows_exponentially_with_bounded_jitter(attempt, low, high):
    base, cap = timedelta(seconds=2), timedelta(seconds=60)
    assert retry_delay(attempt, base=base, cap=cap, jitter=0.0) == low
    assert retry_delay(attempt, base=base, cap=cap, jitter=0.999999) == pytest.approx(
        high, rel=1e-5
    )
