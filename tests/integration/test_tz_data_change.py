"""A zone's rules change under a running deployment: two versions of a zone file.

The test compiles two versions of a made-up zone with ``zic`` (the tz
database's own compiler): in v1 ``Testland/Capital`` stays at +01:00; in v2 it
moves to +02:00 on 2030-01-01. A schedule at 09:00 local is planned under v1,
then the process switches to v2 (what a restart after a tzdata update does).
Planned runs keep their ``scheduled_for``; ``next_fire_at`` is stale until
``recheck_zoned_schedules`` (run by ``runscheduler`` at start) fixes it, and
without it the first day under the new rules would be skipped silently.
"""

from __future__ import annotations

import shutil
import subprocess
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule
from django_pgsched.ops.zones import recheck_zoned_schedules
from django_pgsched.timing import zoned
from tests.conftest import at

ZIC = shutil.which("zic") or "/usr/sbin/zic"
V1 = "Zone Testland/Capital 1:00 - TST\n"
V2 = "Zone Testland/Capital 1:00 - TST 2030 Jan 1 0:00u\n                      2:00 - TDT\n"


def compile_zone(source: str, where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "testland.zi").write_text(source)
    subprocess.run([ZIC, "-d", str(where), str(where / "testland.zi")], check=True)
    return where


@pytest.fixture
def tz_versions(tmp_path: Path) -> Iterator[Callable[[str], None]]:
    if not Path(ZIC).exists():
        pytest.fail("zic (Debian package libc-bin) is needed to write the test's zone files")
    dirs = {"v1": compile_zone(V1, tmp_path / "v1"), "v2": compile_zone(V2, tmp_path / "v2")}

    def use(version: str) -> None:
        zoneinfo.reset_tzpath([str(dirs[version])])
        zoned.forget()  # a restarted replica: zones and timetables loaded afresh

    yield use
    zoneinfo.reset_tzpath()
    zoned.forget()


def runs_of(schedule: Schedule) -> list[str]:
    return [
        r.scheduled_for.strftime("%m-%d %H:%M")
        for r in JobRun.objects.filter(schedule=schedule).order_by("scheduled_for")
    ]


def plan_through(schedule: Schedule, *hours: str) -> None:
    for when in hours:
        Planner().run_once(now=at(when))
    schedule.refresh_from_db()


def test_new_rules_move_next_fire_at_and_keep_planned_runs(make_schedule, tz_versions):
    tz_versions("v1")
    s = make_schedule(cron="0 9 * * *", timezone="Testland/Capital", next_fire_at=at(
        "2029-12-31 08:00:00"
    ))  # fmt: skip
    plan_through(s, "2029-12-31 08:00:00")
    assert runs_of(s) == ["12-31 08:00"]
    assert s.next_fire_at == at("2030-01-01 08:00:00")  # 09:00 +01:00, under v1

    tz_versions("v2")  # the tz database is updated and the replica restarts
    assert s.occurrences(at("2029-12-31 12:00:00"), 1) == [at("2030-01-01 07:00:00")]
    result = recheck_zoned_schedules(now=at("2029-12-31 12:00:00"))
    assert result.retimed == {s.name: (at("2030-01-01 08:00:00"), at("2030-01-01 07:00:00"))}
    s.refresh_from_db()
    assert s.next_fire_at == at("2030-01-01 07:00:00")
    plan_through(s, "2030-01-01 07:00:00", "2030-01-02 07:00:00")
    # the run planned under v1 is untouched; from 2030 on, 09:00 is 07:00Z
    assert runs_of(s) == ["12-31 08:00", "01-01 07:00", "01-02 07:00"]
    assert s.skipped_occurrences == 0
    # under unchanged rules the re-check writes nothing
    assert recheck_zoned_schedules(now=at("2030-01-02 12:00:00")).retimed == {}


def test_without_the_recheck_the_first_day_under_new_rules_is_lost(make_schedule, tz_versions):
    """Why runscheduler re-checks at start (this is the failure it prevents)."""
    tz_versions("v1")
    s = make_schedule(cron="0 9 * * *", timezone="Testland/Capital", next_fire_at=at(
        "2029-12-31 08:00:00"
    ))  # fmt: skip
    plan_through(s, "2029-12-31 08:00:00")
    tz_versions("v2")
    plan_through(s, "2030-01-01 07:00:00", "2030-01-01 08:00:00", "2030-01-02 07:00:00")
    assert runs_of(s) == ["12-31 08:00", "01-02 07:00"]  # 2030-01-01 never ran
    assert s.skipped_occurrences == 0  # ... and nothing says so


def test_recheck_never_moves_a_start_later_nor_over_a_gap(make_schedule):
    """A later start that is an occurrence stays; a stale time before a gap moves to it."""
    later = make_schedule(
        cron="0 9 * * *", timezone="Europe/Berlin", next_fire_at=at("2026-03-20 08:00:00")
    )  # an explicit start a week ahead, at 09:00 CET: still an occurrence, kept
    kept = make_schedule(
        cron="*/30 * 2 * * *",
        timezone="Europe/Berlin",
        dst_gap="skip",
        next_fire_at=at("2026-03-29 00:59:27"),
    )  # not an occurrence, but nothing (no occurrence, no gap) lies before it: kept
    stale = make_schedule(
        cron="*/30 * 2 * * *",
        timezone="Europe/Berlin",
        dst_gap="skip",
        next_fire_at=at("2026-03-29 03:00:00"),
    )  # not an occurrence, and the 01:00Z gap lies before it: moved to the transition
    result = recheck_zoned_schedules(now=at("2026-03-29 00:59:00"))
    assert result.retimed == {stale.name: (at("2026-03-29 03:00:00"), at("2026-03-29 01:00:00"))}
    for s in (later, kept):
        before = s.next_fire_at
        s.refresh_from_db()
        assert s.next_fire_at == before
    Planner().run_once(now=at("2026-03-29 01:00:00"))
    stale.refresh_from_db()
    assert stale.skipped_occurrences == 120  # the gap's times, counted
