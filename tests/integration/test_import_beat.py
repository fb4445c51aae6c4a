"""``pgsched_import_beat`` against a real django-celery-beat database, made in the test.

django-celery-beat's own migrations make its tables in the test database, and
its own models fill them. These tests need the ``celery-beat`` dependency group
and ``--ds=tests.settings_beat``; ``.ci/run`` runs them in its Django 5.2
environment (django-celery-beat 2.9 caps Django below 6.1)::

    PGSCHED_VENV=.venv-dj52 PYTHON=python3.11 bash -c 'source scripts/_env.sh
      pip install "Django>=5.2,<5.3" --group pyproject.toml:celery-beat
      pytest tests/integration/test_import_beat.py --ds=tests.settings_beat'

Without it, only the test of the command's answer when the app is missing runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_pgsched.importers.celery_beat import SOURCE, import_beat
from django_pgsched.models import Schedule, db_now

needs_beat = pytest.mark.skipif(
    not apps.is_installed("django_celery_beat"),
    reason="needs the celery-beat dependency group and --ds=tests.settings_beat",
)


def run(*args: str) -> str:
    out = StringIO()
    call_command("pgsched_import_beat", *args, stdout=out)
    return out.getvalue()


def snapshot() -> list[tuple[Any, ...]]:
    return list(
        Schedule.objects.order_by("name").values_list(
            "name", "job", "kwargs", "cron", "interval", "queue", "status", "source",
            "next_fire_at", "anchor", "updated_at",
        )
    )  # fmt: skip


@pytest.mark.django_db
def test_without_django_celery_beat_the_command_says_so():
    installed = [a for a in apps.app_configs if a != "django_celery_beat"]
    names = [apps.get_app_config(label).name for label in installed]
    with override_settings(INSTALLED_APPS=names):
        with pytest.raises(CommandError, match="django_celery_beat is not in INSTALLED_APPS"):
            run("--dry-run")


@pytest.fixture
def beat(db: None) -> dict[str, Any]:
    """A periodic task of every kind django-celery-beat has, made with its own models."""
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )

    now = db_now()
    nightly = CrontabSchedule.objects.create(minute="30", hour="2", timezone="UTC")
    weekdays = CrontabSchedule.objects.create(
        minute="*/15", hour="9-17", day_of_week="mon-fri", timezone="UTC"
    )
    paris = CrontabSchedule.objects.create(minute="0", hour="9", timezone="Europe/Paris")
    friday_13 = CrontabSchedule.objects.create(
        minute="0", hour="0", day_of_month="13", day_of_week="5", timezone="UTC"
    )
    ten_min = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES)
    fast = IntervalSchedule.objects.create(every=500, period=IntervalSchedule.MICROSECONDS)
    solar = SolarSchedule.objects.create(event="sunrise", latitude=48.85, longitude=2.35)
    clocked = ClockedSchedule.objects.create(clocked_time=now + timedelta(days=2))
    last_run = datetime(2026, 11, 30, 7, 3, 5, 250000, tzinfo=UTC)

    def task(name: str, **fields: Any) -> Any:
        fields.setdefault("task", "tests.noop")
        return PeriodicTask.objects.create(name=name, **fields)

    return {
        "model": PeriodicTask,
        "crontab": CrontabSchedule,
        "last_run": last_run,
        "tasks": [
            task("nightly report", crontab=nightly, kwargs='{"n": 1}', queue="reports"),
            task("weekday poll", crontab=weekdays),
            task("ten minutes", interval=ten_min, last_run_at=last_run),
            task("disabled", crontab=nightly, enabled=False),
            task("expiring", crontab=nightly, expires=now + timedelta(days=30)),
            task("expired", crontab=nightly, expires=now - timedelta(days=1)),
            task("prioritised", crontab=nightly, priority=5, expire_seconds=60),
            task("with args", crontab=nightly, args="[1, 2]"),
            task("paris", crontab=paris),
            task("friday the 13th", crontab=friday_13),
            task("too fast", interval=fast),
            task("sunrise", solar=solar),
            task("once", clocked=clocked, one_off=True),
            task("one-off interval", interval=ten_min, one_off=True),
            task("unregistered", crontab=nightly, task="proj.tasks.unknown"),
            task("mapped", crontab=nightly, task="proj.tasks.cleanup"),
        ],
    }


IMPORTED = [
    "disabled", "mapped", "nightly report", "paris", "prioritised", "ten minutes", "weekday poll"
]  # fmt: skip
NOT_MAPPED = {
    "expiring": "no end date",
    "expired": "beat runs it no more",
    "with args": "positional args [1, 2]",
    "friday the 13th": "cron when either does",
    "too fast": "whole seconds",
    "sunrise": "solar",
    "once": "clocked schedule",
    "one-off interval": "one-off task",
    "unregistered": "'proj.tasks.unknown' is not a registered job",
}


@needs_beat
def test_a_dry_run_reports_everything_and_writes_nothing(beat):
    before = snapshot()
    out = run("--dry-run", "--job", "proj.tasks.cleanup=tests.noop")
    assert snapshot() == before == []
    assert out.startswith("dry run: nothing was written\n")
    assert f"7 would be created: {', '.join(IMPORTED)}" in out
    for name, why in NOT_MAPPED.items():
        assert f"\n  {name}: " in out and why in out.split(f"\n  {name}: ")[1].split("\n")[0]
    assert "prioritised: priority 5 dropped" in out and "expire_seconds" not in out


@needs_beat
def test_the_import_maps_each_kind_and_reports_the_rest(beat):
    result = import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    assert sorted(result.created) == IMPORTED
    assert set(result.unmapped) == set(NOT_MAPPED)
    for name, why in NOT_MAPPED.items():
        assert why in result.unmapped[name], (name, result.unmapped[name])
    got = {s.name: s for s in Schedule.objects.all()}
    assert {s.source for s in got.values()} == {SOURCE}

    nightly = got["nightly report"]
    assert (nightly.job, nightly.cron, nightly.interval) == ("tests.noop", "30 2 * * *", None)
    assert nightly.kwargs == {"n": 1} and nightly.queue == "reports"
    assert nightly.status == "active" and nightly.next_fire_at is not None
    assert got["weekday poll"].cron == "*/15 9-17 * * MON-FRI" and got["weekday poll"].queue is None
    ten = got["ten minutes"]
    assert ten.interval == timedelta(minutes=10) and ten.cron is None
    assert ten.anchor == beat["last_run"].replace(microsecond=0)  # keeps beat's phase
    assert (ten.next_fire_at - ten.anchor) % timedelta(minutes=10) == timedelta(0)
    assert (got["paris"].cron, got["paris"].timezone) == ("0 9 * * *", "Europe/Paris")
    assert nightly.timezone == "UTC"
    assert got["disabled"].status == "paused"
    assert got["mapped"].job == "tests.noop"
    # Celery's expire_seconds: a run not started 60 s after its occurrence ends missed
    assert got["prioritised"].start_deadline == timedelta(seconds=60)
    assert nightly.start_deadline is None
    assert sorted(result.created_active) == sorted(set(IMPORTED) - {"disabled"})


@needs_beat
def test_a_repeated_import_changes_nothing_then_only_what_changed_in_beat(beat):
    import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    first = snapshot()
    again = import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    assert snapshot() == first
    assert sorted(again.unchanged) == IMPORTED and not again.created and not again.updated

    # the user's own changes to an imported schedule stay (status, policy, and a start
    # deadline where beat has no expire_seconds)
    Schedule.objects.filter(name="weekday poll").update(
        status="paused", misfire_policy="skip", start_deadline=timedelta(minutes=5)
    )
    crontab = beat["crontab"].objects.get(minute="30", hour="2")
    crontab.hour = "3"
    crontab.save()
    out = run("--job", "proj.tasks.cleanup=tests.noop")
    assert (
        "4 updated: disabled (cron), mapped (cron), nightly report (cron), prioritised (cron)"
        in out
    )
    assert Schedule.objects.get(name="nightly report").cron == "30 3 * * *"
    weekday = Schedule.objects.get(name="weekday poll")
    assert (weekday.status, weekday.misfire_policy) == ("paused", "skip")
    assert weekday.start_deadline == timedelta(minutes=5)


@needs_beat
def test_paused_creates_every_schedule_paused_and_a_prefix_names_them(beat):
    out = run("--paused", "--prefix", "beat:", "--job", "proj.tasks.cleanup=tests.noop")
    assert set(Schedule.objects.values_list("status", flat=True)) == {"paused"}
    assert sorted(Schedule.objects.values_list("name", flat=True)) == [
        f"beat:{n}" for n in IMPORTED
    ]
    assert "created active" not in out


@needs_beat
def test_a_schedule_of_the_same_name_not_imported_from_beat_is_left_alone(beat, make_schedule):
    own = make_schedule(name="nightly report", cron="0 0 * * *")
    result = import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    assert "was not imported from celery beat" in result.unmapped["nightly report"]
    own.refresh_from_db()
    assert (own.cron, own.source) == ("0 0 * * *", "database")


@needs_beat
def test_a_task_deleted_in_beat_is_reported_not_deleted(beat):
    import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    beat["model"].objects.filter(name="weekday poll").delete()
    result = import_beat(jobs={"proj.tasks.cleanup": "tests.noop"})
    assert result.stale == ["weekday poll"]
    assert Schedule.objects.filter(name="weekday poll").exists()


@needs_beat
@pytest.mark.parametrize(
    "fields",
    [
        {"minute": "*/15", "hour": "9-17", "day_of_week": "mon-fri"},
        {"minute": "30", "hour": "9", "day_of_week": "mon-fri", "timezone": "Europe/Paris"},
        {"minute": "0", "hour": "*/5", "timezone": "America/New_York"},
        {"minute": "0", "hour": "8", "day_of_week": "fri-mon"},  # Celery wraps around
        {"minute": "5", "hour": "*/6", "day_of_month": "1,15"},
        {"minute": "0", "hour": "0", "day_of_month": "13", "day_of_week": "0-6"},
        {"minute": "1-10/3", "hour": "0", "month_of_year": "jan-mar"},
    ],
)
def test_an_imported_crontab_fires_when_celery_would(beat, fields):
    """Our next 40 fire times equal Celery's own, computed by its crontab."""
    beat["model"].objects.all().delete()
    fields = {"timezone": "UTC", **fields}
    tab = beat["crontab"].objects.create(**fields)
    beat["model"].objects.create(name="t", task="tests.noop", crontab=tab)
    import_beat()
    ours = Schedule.objects.get(name="t").get_timetable()
    theirs = tab.schedule  # django-celery-beat's own (time-zone aware) crontab
    theirs.nowfun = lambda: datetime(2026, 12, 1, tzinfo=UTC)
    t = datetime(2026, 12, 30, 23, 59, 30, tzinfo=UTC)  # no DST change in the next 40
    for _ in range(40):
        start, delta, _now = theirs.remaining_delta(t)  # Celery's next run after a run at t
        got = ours.next_after(t)
        assert got == (start + delta).astimezone(UTC), (fields, t)
        t = got
