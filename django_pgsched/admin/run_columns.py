"""The run admin's display columns: each a cell of the list or a read-only field."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import CLAIMABLE_STATUSES, JobRun
from ..timing import describe
from .common import badge, utc


class RunColumns:
    """The JobRunAdmin's display columns (its list's and its change page's read-only fields)."""

    @admin.display(description="Status")
    def state(self, obj: JobRun) -> SafeString:
        return badge(obj.status, title=obj.note)

    @admin.display(description="Schedule")
    def schedule_column(self, obj: JobRun) -> SafeString:
        if obj.schedule_id is not None:
            return format_html(
                '<a href="{}">{}</a>',
                reverse("admin:pgsched_schedule_change", args=[obj.schedule_id]),
                obj.schedule_name or obj.schedule_id,
            )
        if obj.schedule_name:
            return format_html(
                '{} <span class="pgsched-tag" title="{}">one-off</span>',
                obj.schedule_name,
                obj.note or "not an occurrence of the schedule",
            )
        return format_html('<span class="pgsched-tag">{}</span>', "one-off")

    @admin.display(description="Scheduled for (UTC)", ordering="scheduled_for")
    def scheduled(self, obj: JobRun) -> SafeString:
        return utc(obj.scheduled_for, getattr(obj, "pgsched_now", None))

    @admin.display(description="Due (UTC)")
    def due(self, obj: JobRun) -> SafeString:
        """``fire_after``: the occurrence, plus the schedule's jitter, or the retry time."""
        html = utc(obj.fire_after, getattr(obj, "pgsched_now", None))
        if obj.fire_after is not None and obj.fire_after > obj.scheduled_for:
            why = "jitter" if obj.status != "retrying" and obj.attempts <= 1 else "retry"
            html = format_html(
                '{}<br><span class="pgsched-muted">{} after it was scheduled ({})</span>',
                html,
                describe.duration(obj.fire_after - obj.scheduled_for),
                why,
            )
        return html

    @admin.display(description="Started (UTC)")
    def started(self, obj: JobRun) -> SafeString:
        return utc(obj.started_at)

    @admin.display(description="Finished (UTC)")
    def finished(self, obj: JobRun) -> SafeString:
        return utc(obj.finished_at)

    @admin.display(description="Attempts")
    def tries(self, obj: JobRun) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description="Late by")
    def late_by(self, obj: JobRun) -> SafeString:
        """How long the latest attempt waited after it was due (start − due)."""
        now: datetime | None = getattr(obj, "pgsched_now", None)
        fire_after: datetime | None = obj.fire_after  # None: unreadable (fields.py)
        if fire_after is None:
            return format_html("{}", "—")
        if obj.status in CLAIMABLE_STATUSES and now is not None:
            if obj.fire_after > now:
                return format_html('<span class="pgsched-muted">{}</span>', "not due yet")
            return format_html("waiting {}", describe.duration(now - obj.fire_after))
        if obj.started_at is None or obj.started_at < obj.fire_after:
            return format_html("{}", "—")
        return format_html("{}", describe.duration(obj.started_at - obj.fire_after))

    @admin.display(description="Took")
    def took(self, obj: JobRun) -> str:
        if obj.started_at is None or obj.finished_at is None or obj.finished_at < obj.started_at:
            return "—"
        return describe.duration(obj.finished_at - obj.started_at)

    @admin.display(description="Lease")
    def lease(self, obj: JobRun) -> str:
        now: datetime | None = getattr(obj, "pgsched_now", None)
        if now is None:
            return "—"
        return describe.lease(obj.status, obj.worker, obj.claim_expires_at, now)

    @admin.display(description="Kwargs")
    def arguments(self, obj: JobRun) -> SafeString:
        shown: Any = obj.kwargs
        if obj.task_call is not None:  # a django.tasks task: its positional arguments too
            shown = {"args": obj.task_call.get("args", []), "kwargs": obj.kwargs}
        return format_html("<pre>{}</pre>", json.dumps(shown, indent=2, sort_keys=True))

    @admin.display(description="Return value")
    def result(self, obj: JobRun) -> SafeString:
        if obj.return_value is None:
            return format_html("{}", "—")
        return format_html("<pre>{}</pre>", json.dumps(obj.return_value, indent=2, sort_keys=True))

    # -- pages -------------------------------------------------------------------------
