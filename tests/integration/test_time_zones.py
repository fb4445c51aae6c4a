"""Named zones, DST policies and jitter against real PostgreSQL: planner, model, triggers, sync."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from django_pgsched.engine.planner import Planner
from django_pgsched.ledger.models import SkippedRange
from django_pgsched.models import JobRun, Schedule
from django_pgsched.ops.sync import sync_schedules
from django_pgsched.timing import jitter
from tests.conftest import at

# this module's times are written for the seed's 5 s planner lookahead (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("seed_lookahead")


BEFORE_GAP = at("2026-03-28 01:59:30")  # Berlin 02:59:30 CET, the day before clocks go forward
GAP = at("2026-03-29 01:00:00")  # 02:00 CET -> 03:00 CEST
AFTER_GAP = at("2026-03-30 00:00:00")  # 02:00:00 CEST the day after


def runs_of(schedule: Schedule) -> list[str]:
    return [
        r.scheduled_for.strftime("%m-%d %H:%M:%S")
        for r in JobRun.objects.filter(schedule=schedule).order_by("scheduled_for")
    ]


def test_gap_skip_counts_every_skipped_wall_clock_time(make_schedule):
    s = make_schedule(
        cron="*/30 * 2 * * *", timezone="Europe/Berlin", dst_gap="skip", next_fire_at=BEFORE_GAP
    )
    result = Planner().run_once(now=BEFORE_GAP)
    s.refresh_from_db()
    assert runs_of(s) == ["03-28 01:59:30"]
    assert s.next_fire_at == AFTER_GAP  # past the gap: its 120 times were decided now
    assert s.skipped_occurrences == 120
    assert result.skipped == 120
    assert result.skipped_by == {("default", "tests.noop", "cron", "dst_gap"): 120}
    # the ledger records the range with its reason: the wall-clock times 02:00:00-02:59:30,
    # as the instants they would have had at the offset before the change (+01:00)
    (gap,) = SkippedRange.objects.filter(schedule=s)
    assert (gap.reason, gap.count, gap.first, gap.last) == (
        "dst_gap",
        120,
        at("2026-03-29 01:00:00"),
        at("2026-03-29 01:59:30"),
    )


def test_gap_shift_fires_once_at_the_transition_and_counts_the_rest(make_schedule):
    s = make_schedule(cron="*/30 * 2 * * *", timezone="Europe/Berlin", next_fire_at=BEFORE_GAP)
    Planner().run_once(now=BEFORE_GAP)
    s.refresh_from_db()
    assert (s.next_fire_at, s.skipped_occurrences) == (GAP, 0)
    Planner().run_once(now=GAP)
    s.refresh_from_db()
    assert runs_of(s) == ["03-28 01:59:30", "03-29 01:00:00"]
    assert (s.next_fire_at, s.skipped_occurrences) == (AFTER_GAP, 119)


@pytest.mark.parametrize(("fold", "n"), [("first", 120), ("second", 120), ("both", 240)])
def test_fold_policies_in_the_planner(make_schedule, fold, n):
    start = at("2026-10-24 23:59:59")
    s = make_schedule(
        cron="*/30 * 2 * * *",
        timezone="Europe/Berlin",
        dst_fold=fold,
        next_fire_at=at("2026-10-25 00:00:00") if fold != "second" else at("2026-10-25 01:00:00"),
        misfire_policy="catch_up",
        catch_up_limit=1000,
        misfire_grace=timedelta(days=1),
    )
    Planner().run_once(now=at("2026-10-25 02:30:00"))
    s.refresh_from_db()
    runs = JobRun.objects.filter(schedule=s).order_by("scheduled_for")
    assert runs.count() == n and s.skipped_occurrences == 0
    assert [r.scheduled_for for r in runs] == s.occurrences(start, n)
    assert s.next_fire_at == at("2026-10-26 01:00:00")  # 02:00 CET the next day


def test_occurrences_are_the_planners(make_schedule):
    s = make_schedule(cron="0 30 1 * * *", timezone="America/New_York", dst_fold="both")
    got = s.occurrences(at("2026-10-31 00:00:00"), 3)
    assert [t.strftime("%m-%d %H:%M") for t in got] == ["10-31 05:30", "11-01 05:30", "11-01 06:30"]
    assert all(t.tzinfo is not None and t.utcoffset() == timedelta(0) for t in got)
    with pytest.raises(ValueError, match="count must be an integer"):
        s.occurrences(at("2026-10-31 00:00:00"), -1)


def test_new_zoned_schedule_fires_first_at_the_next_local_time(db):
    s = Schedule.objects.create(
        name="berlin", job="tests.noop", cron="0 9 * * *", timezone="Europe/Berlin"
    )
    local = s.next_fire_at.astimezone(s.get_timetable().zone)  # type: ignore[attr-defined]
    assert (local.hour, local.minute, local.second) == (9, 0, 0)


def test_jitter_moves_fire_after_only(make_schedule):
    t = at("2026-03-01 12:00:00")
    a = make_schedule(cron="*/10 * * * * *", jitter=timedelta(seconds=60), next_fire_at=t)
    b = make_schedule(cron="*/10 * * * * *", jitter=timedelta(seconds=60), next_fire_at=t)
    Planner().run_once(now=t)
    runs = list(JobRun.objects.filter(schedule__in=[a, b]).order_by("schedule_id"))
    assert len(runs) == 2
    for run in runs:
        assert run.scheduled_for == t
        assert run.idempotency_key == f"pgsched:{run.schedule_id}:2026-03-01T12:00:00Z"
        offset = run.fire_after - run.scheduled_for
        # bounded by the next occurrence, 10 s later, not by the 60 s of jitter
        assert timedelta(0) <= offset < timedelta(seconds=10)
        assert offset == jitter.offset(run.schedule_id, t, timedelta(seconds=60), t + 10 * S)
    assert runs[0].fire_after != runs[1].fire_after


S = timedelta(seconds=1)


# -- validation and constraints ------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"timezone": "Europe/Berln"}, "timezone", "unknown time zone 'Europe/Berln'"),
        ({"timezone": "localtime"}, "timezone", "'localtime' is not accepted"),
        ({"dst_gap": "later"}, "dst_gap", "dst_gap: 'later' is not one of shift, skip"),
        ({"dst_fold": "twice"}, "dst_fold", "not one of first, second, both"),
        ({"jitter": timedelta(days=2)}, "jitter", "jitter: must be from 0 seconds to 1 day"),
        ({"jitter": timedelta(seconds=-1)}, "jitter", "jitter: must be from 0 seconds"),
        (
            {"cron": None, "interval": timedelta(hours=1), "timezone": "Europe/Berlin"},
            "timezone",
            "interval schedules are elapsed time",
        ),
    ],
)
def test_validation_names_the_field_and_value(db, fields, field, words):
    values = {"name": "v", "job": "tests.noop", "cron": "0 9 * * *", **fields}
    with pytest.raises(ValidationError) as info:
        Schedule(**values).full_clean()
    assert field in info.value.message_dict
    assert any(words in m for m in info.value.message_dict[field]), info.value.message_dict


@pytest.mark.parametrize(
    "assignment",
    [
        "timezone = 'Europe/Berlin; DROP'",
        "timezone = ''",
        "dst_gap = 'later'",
        "dst_fold = 'twice'",
        "jitter = interval '-1 second'",
        "jitter = interval '2 days'",
        "cron = NULL, \"interval\" = interval '1 hour', anchor = now(), timezone = 'Europe/Berlin'",
    ],
)
def test_database_refuses_what_validation_refuses(make_schedule, assignment):
    s = make_schedule(cron="0 9 * * *")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE pgsched_schedule SET {assignment} WHERE id = %s", [s.pk])


def test_changing_the_zone_re_times_the_schedule(make_schedule):
    t = at("2026-03-01 12:00:00")
    s = make_schedule(cron="* * * * * *", next_fire_at=t)
    Planner().run_once(now=t - timedelta(days=1))  # nothing due yet
    future = JobRun.objects.create(
        schedule=s,
        schedule_name=s.name,
        scheduled_for=at("2099-01-01 00:00:00"),
        idempotency_key="future",
        job="tests.noop",
        queue="default",
        fire_after=at("2099-01-01 00:00:00"),
        max_attempts=1,
        timeout=timedelta(seconds=10),
    )
    for column, value in (("timezone", "Asia/Kolkata"), ("dst_fold", "both"), ("dst_gap", "skip")):
        Schedule.objects.filter(pk=s.pk).update(**{column: value})
        s.refresh_from_db()
        assert s.next_fire_at is None, column  # the planner recomputes it from the database clock
        Schedule.objects.filter(pk=s.pk).update(next_fire_at=t)
    future.refresh_from_db()
    assert (future.status, future.note) == ("cancelled", "schedule re-timed")
    Schedule.objects.filter(pk=s.pk).update(jitter=timedelta(seconds=5))  # not a re-timing
    s.refresh_from_db()
    assert s.next_fire_at == t


def test_declared_schedules_accept_the_time_fields(db):
    declared = {
        "berlin": {
            "job": "tests.noop",
            "cron": "0 9 * * *",
            "timezone": "Europe/Berlin",
            "dst_gap": "skip",
            "dst_fold": "both",
            "jitter": 30,
        }
    }
    assert sync_schedules(declared).created == ["berlin"]
    s = Schedule.objects.get(name="berlin")
    assert (s.timezone, s.dst_gap, s.dst_fold, s.jitter) == (
        "Europe/Berlin",
        "skip",
        "both",
        timedelta(seconds=30),
    )
    assert sync_schedules(declared).unchanged == ["berlin"]
    declared["berlin"]["timezone"] = "America/New_York"
    assert sync_schedules(declared).updated == ["berlin"]
    declared["berlin"]["timezone"] = "Mars/Olympus"
    with pytest.raises(ValidationError, match=r"SCHEDULES\['berlin'\]: timezone: unknown"):
        sync_schedules(declared)
