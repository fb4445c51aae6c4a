"""A schedule's timeline in the admin: its last occurrences, each ran, skipped, missed or not yet.

Read from :func:`django_pgsched.ledger.timeline.occurrences` (the timetable,
the runs and the ledger), newest first.
"""

from __future__ import annotations

from datetime import UTC

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..ledger.timeline import Occurrence, occurrences
from ..models import Schedule
from ..statuses import SkipReason
from ..timing import timetable
from .common import TIME

ON_SCHEDULE_PAGE = 30  # occurrences shown on a schedule's page

_REASONS = dict(SkipReason.choices)


def _what(o: Occurrence) -> SafeString:
    if o.run_id is not None:
        link = reverse("admin:pgsched_jobrun_change", args=[o.run_id])
        backfill = " (backfill)" if o.is_backfill else ""
        return format_html('<a href="{}">run {}</a>: {}{}', link, o.run_id, o.status, backfill)
    if o.outcome == "skipped":
        return format_html("{}", _REASONS.get(o.reason or "", o.reason or ""))
    if o.outcome == "stopped":
        return format_html("the schedule was {}; not planned", o.reason)
    if o.outcome == "overdue":
        return format_html("{}", "due, not planned yet: is a planner running?")
    return format_html("{}", "no run and no ledger entry (retention deleted its history)")


def timeline_table(schedule: Schedule) -> SafeString:
    """The last occurrences of ``schedule`` as a small table, newest first."""
    try:
        found = occurrences(schedule, limit=ON_SCHEDULE_PAGE)
    except (timetable.TimetableError, ValueError, OverflowError) as exc:
        return format_html('<span class="pgsched-muted">no timetable: {}</span>', exc)
    if not found:
        return format_html('<span class="pgsched-muted">{}</span>', "no occurrence yet")
    rows = format_html_join(
        "",
        '<tr class="pgsched-occurrence-{}"><td>{}</td><td>{}</td><td>{}</td></tr>',
        ((o.outcome, o.at.astimezone(UTC).strftime(TIME), o.outcome, _what(o)) for o in found),
    )
    return format_html(
        '<table class="pgsched-timeline"><thead><tr><th>occurrence (UTC)</th><th>outcome</th>'
        "<th>details</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )
