"""Cron in named time zones (django_pgsched.timing.zoned) at real transitions.

Named cases are checked by hand; the property test compares every policy
combination with the brute-force oracle in tests/zone_oracle.py (a walk over
wall-clock seconds with zoneinfo, written separately) at transitions drawn
from the tz database, 1970-2037. The full tier (tests/faults/test_zones.py)
runs it with many more examples. No database.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pgsched.timing import timetable, zoned, zones
from django_pgsched.timing.timetable import TimetableError
from tests import zone_oracle

S = timedelta(seconds=1)
H = timedelta(hours=1)
POLICIES = [(g, f) for g in zoned.DST_GAP_POLICIES for f in zoned.DST_FOLD_POLICIES]
EXAMPLES = int(os.environ.get("PGSCHED_TZ_EXAMPLES", "40"))


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def hms(times: list[datetime]) -> list[str]:
    return [t.strftime("%m-%d %H:%M:%S") for t in times]


def occ(expr: str, tz: str, lo: datetime, hi: datetime, gap: str = "shift", fold: str = "first"):  # type: ignore[no-untyped-def]
    tt = zoned.cron(expr, tz, gap, fold)
    return list(tt.occurrences(lo, hi)), sum(g.count for g in tt.gap_skips(lo, hi))


# -- named cases ---------------------------------------------------------------------

BERLIN_SPRING = (at(2026, 3, 28, 22), at(2026, 3, 29, 4))  # 01:00Z: 02:00 CET -> 03:00 CEST
BERLIN_FALL = (at(2026, 10, 24, 22), at(2026, 10, 25, 4))  # 01:00Z: 03:00 CEST -> 02:00 CET


@pytest.mark.parametrize(
    ("gap", "runs", "skipped"),
    [("shift", ["03-29 01:00:00"], 0), ("skip", [], 1)],
)
def test_berlin_spring_daily_in_the_gap(gap: str, runs: list[str], skipped: int) -> None:
    times, n = occ("30 2 * * *", "Europe/Berlin", *BERLIN_SPRING, gap=gap)
    assert (hms(times), n) == (runs, skipped)


def test_berlin_spring_every_30_seconds_of_the_missing_hour() -> None:
    times, n = occ("*/30 * 2 * * *", "Europe/Berlin", *BERLIN_SPRING, gap="shift")
    assert (hms(times), n) == (["03-29 01:00:00"], 119)  # 120 wall-clock times, one run
    times, n = occ("*/30 * 2 * * *", "Europe/Berlin", *BERLIN_SPRING, gap="skip")
    assert (times, n) == ([], 120)


def test_berlin_spring_hourly_range_across_the_gap() -> None:
    # 02:00 does not exist; 03:00 is an occurrence anyway, so "shift" merges into it
    for gap in zoned.DST_GAP_POLICIES:
        times, n = occ("0 0 1-4 * * *", "Europe/Berlin", *BERLIN_SPRING, gap=gap)
        assert (hms(times), n) == (["03-29 00:00:00", "03-29 01:00:00", "03-29 02:00:00"], 1)


def test_berlin_spring_per_second_fires_every_real_second() -> None:
    lo, hi = at(2026, 3, 29, 0, 59, 58), at(2026, 3, 29, 1, 0, 2)
    for gap in zoned.DST_GAP_POLICIES:
        times, n = occ("* * * * * *", "Europe/Berlin", lo, hi, gap=gap)
        assert hms(times) == [f"03-29 0{t}" for t in ("0:59:58", "0:59:59", "1:00:00", "1:00:01")]
        assert n == 3600  # 02:00:00-02:59:59 never happened


@pytest.mark.parametrize(
    ("fold", "runs"),
    [
        ("first", ["10-25 00:30:00"]),  # 02:30 CEST
        ("second", ["10-25 01:30:00"]),  # 02:30 CET
        ("both", ["10-25 00:30:00", "10-25 01:30:00"]),
    ],
)
def test_berlin_fall_daily_in_the_fold(fold: str, runs: list[str]) -> None:
    assert occ("30 2 * * *", "Europe/Berlin", *BERLIN_FALL, fold=fold) == (
        [datetime.strptime(f"2026-{r}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC) for r in runs],
        0,
    )


@pytest.mark.parametrize(("fold", "n"), [("first", 120), ("second", 120), ("both", 240)])
def test_berlin_fall_every_30_seconds_of_the_repeated_hour(fold: str, n: int) -> None:
    times, skipped = occ("*/30 * 2 * * *", "Europe/Berlin", *BERLIN_FALL, fold=fold)
    assert (len(times), skipped) == (n, 0)
    if fold == "first":
        assert (times[0], times[-1]) == (at(2026, 10, 25, 0), at(2026, 10, 25, 0, 59, 30))
    if fold == "second":
        assert (times[0], times[-1]) == (at(2026, 10, 25, 1), at(2026, 10, 25, 1, 59, 30))


def test_per_minute_across_the_fold_follows_real_time_only_with_both() -> None:
    lo, hi = at(2026, 10, 25, 0, 58), at(2026, 10, 25, 1, 2)
    assert len(occ("* * * * *", "Europe/Berlin", lo, hi, fold="both")[0]) == 4
    # "first": 02:58, 02:59 CEST, then 02:00 CET happened already (at 00:00Z)
    assert hms(occ("* * * * *", "Europe/Berlin", lo, hi, fold="first")[0]) == [
        "10-25 00:58:00",
        "10-25 00:59:00",
    ]
    assert hms(occ("* * * * *", "Europe/Berlin", lo, hi, fold="second")[0]) == [
        "10-25 01:00:00",
        "10-25 01:01:00",
    ]


def test_new_york_spring_and_fall() -> None:
    spring = (at(2026, 3, 8, 5), at(2026, 3, 8, 9))  # 07:00Z: 02:00 EST -> 03:00 EDT
    assert hms(occ("30 2 * * *", "America/New_York", *spring)[0]) == ["03-08 07:00:00"]
    assert occ("30 2 * * *", "America/New_York", *spring, gap="skip") == ([], 1)
    fall = (at(2026, 11, 1, 4), at(2026, 11, 1, 8))  # 06:00Z: 02:00 EDT -> 01:00 EST
    assert hms(occ("30 1 * * *", "America/New_York", *fall)[0]) == ["11-01 05:30:00"]
    assert hms(occ("30 1 * * *", "America/New_York", *fall, fold="second")[0]) == ["11-01 06:30:00"]


def test_lord_howe_half_hour_changes() -> None:
    # 2026-04-04 15:00Z: 02:00 +11 -> 01:30 +10:30; 2026-10-03 15:30Z: 02:00 -> 02:30 +11
    fall = (at(2026, 4, 4, 13), at(2026, 4, 4, 17))
    assert hms(occ("45 1 * * *", "Australia/Lord_Howe", *fall, fold="both")[0]) == [
        "04-04 14:45:00",
        "04-04 15:15:00",
    ]
    spring = (at(2026, 10, 3, 14), at(2026, 10, 3, 17))
    assert hms(occ("15 2 * * *", "Australia/Lord_Howe", *spring)[0]) == ["10-03 15:30:00"]
    times, n = occ("*/10 2 * * *", "Australia/Lord_Howe", *spring, gap="skip")
    assert (hms(times), n) == (["10-03 15:30:00", "10-03 15:40:00", "10-03 15:50:00"], 3)


def test_apia_skipped_a_whole_day() -> None:
    # 2011-12-29 24:00 -10:00 was 2011-12-31 00:00 +14:00: Friday the 30th never happened
    lo, hi = at(2011, 12, 29), at(2012, 1, 1)
    tt = zoned.cron("0 0 12 * * FRI", "Pacific/Apia")
    assert list(tt.occurrences(lo, hi)) == [at(2011, 12, 30, 10)]  # shifted to the 31st 00:00
    skip = zoned.cron("0 0 12 * * FRI", "Pacific/Apia", "skip")
    assert list(skip.occurrences(lo, hi)) == []
    (gap,) = skip.gap_skips(lo, hi)
    assert (gap.count, gap.first_local) == (1, datetime(2011, 12, 30, 12))
    hourly = zoned.cron("0 * * * *", "Pacific/Apia", "skip")
    assert sum(g.count for g in hourly.gap_skips(lo, hi)) == 24


def test_dublin_negative_summer_time_reads_chronologically() -> None:
    # Irish Standard Time is the summer offset; winter GMT is the "DST" (dst() < 0)
    fall = (at(2026, 10, 25, 0), at(2026, 10, 25, 3))  # 01:00Z: 02:00 IST -> 01:00 GMT
    assert ZoneInfo("Europe/Dublin").dst(datetime(2026, 12, 1)) == -H
    assert hms(occ("30 1 * * *", "Europe/Dublin", *fall)[0]) == ["10-25 00:30:00"]
    assert hms(occ("30 1 * * *", "Europe/Dublin", *fall, fold="second")[0]) == ["10-25 01:30:00"]
    spring = (at(2026, 3, 29, 0), at(2026, 3, 29, 3))
    assert hms(occ("30 1 * * *", "Europe/Dublin", *spring)[0]) == ["03-29 01:00:00"]


def test_kolkata_has_no_transition() -> None:
    tt = zoned.cron("0 30 9 * * *", "Asia/Kolkata")
    assert tt.following(at(2026, 1, 1), 2) == [at(2026, 1, 1, 4), at(2026, 1, 2, 4)]
    kolkata = zones.get_zone("Asia/Kolkata")
    assert zones.transitions(kolkata, zones.year_start(1941), zones.year_start(1946)) != []
    assert zones.transitions(kolkata, zones.year_start(1946), zones.year_start(2038)) == []
    assert tt.count(at(2026, 1, 1), at(2027, 1, 1)) == 365


def test_utc_is_the_plain_timetable() -> None:
    assert zoned.cron("0 * * * *") is timetable.cron("0 * * * *")
    assert zoned.cron("0 * * * *", "UTC", "skip", "both") is timetable.cron("0 * * * *")


def test_counting_a_day_of_seconds_does_not_enumerate(monkeypatch: pytest.MonkeyPatch) -> None:
    tt = zoned.cron("* * * * * *", "Europe/Berlin", "skip")
    lo, hi = at(2026, 3, 28, 12), at(2026, 3, 29, 12)
    stepped = []
    for name in ("_ascending", "_descending"):
        walk = getattr(timetable.CronTimetable, name)

        def counting(self: object, x: int, walk=walk) -> Iterator[object]:  # type: ignore[no-untyped-def]
            for pos in walk(self, x):
                stepped.append(pos)
                yield pos

        monkeypatch.setattr(timetable.CronTimetable, name, counting)
    assert tt.count(lo, hi) == 86_400
    (gap,) = tt.gap_skips(lo, hi)
    assert (gap.count, gap.first_local, gap.last_local) == (
        3600,
        datetime(2026, 3, 29, 2),
        datetime(2026, 3, 29, 2, 59, 59),
    )
    year = zoned.cron("* * * * * *", "Europe/Berlin", "shift", "both")
    assert year.count(at(2026, 1, 1), at(2027, 1, 1)) == 365 * 86_400
    assert len(stepped) <= 2  # the first and last skipped second, nothing else


def test_annotations() -> None:
    tt = zoned.cron("30 2 * * *", "Europe/Berlin", dst_fold="both")
    shifted = tt.annotate(at(2026, 3, 29, 1))
    assert (shifted.kind, shifted.local.strftime("%H:%M %Z")) == ("shifted", "03:00 CEST")
    assert "02:00:00–02:59:59 did not exist" in shifted.note
    first, second = tt.annotate(at(2026, 10, 25, 0, 30)), tt.annotate(at(2026, 10, 25, 1, 30))
    assert (first.kind, second.kind) == ("fold_first", "fold_second")
    assert "second of two 02:30:00" in second.note
    assert not tt.annotate(at(2026, 6, 1, 0, 30)).affected


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("Europe/Berln", "timezone_unknown", "did you mean 'Europe/Berlin'"),
        ("Mars/Olympus", "timezone_unknown", "unknown time zone 'Mars/Olympus'"),
        ("../../etc/passwd", "timezone_unknown", "unknown time zone"),
        ("localtime", "timezone_unknown", "is not accepted"),
        ("right/UTC", "timezone_unknown", "is not accepted"),
        ("", "timezone_invalid", "1 to 64 characters"),
        (5, "timezone_invalid", "got int"),
    ],
)
def test_unknown_zones_are_refused_by_name(name: object, code: str, words: str) -> None:
    with pytest.raises(TimetableError) as info:
        zones.validate_zone(name)
    assert (info.value.field, info.value.code) == ("timezone", code)
    assert str(info.value).startswith("timezone: ") and words in str(info.value)


def test_policies_are_validated() -> None:
    with pytest.raises(TimetableError, match="dst_gap: 'later' is not one of shift, skip"):
        zoned.cron("0 * * * *", "Europe/Berlin", "later")
    with pytest.raises(TimetableError, match="dst_fold: 'twice' is not one of first, second, both"):
        zoned.cron("0 * * * *", "Europe/Berlin", "shift", "twice")


# -- the property test against the oracle -----------------------------------------------

ZONES = sorted(zones.known_zones())
FIXED = [
    "* * * * * *",
    "*/30 * * * * *",
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 0 * * *",
    "0 30 1 * * *",
    "0 0 0 * * SAT,SUN",
]


def transitions_of(zone: ZoneInfo, year: int) -> list[datetime]:
    """Instants where ``zone``'s offset changes in ``year``: a daily scan, then bisection."""

    def offset(x: int) -> timedelta | None:
        return datetime.fromtimestamp(x, UTC).astimezone(zone).utcoffset()

    out = []
    t = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    while t < end:
        u = t + 86400
        if offset(t) != offset(u):
            a, b = t, u
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if offset(mid) == offset(a) else (a, mid)
            out.append(datetime.fromtimestamp(b, UTC))
        t = u
    return out


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    name = draw(st.sampled_from(ZONES))
    zone = ZoneInfo(name)
    year = draw(st.integers(1970, 2037))
    found = transitions_of(zone, year)
    if found:
        t = draw(st.sampled_from(found))
    else:
        t = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=draw(st.integers(0, 364)))
    before, after = (t - S).astimezone(zone).utcoffset(), t.astimezone(zone).utcoffset()
    assert before is not None and after is not None
    change = abs(after - before)
    lo = t - change - timedelta(seconds=draw(st.integers(0, 7200)))
    hi = t + change + timedelta(seconds=draw(st.integers(1, 7200)))
    # a wall-clock time near the transition, so that generated patterns hit the gap or fold
    nudge = timedelta(seconds=draw(st.integers(-3600, int(change.total_seconds()) + 3600)))
    local = (t + before + nudge).replace(tzinfo=None)
    s, m, h = local.second, local.minute, local.hour
    step = draw(st.sampled_from([1, 7, 15, 30]))
    pattern = draw(
        st.sampled_from(
            [
                *FIXED,
                f"{s} {m} {h} * * *",
                f"{m} {h} * * *",
                f"*/{step} {m} {h} * * *",
                f"*/{step} * {h} * * *",
                f"0 {m} {max(0, h - 1)}-{min(23, h + 2)} * * *",
                f"0 {m} {h} {local.day} {local.month} *",
                f"0 */{step} {h} * * {local.isoweekday() % 7}",
            ]
        )
    )
    return pattern, name, lo, hi


