"""Mapping a django-celery-beat periodic task to a schedule: pure, no database, no Celery.

Crontabs are given here as the value sets Celery expands them to (the importer
asks Celery for them; ``tests/integration/test_import_beat.py`` does it for real).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_pgsched.importers.beat_mapping import (
    FULL,
    BeatTask,
    Crontab,
    NotMappable,
    cron_expression,
    map_task,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MINUTE, HOUR, DOM, MONTH, DOW = FULL


def tab(minute="*", hour="*", dom="*", month="*", dow="*", *, sets=None, tz="UTC") -> Crontab:
    return Crontab(minute, hour, dom, month, dow, tz, FULL if sets is None else sets)


def task(**fields) -> BeatTask:
    fields.setdefault("name", "nightly")
    fields.setdefault("task", "tests.noop")
    if "every" not in fields and "other" not in fields:
        fields.setdefault("crontab", tab("0", "2", sets=({0}, {2}, DOM, MONTH, DOW)))
    return BeatTask(**fields)


def reason(**fields) -> str:
    with pytest.raises(NotMappable) as info:
        map_task(task(**fields), now=NOW)
    return str(info.value)


def test_a_crontab_keeps_its_text_when_ours_reads_it_the_same():
    sets = (frozenset(range(0, 60, 15)), frozenset({9}), DOM, MONTH, frozenset(range(1, 6)))
    assert cron_expression(tab("*/15", "9", "*", "*", "mon-fri", sets=sets)) == "*/15 9 * * MON-FRI"


def test_a_full_day_field_becomes_a_star_so_the_other_day_field_alone_decides():
    # Celery: both day fields must match. Ours: '0-6' is restricted text, and two
    # restricted day fields would mean "either" (Vixie cron): so it is written '*'.
    sets = (frozenset({0}), frozenset({0}), frozenset({13}), MONTH, DOW)
    assert cron_expression(tab("0", "0", "13", "*", "0-6", sets=sets)) == "0 0 13 * *"


def test_both_day_fields_restricted_is_not_mapped():
    sets = (frozenset({0}), frozenset({0}), frozenset({13}), MONTH, frozenset({5}))
    with pytest.raises(NotMappable, match="both match, cron when either"):
        cron_expression(tab("0", "0", "13", "*", "fri", sets=sets))


def test_what_ours_reads_differently_is_written_as_celery_expands_it():
    # Celery wraps 'fri-mon' around the week; our dialect rejects wrap-around ranges
    sets = (frozenset({0}), frozenset({8}), DOM, MONTH, frozenset({5, 6, 0, 1}))
    assert cron_expression(tab("0", "8", "*", "*", "fri-mon", sets=sets)) == "0 8 * * 0-1,5-6"


def test_a_crontab_celery_rejects_is_not_mapped():
    with pytest.raises(NotMappable, match="Celery rejects it"):
        cron_expression(Crontab("61", sets=None, error="Invalid end range"))


def test_a_crontab_that_never_fires_is_not_mapped_with_our_reason():
    sets = (frozenset({0}), frozenset({0}), frozenset({30}), frozenset({2}), DOW)
    with pytest.raises(NotMappable, match="never occurs in February"):
        cron_expression(tab("0", "0", "30", "2", "*", sets=sets))


def test_a_crontab_maps_to_cron_and_the_task_name_is_the_job():
    mapped = map_task(task(kwargs='{"n": 1}', queue="reports"), now=NOW)
    assert mapped.name == "nightly"
    assert mapped.fields == {
        "job": "tests.noop",
        "kwargs": {"n": 1},
        "cron": "0 2 * * *",
        "interval": None,
        "timezone": "UTC",
        "queue": "reports",
    }
    assert mapped.enabled and mapped.anchor is None and mapped.notes == ()


def test_an_interval_maps_anchored_at_the_last_run():
    last = datetime(2026, 11, 30, 7, 3, 5, 123456, tzinfo=UTC)
    mapped = map_task(task(every=timedelta(minutes=10), last_run_at=last), now=NOW)
    assert mapped.fields["interval"] == timedelta(minutes=10)
    assert mapped.fields["cron"] is None
    assert mapped.anchor == last.replace(microsecond=0)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"every": timedelta(microseconds=500)}, "whole seconds"),
        ({"every": timedelta(seconds=1.5)}, "whole seconds"),
        ({"other": "a solar schedule (sunrise at 1, 2): no"}, "solar"),
        ({"one_off": True}, "enqueue"),
        ({"args": "[1, 2]"}, "positional args [1, 2]"),
        ({"args": "nope"}, "args is not valid JSON"),
        ({"kwargs": "[1]"}, "is not a JSON object"),
        ({"task": "proj.tasks.unknown"}, "--job proj.tasks.unknown=JOB"),
        ({"task": "celery.backend_cleanup"}, "RETENTION"),
        ({"expires": NOW - timedelta(days=1)}, "expired at 2026-11-30"),
        ({"expires": NOW + timedelta(days=1)}, "no end date"),
        ({"start_time": NOW + timedelta(days=1)}, "no start time"),
        ({"crontab": None}, "no schedule"),
        ({"name": "x" * 201}, "longer than 200"),
    ],
)
def test_what_is_not_mapped_says_why(fields, text):
    assert text in reason(**fields)


def test_every_reason_is_given_at_once():
    text = reason(args="[1]", task="proj.tasks.unknown", one_off=True)
    assert "positional args" in text and "not a registered job" in text and "one-off" in text


def test_a_crontab_keeps_its_time_zone():
    paris = tab("0", "9", sets=({0}, {9}, DOM, MONTH, DOW), tz="Europe/Paris")
    mapped = map_task(task(crontab=paris), now=NOW)
    assert (mapped.fields["cron"], mapped.fields["timezone"]) == ("0 9 * * *", "Europe/Paris")


def test_a_past_start_and_a_utc_alias_are_fine():
    mapped = map_task(task(start_time=NOW - timedelta(days=1), crontab=tab(tz="Etc/UTC")), now=NOW)
    assert mapped.fields["cron"] == "* * * * *" and mapped.fields["timezone"] == "UTC"


def test_a_task_name_can_map_to_another_job():
    mapped = map_task(
        task(task="proj.tasks.cleanup"), now=NOW, jobs={"proj.tasks.cleanup": "tests.noop"}
    )
    assert mapped.fields["job"] == "tests.noop"
    with pytest.raises(NotMappable, match="mapped from task"):
        map_task(task(task="proj.tasks.cleanup"), now=NOW, jobs={"proj.tasks.cleanup": "nope"})


def test_what_celery_routes_by_is_imported_without_and_noted():
    mapped = map_task(
        task(priority=3, exchange="ex", routing_key="rk", headers='{"a": 1}', expire_seconds=30),
        now=NOW,
    )
    assert len(mapped.notes) == 4
    assert mapped.notes[0].startswith("priority 3 dropped")
    assert map_task(task(headers="{}"), now=NOW).notes == ()


def test_expire_seconds_becomes_the_start_deadline():
    mapped = map_task(task(expire_seconds=30), now=NOW)
    assert mapped.fields["start_deadline"] == timedelta(seconds=30)
    assert mapped.notes == ()
    # without it the deadline is not the import's (a user's value survives a re-import)
    assert "start_deadline" not in map_task(task(), now=NOW).fields
    for seconds in (0, 366 * 86400 + 1):
        mapped = map_task(task(expire_seconds=seconds), now=NOW)
        assert "start_deadline" not in mapped.fields
        assert mapped.notes == (
            f"expire_seconds {seconds} dropped: a start deadline is 1 s to 366 days, "
            "so a late run still starts",
        )


def test_a_disabled_task_and_a_prefix():
    mapped = map_task(task(enabled=False), now=NOW, prefix="beat/")
    assert mapped.name == "beat/nightly" and not mapped.enabled
