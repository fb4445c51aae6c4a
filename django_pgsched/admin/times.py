"""Times as a person reads them in the admin: local time with its offset, UTC, and marks.

A zoned schedule's fire times show in its zone (with the offset) and in UTC;
a fire time a clock change moved (shifted out of a gap, or one pass of a
fold) carries a mark and a note. The same words as ``pgsched_cron --tz``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Schedule
from ..timing import describe, timetable, zoned, zones
from .common import TIME

PREVIEW = 5  # fire times in the preview
TRANSITIONS = 2  # ... and the zone's next transitions it crosses


def zone_words(obj: Schedule) -> str:
    if not obj.cron:
        return "(elapsed time, UTC)"
    if obj.timezone == zones.DEFAULT_ZONE:
        return "(UTC)"
    return f"(in {obj.timezone}; dst_gap={obj.dst_gap}, dst_fold={obj.dst_fold})"


def zone_tag(obj: Schedule) -> SafeString:
    if obj.timezone == zones.DEFAULT_ZONE:
        return format_html('<span class="pgsched-tag">{}</span>', "UTC")
    return format_html(
        '<span class="pgsched-tag" title="{}">{}</span>',
        f"read in {obj.timezone}; a skipped time: {obj.dst_gap}; a repeated time: {obj.dst_fold}",
        obj.timezone,
    )


def local_and_utc(note: zoned.Annotation) -> SafeString:
    """A fire time in the zone with its offset, marked when a transition moved it."""
    local = note.local
    offset = local.strftime("%z")
    text = f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({offset[:3]}:{offset[3:]})"
    if not note.affected:
        return format_html("{}", text)
    return format_html(
        '{} <span class="pgsched-tag pgsched-dst" title="{}">{}</span>',
        text,
        note.note,
        "DST " + note.kind.replace("_", " "),
    )


def fire_time(grid: timetable.Timetable, t: datetime, now: datetime) -> SafeString:
    """One item of the preview: local time and offset (zoned), UTC, relative, and any note."""
    relative = describe.relative(t, now)
    if not isinstance(grid, zoned.ZonedCronTimetable):
        return format_html(
            '{} UTC <span class="pgsched-muted">{}</span>', t.strftime(TIME), relative
        )
    note = grid.annotate(t)
    html = format_html(
        '{} · {} UTC <span class="pgsched-muted">{}</span>',
        local_and_utc(note),
        t.astimezone(UTC).strftime(TIME),
        relative,
    )
    if note.affected:
        html = format_html('{}<br><span class="pgsched-muted">{}</span>', html, note.note)
    return html


def transitions_preview(grid: zoned.ZonedCronTimetable, now: datetime) -> SafeString:
    """The fire times around the zone's next transitions, as ``pgsched_cron --tz`` shows them."""
    lo = zones.from_datetime(now) + 1
    found = zones.transitions(grid.zone, lo, lo + 3 * 366 * 86_400)[:TRANSITIONS]
    if not found:
        return format_html('<p class="pgsched-muted">{}</p>', "No transition in the next 3 years.")
    parts = []
    for tr in found:
        at = zones.to_datetime(tr.at)
        span = timedelta(seconds=abs(tr.change))
        start = at - span if tr.change < 0 else at
        times = grid.latest(start - timedelta(days=2), start, 1)
        try:
            times += grid.following(start - timedelta(seconds=1), 3)
        except timetable.TimetableError:
            pass
        what = "clocks go forward" if tr.change > 0 else "clocks go back"
        local = at.astimezone(grid.zone)
        skipped = sum(g.count for g in grid.gap_skips(at, at + timedelta(seconds=1)))
        extra = f"; {skipped} matching time(s) skipped (dst_gap)" if skipped else ""
        parts.append(
            format_html(
                "<li>{} {} ({}){}<ol>{}</ol></li>",
                f"{local:%Y-%m-%d}",
                what,
                describe.duration(span),
                extra,
                format_html_join("", "<li>{}</li>", ((fire_time(grid, t, now),) for t in times)),
            )
        )
    return format_html(
        "<p><strong>Around the next transitions of {}</strong></p>"
        '<ul class="pgsched-preview">{}</ul>',
        grid.zone_name,
        format_html_join("", "{}", ((p,) for p in parts)),
    )