def check(pattern: str, name: str, lo: datetime, hi: datetime) -> None:
    fields = timetable.cron(pattern).fields
    seen = zone_oracle.walk(fields, ZoneInfo(name), lo, hi)
    for gap, fold in POLICIES:
        expected, skipped = seen.result(gap, fold, lo, hi)
        tt = zoned.cron(pattern, name, gap, fold)
        got = list(tt.occurrences(lo, hi))
        where = f"{pattern!r} in {name} [{lo}, {hi}) gap={gap} fold={fold}"
        assert all(a < b for a, b in itertools.pairwise(got)), f"repeated: {where}"
        assert got == expected, f"{where}: {sorted(set(got) ^ set(expected))[:6]}"
        assert tt.count(lo, hi) == len(expected), where
        assert sum(g.count for g in tt.gap_skips(lo, hi)) == skipped, where
        assert tt.latest(lo, hi, 3) == expected[-3:], where
        if expected:
            assert tt.next_after(lo - S) == expected[0], where
            assert tt.following(expected[0], 3)[: len(expected) - 1] == expected[1:4], where
            assert tt.contains(expected[len(expected) // 2]), where


PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(cases())
def test_matches_the_oracle_at_transitions(case: tuple[str, str, datetime, datetime]) -> None:
    check(*case)


@pytest.mark.parametrize(
    ("pattern", "name", "t"),
    [
        ("*/30 * 2 * * *", "Europe/Berlin", at(2026, 3, 29, 1)),
        ("*/30 * 2 * * *", "Europe/Berlin", at(2026, 10, 25, 1)),
        ("* * * * *", "America/New_York", at(2026, 3, 8, 7)),
        ("0 0-4 * * *", "America/New_York", at(2026, 11, 1, 6)),
        ("*/10 * * * *", "Australia/Lord_Howe", at(2026, 4, 4, 15)),
        ("*/10 * * * *", "Australia/Lord_Howe", at(2026, 10, 3, 15, 30)),
        ("0 0 * * * *", "Pacific/Apia", at(2011, 12, 30, 10)),
        ("30 1 * * *", "Europe/Dublin", at(2026, 10, 25, 1)),
        ("0 30 9 * * *", "Asia/Kolkata", at(2026, 6, 1)),
    ],
)
def test_named_transitions_match_the_oracle(pattern: str, name: str, t: datetime) -> None:
    check(pattern, name, t - 2 * H, t + 26 * H if name == "Pacific/Apia" else t + 2 * H)


def test_a_day_long_outage_across_the_gap_is_counted_exactly_without_stepping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A per-second Berlin schedule down for a day over the spring transition, each policy."""
    from django_pgsched.engine.policies import decide

    grid = zoned.cron("* * * * * *", "Europe/Berlin", "skip")
    start, now = at(2026, 3, 28, 13), at(2026, 3, 29, 13)
    grace, lookahead = timedelta(seconds=60), timedelta(seconds=5)
    stepped = []
    walk = timetable.CronTimetable._ascending

    def counting(self: object, x: int) -> Iterator[object]:
        for pos in walk(self, x):  # type: ignore[arg-type]
            stepped.append(pos)
            yield pos

    monkeypatch.setattr(timetable.CronTimetable, "_ascending", counting)
    for policy, kept in (("skip", 0), ("latest", 1), ("catch_up", 10)):
        d = decide(
            grid,
            next_fire_at=start,
            now=now,
            lookahead=lookahead,
            grace=grace,
            policy=policy,
            catch_up_limit=10,
        )
        missed = 86_400 - 60  # every real second from start to now - grace
        on_time = 60 + 5 + 1  # [now - grace, now + lookahead]
        assert (len(d.runs), d.skipped) == (kept + on_time, missed - kept), policy
        assert d.gap_skipped == 3600 and d.gap_skips[0].first_local == datetime(2026, 3, 29, 2)
        assert d.next_fire_at == now + lookahead + S
    assert len(stepped) < 1000  # the on-time runs and a few lookups, not 86,400 seconds
