"""Schedules: their pages, pause, resume, run now and backfill.

The columns (readable cron, the strip of recent runs, ...) are in
:mod:`.schedule_columns`. A page of schedules costs a fixed number of queries: the
strip of recent runs for the whole page is one ``LATERAL`` query
(:func:`~.schedule_columns.attach_recent_runs`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from .. import api
from ..audit import actor, for_user
from ..delivery.job import JOB_NAME
from ..delivery.request import masked_kwargs
from ..engine import stranded
from ..models import Schedule, ScheduleStatus
from . import http_form
from .backfill import backfill_action
from .common import (
    ACTION_LIMIT,
    BoundedCountPaginator,
    ObjectButtons,
    ScheduleAdminBase,
    UnreadableRows,
    by_whom,
    target,
    with_tenant_column,
)
from .filters import JobFilter, SourceFilter, TenantFilter
from .forms import EDITABLE_FIELDS, ScheduleForm
from .schedule_columns import ScheduleColumns, attach_recent_runs
from .timeline import ON_SCHEDULE_PAGE


class ScheduleChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        attach_recent_runs(self.result_list)


@admin.register(Schedule)
class ScheduleAdmin(ScheduleColumns, ObjectButtons, UnreadableRows, ScheduleAdminBase):
    form = ScheduleForm
    paginator = BoundedCountPaginator
    change_form_template = "admin/pgsched/change_form.html"
    list_display = (
        "name",
        "job",
        "when",
        "state",
        "next_fire",
        "last_fire",
        "skipped",
        "runs",
    )
    list_filter = ("status", JobFilter, "misfire_policy", "timezone", SourceFilter, TenantFilter)
    search_fields = ("name", "job", "cron")
    search_help_text = "Name, job or cron expression contains…"
    sortable_by = ("name", "job", "state", "next_fire", "last_fire", "skipped")
    actions = ("pause_selected", "resume_selected", "run_selected_now", "backfill_selected")
    readonly_fields = (
        "preview",
        "state",
        "next_fire",
        "last_fire",
        "skipped",
        "last_run",
        "recent_runs",
        "declared_in",
        "created_at",
        "updated_at",
        "change_history",
        "timeline",
    )
    fieldsets = (
        (None, {"fields": ("name", "job", "kwargs", "tenant")}),
        (
            "When",
            {
                "fields": (
                    "cron",
                    "timezone",
                    ("dst_gap", "dst_fold"),
                    "interval",
                    "anchor",
                    "jitter",
                    "preview",
                ),
                "description": (
                    "Cron fields are read in the time zone; the DST policies say what happens "
                    "when its clocks skip a time (gap) or repeat one (fold). Interval schedules "
                    "are elapsed time in UTC."
                ),
            },
        ),
        (
            "Missed occurrences",
            {
                "fields": ("misfire_policy", "catch_up_limit", "misfire_grace"),
                "description": (
                    "An occurrence later than the grace (replicas down, a long stall) is missed; "
                    "the policy decides which missed ones still run. The rest are counted "
                    "as skipped."
                ),
            },
        ),
        (
            "Overlap and lateness",
            {
                "fields": ("overlap", "start_deadline"),
                "description": (
                    "While an earlier run of this schedule is unfinished, an occurrence can "
                    "start anyway (allow), be skipped (skip), or wait, at most one at a time "
                    "(buffer_one). A run not started within the start deadline of its due time "
                    "ends 'missed' without running. Both are recorded in the ledger."
                ),
            },
        ),
        ("Execution", {"fields": ("max_attempts", "timeout", "queue")}),
        (
            "State",
            {
                "fields": (
                    "state",
                    "next_fire",
                    "last_fire",
                    "skipped",
                    "last_run",
                    "recent_runs",
                    "declared_in",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        (
            "Occurrences",
            {
                "fields": ("timeline",),
                "description": f"The last {ON_SCHEDULE_PAGE} occurrences, newest first: each ran "
                "(its run's status), was skipped (the ledger's reason) or missed its start "
                "deadline, or is not planned yet.",
            },
        ),
        (
            "Changes",
            {
                "fields": ("change_history",),
                "description": "Who changed this schedule, when, and what: every path "
                "(the admin, code, the settings sync, plain SQL) is recorded by the database.",
            },
        ),
    )

    class Media:
        css = {"all": ("pgsched/admin.css",)}

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return with_tenant_column(request, super().get_list_display(request), "job")

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        """A ``pgsched.http`` schedule shows its request as fields, not as a JSON box."""
        fieldsets = list(super().get_fieldsets(request, obj))
        job = obj.job if obj is not None else request.GET.get("job")
        request_fields: dict[str, Any] = {"fields": http_form.FIELDS}
        if job == JOB_NAME:
            head, *rest = fieldsets
            fields = tuple(f for f in head[1]["fields"] if f != "kwargs")
            return [
                (head[0], {**head[1], "fields": fields}),
                ("HTTP request", request_fields),
                *rest,
            ]
        if obj is None:  # a new schedule: offer the request fields, for pgsched.http
            request_fields["classes"] = ("collapse",)
            request_fields["description"] = (
                "For the job pgsched.http: the request it makes (instead of kwargs)."
            )
            return [fieldsets[0], ("HTTP request (pgsched.http)", request_fields), *fieldsets[1:]]
        return fieldsets

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.pause_schedule")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.run_schedule_now")

    def has_backfill_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.backfill_schedule")

    @admin.action(description="Backfill selected schedules…", permissions=["backfill"])
    def backfill_selected(
        self, request: HttpRequest, queryset: QuerySet[Schedule]
    ) -> HttpResponse | None:
        return backfill_action(self, request, queryset)

    # -- pages -----------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Schedule | None:
        obj: Schedule | None = super().get_object(request, object_id, from_field)
        if obj is not None:
            attach_recent_runs([obj])
            if not self.has_change_permission(request, obj):
                # a view-only admin reads header names, never their values (credentials);
                # it cannot save, so the masked copy is never written
                obj.kwargs = masked_kwargs(obj.kwargs)
        return obj

    # Every page that can change schedules names its user in the audit trail.

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if request.method != "POST":
            return super().changeform_view(request, object_id, form_url, extra_context)
        with actor(for_user(request.user.get_username())):
            return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method != "POST":
            return super().delete_view(request, object_id, extra_context)
        with actor(for_user(request.user.get_username())):
            return super().delete_view(request, object_id, extra_context)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method != "POST":  # actions (pause, resume, delete) are POSTs
            warn_stranded(request)
            return super().changelist_view(request, extra_context)
        with actor(for_user(request.user.get_username())):
            return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = super().get_object(request, object_id)
        context = dict(extra_context or {})
        if obj is not None:
            context["pgsched_tools"] = self.tools(request, obj)
            if obj.source == "settings" and request.method == "GET":
                messages.warning(
                    request,
                    f"{obj.name} is declared in PGSCHED['SCHEDULES']: edits made here are "
                    "overwritten at the next sync (runscheduler start or pgsched_sync). "
                    "Pausing and resuming are kept.",
                )
        return super().change_view(request, object_id, form_url, context)

    def tools(self, request: HttpRequest, obj: Schedule) -> list[dict[str, Any]]:
        """The buttons above the change form, each behind its permission."""
        tools = []
        if self.has_pause_permission(request):
            name = "pause" if obj.status == ScheduleStatus.ACTIVE else "resume"
            tools.append({"label": name.capitalize(), "view": name})
        if self.has_run_now_permission(request):
            tools.append({"label": "Run now", "view": "run_now"})
        for tool in tools:
            tool["url"] = reverse(f"admin:pgsched_schedule_{tool['view']}", args=[obj.pk])
        return tools

    buttons = (("pause", "pause_view"), ("resume", "resume_view"), ("run-now", "run_now_view"))

    def _target(self, request: HttpRequest, object_id: str, allowed: bool) -> Schedule:
        obj: Schedule = target(self, request, object_id, allowed)
        return obj

    def _back(self, obj: Schedule) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:pgsched_schedule_change", args=[obj.pk]))

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_pause_permission(request))
        with actor(for_user(request.user.get_username())):
            api.pause(obj)
        self.log(request, [obj], "Paused")
        self.message_user(
            request, f"Paused {obj.name}; its unstarted runs were cancelled.", messages.SUCCESS
        )
        return self._back(obj)

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_pause_permission(request))
        with actor(for_user(request.user.get_username())):
            api.resume(obj)
        self.log(request, [obj], "Resumed")
        self.message_user(
            request,
            f"Resumed {obj.name}; it fires next after now (missed ones are not caught up).",
            messages.SUCCESS,
        )
        return self._back(obj)

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_run_now_permission(request))
        self._run_now(request, [obj])
        return self._back(obj)

    # -- saving ----------------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        """Write only what the form changed: the planner owns the rest of the row."""
        if not change:
            obj.save()
            return
        changed = [f for f in form.changed_data if f in EDITABLE_FIELDS]
        if changed:
            obj.save(update_fields=[*changed, "updated_at"])

    # -- actions ---------------------------------------------------------------------

    @admin.action(description="Pause selected schedules", permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        targets = queryset.filter(status=ScheduleStatus.ACTIVE)
        self.log(request, targets, "Paused")
        n = targets.update(status=ScheduleStatus.PAUSED, updated_at=Now())
        self.message_user(
            request,
            f"Paused {n} schedule(s); their unstarted runs were cancelled.",
            messages.SUCCESS,
        )

    @admin.action(description="Resume selected schedules", permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        targets = queryset.exclude(status=ScheduleStatus.ACTIVE)
        self.log(request, targets, "Resumed")
        n = targets.update(status=ScheduleStatus.ACTIVE, last_error="", updated_at=Now())
        self.message_user(
            request, f"Resumed {n} schedule(s); each fires next after now.", messages.SUCCESS
        )

    def log(self, request: HttpRequest, schedules: Iterable[Schedule], message: str) -> None:
        """The admin's history ("who paused this?"), one entry per schedule."""
        for schedule in schedules:
            self.log_change(request, schedule, message)

    @admin.action(description="Run selected schedules now", permissions=["run_now"])
    def run_selected_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._run_now(request, list(queryset[:ACTION_LIMIT]))

    def _run_now(self, request: HttpRequest, schedules: Iterable[Schedule]) -> None:
        for schedule in schedules:
            try:
                run = api.run_schedule_now(schedule, note=f"run now {by_whom(request)}")
            except ValidationError as exc:
                self.message_user(
                    request, f"{schedule.name}: {'; '.join(exc.messages)}", messages.ERROR
                )
                continue
            self.log(request, [schedule], f"Ran now as run {run.pk}")
            self.message_user(
                request,
                format_html(
                    'Run <a href="{}">{}</a> of {} is due now.',
                    reverse("admin:pgsched_jobrun_change", args=[run.pk]),
                    run.pk,
                    schedule.name,
                ),
                messages.SUCCESS,
            )


def warn_stranded(request: HttpRequest) -> None:
    """A warning above the schedule list while runs wait for a job no live replica runs."""
    try:
        groups = stranded.stranded()
    except DatabaseError:  # the list itself says what is wrong with the database
        return
    if not groups:
        return
    shown = "; ".join(
        f"{g.job} in queue {g.queue}: {g.runs} run(s) of {g.schedules} schedule(s)"
        for g in groups[:5]
    )
    more = f"; and {len(groups) - 5} more" if len(groups) > 5 else ""
    messages.warning(
        request,
        f"Runs no live replica can execute (their job is registered by no running "
        f"replica for that queue): {shown}{more}. They are coalesced to one per schedule.",
    )
