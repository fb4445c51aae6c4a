"""The schedule admin's display columns, and the strip of each schedule's last runs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.db import connections
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from .. import sqlfiles
from ..conf import get_settings
from ..models import Schedule, ScheduleStatus, db_now
from ..timing import describe, timetable, zoned, zones
from .changes import changes_table
from .common import TIME, badge, utc
from .timeline import timeline_table
from .times import PREVIEW, fire_time, local_and_utc, transitions_preview, zone_tag, zone_words

RECENT_RUNS = 10  # cells in a schedule's strip

# The last runs of each schedule on the page, newest first (queries.sql).
RECENT_RUNS_SQL = sqlfiles.get("admin", "recent_runs")


@dataclass(frozen=True)
class RecentRun:
    id: int
    status: str
    scheduled_for: datetime


def attach_recent_runs(schedules: Iterable[Schedule]) -> None:
    """Set ``pgsched_recent`` (newest first) and ``pgsched_now`` on each schedule, in one query."""
    by_id = {s.pk: s for s in schedules}
    if not by_id:
        return
    for s in by_id.values():
        s.pgsched_recent = []  # type: ignore[attr-defined]
    params: dict[str, Any] = {
        "ids": list(by_id),
        "names": [s.name for s in by_id.values()],
        "limit": RECENT_RUNS,
    }
    with connections[get_settings().DATABASE_ALIAS].cursor() as cursor:
        cursor.execute(RECENT_RUNS_SQL, params)
        for sid, now, run_id, status, scheduled_for in cursor.fetchall():
            by_id[sid].pgsched_now = now  # type: ignore[attr-defined]
            if run_id is not None:
                by_id[sid].pgsched_recent.append(RecentRun(run_id, status, scheduled_for))  # type: ignore[attr-defined]


class ScheduleColumns:
    """The ScheduleAdmin's display columns (its list's and its change page's read-only fields)."""

    @admin.display(description="When")
    def when(self, obj: Schedule) -> SafeString:
        if obj.cron:
            try:
                words = describe.cron(obj.cron)
            except timetable.TimetableError as exc:
                return format_html(
                    '<code>{}</code><br><span class="pgsched-error">{}</span>', obj.cron, exc
                )
            return format_html(
                '{}<br><code class="pgsched-muted">{}</code> {}', words, obj.cron, zone_tag(obj)
            )
        if obj.interval is None:
            return format_html("{}", "—")
        return format_html(
            '{}<br><span class="pgsched-muted">from {}</span>',
            describe.interval(obj.interval),
            utc(obj.anchor),
        )

    @admin.display(description="Status", ordering="status")
    def state(self, obj: Schedule) -> SafeString:
        html = badge(obj.status, title=obj.last_error)
        if obj.source == "settings":
            html = format_html(
                '{} <span class="pgsched-tag" title="{}">settings</span>',
                html,
                "Declared in PGSCHED['SCHEDULES']: edits are overwritten at the next sync",
            )
        if obj.status == ScheduleStatus.BROKEN and obj.last_error:
            html = format_html('{}<br><span class="pgsched-error">{}</span>', html, obj.last_error)
        return html

    @admin.display(description="Next fire", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> SafeString:
        if obj.status != ScheduleStatus.ACTIVE:
            return format_html("{}", "—")
        if obj.next_fire_at is None:
            return format_html('<span class="pgsched-muted">{}</span>', "being computed")
        if obj.timezone == zones.DEFAULT_ZONE or not obj.cron:
            return utc(obj.next_fire_at, getattr(obj, "pgsched_now", None))
        try:
            note = zoned.annotate(obj.get_timetable(), obj.next_fire_at)
        except timetable.TimetableError:
            return utc(obj.next_fire_at, getattr(obj, "pgsched_now", None))
        return format_html(
            "{}<br>{}",
            local_and_utc(note),
            utc(obj.next_fire_at, getattr(obj, "pgsched_now", None)),
        )

    @admin.display(description="Last fire (UTC)", ordering="last_fire_at")
    def last_fire(self, obj: Schedule) -> SafeString:
        return utc(obj.last_fire_at, getattr(obj, "pgsched_now", None))

    @admin.display(description="Skipped", ordering="skipped_occurrences")
    def skipped(self, obj: Schedule) -> SafeString:
        return format_html(
            '<span title="{}">{}</span>',
            "Occurrences the misfire policy discarded",
            f"{obj.skipped_occurrences:,}",
        )

    @admin.display(description="Last run")
    def last_run(self, obj: Schedule) -> SafeString:
        recent: list[RecentRun] = getattr(obj, "pgsched_recent", [])
        if not recent:
            return format_html('<span class="pgsched-muted">{}</span>', "no run yet")
        run = recent[0]
        return format_html(
            '<a href="{}">{}</a> <span class="pgsched-muted">{}</span>',
            reverse("admin:pgsched_jobrun_change", args=[run.id]),
            badge(run.status),
            describe.relative(run.scheduled_for, obj.pgsched_now),  # type: ignore[attr-defined]
        )

    @admin.display(description=f"Last {RECENT_RUNS} runs")
    def recent_runs(self, obj: Schedule) -> SafeString:
        if obj._state.adding:
            return format_html("{}", "—")
        recent: list[RecentRun] = getattr(obj, "pgsched_recent", [])
        cells = format_html_join(
            "",
            '<a class="pgsched-cell pgsched-{}" href="{}" title="{} UTC · {}"></a>',
            (
                (
                    r.status,
                    reverse("admin:pgsched_jobrun_change", args=[r.id]),
                    r.scheduled_for.astimezone(UTC).strftime(TIME),
                    r.status.replace("_", " "),
                )
                for r in reversed(recent)
            ),
        )
        return format_html(
            '<span class="pgsched-strip">{}</span> <a class="pgsched-muted" href="{}?{}">all</a>',
            cells,
            reverse("admin:pgsched_jobrun_changelist"),
            urlencode({"schedule": obj.name}),
        )

    @admin.display(description="Runs (oldest → newest)")
    def runs(self, obj: Schedule) -> SafeString:
        return format_html(
            '{}<div class="pgsched-last-run">{}</div>', self.recent_runs(obj), self.last_run(obj)
        )

    @admin.display(description="Next fire times")
    def preview(self, obj: Schedule) -> SafeString:
        if obj._state.adding:
            return format_html("{}", "Shown once the schedule is saved.")
        now = getattr(obj, "pgsched_now", None) or db_now()
        try:
            grid = obj.get_timetable()
            times = grid.following(now, PREVIEW)
            words = describe.cron(obj.cron) if obj.cron else describe.interval(obj.interval)  # type: ignore[arg-type]
        except timetable.TimetableError as exc:
            return format_html('<span class="pgsched-error">{}</span>', exc)
        items = format_html_join("", "<li>{}</li>", ((fire_time(grid, t, now),) for t in times))
        paused = "" if obj.status == ScheduleStatus.ACTIVE else " (once resumed)"
        jitter = ""
        if obj.jitter:
            jitter = f"; each run may start up to {describe.duration(obj.jitter)} later (jitter)"
        html = format_html(
            '<strong>{}</strong> <span class="pgsched-muted">{}</span>{}{}'
            '<ol class="pgsched-preview">{}</ol>',
            words,
            zone_words(obj),
            paused,
            jitter,
            items,
        )
        if isinstance(grid, zoned.ZonedCronTimetable):
            html = format_html("{}{}", html, transitions_preview(grid, now))
        return html

    @admin.display(description="Timeline")
    def timeline(self, obj: Schedule) -> SafeString:
        if obj._state.adding:
            return format_html("{}", "—")
        if getattr(obj, "pgsched_unreadable", None):  # the timeline reads them
            return format_html("{}", "— (the schedule holds values Python cannot read)")
        return timeline_table(obj)

    @admin.display(description="Latest changes")
    def change_history(self, obj: Schedule) -> SafeString:
        if obj._state.adding:
            return format_html("{}", "—")
        return changes_table(obj)

    @admin.display(description="Declared in")
    def declared_in(self, obj: Schedule) -> str:
        if obj.source == "settings":
            return (
                "settings (PGSCHED['SCHEDULES']): edits here are overwritten at the next sync "
                "(runscheduler start or manage.py pgsched_sync); pause and resume are kept"
            )
        return "the admin or code"
