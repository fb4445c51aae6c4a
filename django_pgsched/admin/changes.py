"""The audit trail in the admin: the list of schedule changes, and the latest on a schedule's page.

Read-only: rows are written by the database's trigger, never by the admin.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from ..audit import changes
from ..audit.models import ScheduleChange
from ..digits import ascii_int
from ..models import Schedule
from .common import TIME, BoundedCountPaginator, UnreadableRows

if TYPE_CHECKING:
    ChangeAdminBase = admin.ModelAdmin[ScheduleChange]
else:
    ChangeAdminBase = admin.ModelAdmin

ON_SCHEDULE_PAGE = 10  # changes shown on a schedule's page
VALUE_CHARS = 120  # a value longer than this is cut in the tables


def _value(value: Any) -> str:
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _fields(change: ScheduleChange) -> SafeString:
    if change.action == "created":
        return format_html("{}", ", ".join(sorted(change.changes)))
    return format_html_join(
        "",
        "<div><code>{}</code>: {} → {}</div>",
        ((field, _value(before), _value(after)) for field, before, after in change.pairs()),
    )


def _actor(change: ScheduleChange) -> str:
    return change.actor.removeprefix("user:")


def changes_table(schedule: Schedule) -> SafeString:
    """The latest changes of ``schedule`` as a small table, with a link to all of them."""
    latest = changes(schedule, limit=ON_SCHEDULE_PAGE)
    if not latest:
        return format_html('<span class="pgsched-muted">{}</span>', "no change recorded")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (c.at.strftime(TIME), _actor(c), c.summary, _fields(c) if c.action != "deleted" else "")
            for c in latest
        ),
    )
    url = reverse("admin:pgsched_schedulechange_changelist")
    return format_html(
        '<table class="pgsched-changes"><thead><tr><th>when (UTC)</th><th>who</th><th>what</th>'
        "<th>before → after</th></tr></thead><tbody>{}</tbody></table>"
        '<a class="pgsched-muted" href="{}?{}">all changes</a>',
        rows,
        url,
        urlencode({"schedule_id": schedule.pk}),
    )


@admin.register(ScheduleChange)
class ScheduleChangeAdmin(UnreadableRows, ChangeAdminBase):
    list_display = ("when", "schedule_name", "who", "what", "details")
    list_filter = ("action",)
    search_fields = ("=schedule_name", "=actor")
    search_help_text = "Exact schedule name or actor (user:<username>, settings sync, sql, …)"
    paginator = BoundedCountPaginator
    show_full_result_count = False
    list_display_links = None

    def get_queryset(self, request: HttpRequest) -> QuerySet[ScheduleChange]:
        qs = super().get_queryset(request)
        schedule_id = request.GET.get("schedule_id")
        if schedule_id:  # the link from a schedule's page
            pk = ascii_int(schedule_id, high=2**63 - 1)
            qs = qs.filter(schedule_id=pk) if pk is not None else qs.none()
        return qs

    def lookup_allowed(self, lookup: str, value: str, request: Any = None) -> bool:
        return lookup == "schedule_id" or super().lookup_allowed(lookup, value, request)

    @admin.display(description="when (UTC)", ordering="at")
    def when(self, obj: ScheduleChange) -> str:
        return obj.at.strftime(TIME)

    @admin.display(description="who", ordering="actor")
    def who(self, obj: ScheduleChange) -> SafeString:
        return format_html('{}<br><span class="pgsched-muted">{}</span>', _actor(obj), obj.db_user)

    @admin.display(description="what")
    def what(self, obj: ScheduleChange) -> str:
        return obj.summary

    @admin.display(description="before → after")
    def details(self, obj: ScheduleChange) -> SafeString:
        return _fields(obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
