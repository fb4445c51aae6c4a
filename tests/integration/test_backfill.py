"""Backfill: the runs of past occurrences that have none, out of the ledger, bounded, idempotent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_pgsched import backfill
from django_pgsched.engine.planner import Planner
from django_pgsched.ledger.accounting import account
from django_pgsched.ledger.backfill import BackfillRefused, backfill_occurrences
from django_pgsched.models import JobRun, Schedule, SkippedRange, db_now
from tests.conftest import at, seconds

T = at("2026-03-01 12:00:00")


def ranges(s: Schedule) -> list[tuple[str, str, int, str]]:
    return [
        (r.first.strftime("%H:%M"), r.last.strftime("%H:%M"), r.count, r.reason)
        for r in SkippedRange.objects.filter(schedule=s).order_by("first")
    ]


@pytest.fixture
def outage(make_schedule):
    """A per-minute schedule that skipped 09:00 .. 11:58 (179) in a 3-hour outage."""
    s = make_schedule(
        cron="0 * * * * *", next_fire_at=T - timedelta(hours=3), misfire_policy="skip"
    )
    Planner().run_once(now=T)
    s.refresh_from_db()
    assert s.skipped_occurrences == 179
    return s


def test_backfill_creates_the_missing_runs_and_takes_them_out_of_the_ledger(outage):
    created = backfill(outage.name, at("2026-03-01 10:00:00"), at("2026-03-01 10:30:00"))
    assert created == 30
    runs = JobRun.objects.filter(schedule=outage, is_backfill=True).order_by("scheduled_for")
    assert runs.count() == 30 and runs[0].scheduled_for == at("2026-03-01 10:00:00")
    first = runs[0]
    assert first.note == "backfill" and first.status == "pending" and first.fire_after > T
    assert first.idempotency_key == f"pgsched:{outage.pk}:2026-03-01T10:00:00Z"
    assert ranges(outage) == [
        ("09:00", "09:59", 60, "misfire_skip"),
        ("10:30", "11:58", 89, "misfire_skip"),
    ]
    outage.refresh_from_db()
    assert outage.skipped_occurrences == 149  # the backfilled ones ran after all
    report = account(outage, T - timedelta(hours=3), outage.next_fire_at)
    assert report.problems == [] and report.runs == 2 + 30 and report.ledgered == 149


def test_backfill_is_idempotent(outage):
    start, end = at("2026-03-01 09:00:00"), at("2026-03-01 09:10:00")
    assert backfill(outage.name, start, end) == 10
    assert backfill(outage.name, start, end) == 0
    assert JobRun.objects.filter(schedule=outage, is_backfill=True).count() == 10


def test_backfill_refuses_more_than_the_limit_and_names_the_count(outage):
    with pytest.raises(BackfillRefused, match=r"179 occurrences without a run.*limit of 100"):
        backfill(outage.name, T - timedelta(hours=3), T, limit=100)
    assert not JobRun.objects.filter(is_backfill=True).exists()
    assert backfill(outage.name, T - timedelta(hours=3), T, limit=179) == 179
    assert ranges(outage) == []


def test_a_huge_range_is_refused_before_anything_is_listed(make_schedule):
    s = make_schedule(cron="* * * * * *", next_fire_at=T)
    with pytest.raises(BackfillRefused, match="at least") as refused:
        backfill(s.name, T - timedelta(days=3650), T)
    assert refused.value.count >= 3650 * 86400 - 1 and refused.value.limit == 1000


@pytest.mark.parametrize("limit", [100_001, 10**9])
def test_the_limit_has_a_ceiling(outage, limit):
    """Before, ``limit`` had none: one every-second schedule over ten years built ~315M
    timestamps in memory and one transaction."""
    with pytest.raises(ValidationError) as error:
        backfill(outage.name, T - timedelta(hours=3), T, limit=limit)
    assert "limit" in error.value.message_dict and str(limit) in str(error.value)


def test_a_range_of_more_occurrences_than_one_backfill_looks_through_is_refused(
    outage, monkeypatch
):
    from django_pgsched.ledger import backfill as module

    monkeypatch.setattr(module, "MAX_BACKFILL_SCAN", 100)
    with pytest.raises(BackfillRefused, match="180 occurrences, more than the 100") as refused:
        backfill(outage.name, T - timedelta(hours=3), T, limit=1000)
    assert refused.value.limit == 100
    assert not JobRun.objects.filter(is_backfill=True).exists()


def test_a_backfill_inserts_in_chunks_in_order_in_one_transaction(outage, monkeypatch):
    from django_pgsched.ledger import backfill as module

    monkeypatch.setattr(module, "BACKFILL_CHUNK", 50)
    assert backfill(outage.name, T - timedelta(hours=3), T, limit=179) == 179
    runs = JobRun.objects.filter(schedule=outage, is_backfill=True).order_by("id")
    times = [r.scheduled_for for r in runs]
    assert len(times) == 179 and times == sorted(times)  # ids follow the occurrences
    assert ranges(outage) == []
    outage.refresh_from_db()
    assert outage.skipped_occurrences == 0


def test_the_admin_form_refuses_a_limit_above_the_ceiling():
    from django_pgsched.admin.backfill import BackfillForm

    form = BackfillForm(
        {"start": "2026-03-01 09:00:00", "end": "2026-03-01 10:00:00", "limit": "1000000000"}
    )
    assert not form.is_valid() and "limit" in form.errors


def test_only_decided_occurrences_are_backfilled(make_schedule):
    now = db_now().replace(microsecond=0)
    s = make_schedule(cron="0 * * * * *", next_fire_at=now - timedelta(minutes=10), status="paused")
    result = backfill_occurrences(s.name, now - timedelta(hours=1), now + timedelta(hours=1))
    # up to where the paused schedule stopped: the rest is the planner's (a paused range later)
    assert result.horizon == s.next_fire_at and result.created == 50


def test_backfill_takes_its_queue_and_reports_a_dry_run(outage):
    result = backfill_occurrences(
        outage.name, at("2026-03-01 09:00:00"), at("2026-03-01 09:05:00"), dry_run=True
    )
    assert result.created == 5 and not JobRun.objects.filter(is_backfill=True).exists()
    backfill(outage.name, at("2026-03-01 09:00:00"), at("2026-03-01 09:05:00"), queue="slow")
    assert set(JobRun.objects.filter(is_backfill=True).values_list("queue", flat=True)) == {"slow"}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"start": T, "end": T - seconds(1)}, "end"),
        ({"start": T.replace(tzinfo=None), "end": T}, "start"),
        ({"start": T - seconds(60), "end": T, "limit": 0}, "limit"),
        ({"start": T - seconds(60), "end": T, "queue": "no spaces"}, "queue"),
    ],
)
def test_bad_input_is_refused_naming_the_field(outage, kwargs, field):
    with pytest.raises(ValidationError) as error:
        backfill(outage.name, **kwargs)
    assert field in error.value.message_dict


def test_an_unknown_schedule_is_refused(db):
    with pytest.raises(ValidationError, match="no schedule named 'nope'"):
        backfill("nope", T - seconds(60), T)


def test_the_command(outage, capsys):
    call_command(
        "pgsched_backfill",
        outage.name,
        "--start",
        "2026-03-01T09:00:00",
        "--end",
        "2026-03-01T09:03:00Z",
    )
    assert "created 3 run(s)" in capsys.readouterr().out
    with pytest.raises(CommandError, match="refused"):
        call_command(
            "pgsched_backfill",
            outage.name,
            "--start",
            "2026-03-01T09:00:00",
            "--end",
            "2026-03-01T12:00:00",
            "--limit",
            "5",
        )


def test_the_admin_action_needs_its_permission_and_backfills(client, django_user_model, outage):
    user = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_schedule", "change_schedule"])
    )
    client.force_login(user)
    url = reverse("admin:pgsched_schedule_changelist")
    page = client.get(url)
    assert "backfill_selected" not in page.content.decode()
    user.user_permissions.add(Permission.objects.get(codename="backfill_schedule"))
    form = {
        "action": "backfill_selected",
        "_selected_action": [outage.pk],
        "start": "2026-03-01 09:00:00",
        "end": "2026-03-01 09:20:00",
    }
    preview = client.post(url, {**form, "preview": "1"})
    assert "would create 20 run(s)" in preview.content.decode()
    assert not JobRun.objects.filter(is_backfill=True).exists()
    done = client.post(url, {**form, "apply": "1"}, follow=True)
    assert "created 20 run(s)" in done.content.decode()
    assert JobRun.objects.filter(is_backfill=True).count() == 20
