"""Runs: read-only history with the lease in words and the attempts inline; cancel and retry.

Nothing here scans the run table: the list counts at most
:attr:`~django_pgsched.admin.common.BoundedCountPaginator.exact_limit` rows, its
order and each of its filters have an index, filter choices never come from
``SELECT DISTINCT`` over runs, and search is by exact id or idempotency key.
Cancel and retry are :func:`django_pgsched.api.cancel_runs` and
:func:`django_pgsched.api.retry_run`. The columns are in :mod:`.run_columns`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import api
from ..delivery.request import masked_kwargs
from ..digits import ascii_int
from ..models import Attempt, JobRun, db_now
from ..statuses import UNFINISHED_STATUSES
from ..timing import describe
from . import evidence
from .common import (
    ACTION_LIMIT,
    AttemptInlineBase,
    BoundedCountPaginator,
    JobRunAdminBase,
    ObjectButtons,
    UnreadableRows,
    badge,
    by_whom,
    target,
    utc,
    with_tenant_column,
)
from .filters import RunQueueFilter, RunScheduleFilter, TenantFilter
from .run_columns import RunColumns


class RunChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        now = db_now()
        for run in self.result_list:
            run.pgsched_now = now


class AttemptInline(AttemptInlineBase):
    model = Attempt
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ("number",)
    fields = ("number", "outcome", "started", "finished", "took", "worker", "details", "evidence")
    readonly_fields = fields
    verbose_name_plural = "attempts"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("pgsched.view_jobrun")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Outcome")
    def outcome(self, obj: Attempt) -> SafeString:
        return badge(obj.status)

    @admin.display(description="Started (UTC)")
    def started(self, obj: Attempt) -> SafeString:
        return utc(obj.started_at)

    @admin.display(description="Finished (UTC)")
    def finished(self, obj: Attempt) -> SafeString:
        return utc(obj.finished_at)

    @admin.display(description="Took")
    def took(self, obj: Attempt) -> str:
        if obj.started_at is None or obj.finished_at is None:
            return "—"
        return describe.duration(obj.finished_at - obj.started_at)

    @admin.display(description="Evidence")
    def evidence(self, obj: Attempt) -> SafeString:
        return evidence.render(obj.detail)

    @admin.display(description="Error")
    def details(self, obj: Attempt) -> SafeString:
        if not obj.error:
            return format_html("{}", "—")
        lines = obj.error.strip().splitlines()
        return format_html(
            '<details class="pgsched-error-details"><summary>{}</summary><pre>{}</pre></details>',
            lines[-1][:200],
            obj.error,
        )


@admin.register(JobRun)
class JobRunAdmin(RunColumns, ObjectButtons, UnreadableRows, JobRunAdminBase):
    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_select_related = False  # no column reads a related object (see schedule_column)
    change_form_template = "admin/pgsched/change_form.html"
    # the replica page links here with ?status__exact=running&worker=<id>
    extra_lookups = frozenset({"worker"})
    list_display = (
        "id",
        "state",
        "schedule_column",
        "job",
        "queue",
        "scheduled",
        "tries",
        "late_by",
        "worker",
        "lease",
    )
    list_display_links = ("id",)
    list_filter = ("status", RunScheduleFilter, RunQueueFilter, TenantFilter)
    sortable_by = ("id", "scheduled")
    search_fields = ("idempotency_key",)  # see get_search_results: exact matches only
    search_help_text = "A run id or an idempotency key (exact)."
    actions = ("retry_selected", "cancel_selected")
    inlines = (AttemptInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "state",
                    "schedule_column",
                    "tenant",
                    "job",
                    "arguments",
                    "result",
                    "queue",
                    "note",
                )
            },
        ),
        (
            "Timing (UTC)",
            {"fields": ("scheduled", "due", "started", "finished", "late_by", "took")},
        ),
        (
            "Attempts and lease",
            {"fields": ("tries", "timeout", "lease", "worker", "claimed_by", "idempotency_key")},
        ),
    )
    readonly_fields = (
        "state",
        "schedule_column",
        "arguments",
        "result",
        "scheduled",
        "due",
        "started",
        "finished",
        "late_by",
        "took",
        "tries",
        "lease",
    )

    class Media:
        css = {"all": ("pgsched/admin.css",)}

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return with_tenant_column(request, super().get_list_display(request), "job")

    # -- permissions: runs are history; the engine writes them --------------------------

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if lookup in self.extra_lookups:
            return True
        return super().lookup_allowed(lookup, value, request)  # type: ignore[arg-type]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.retry_jobrun")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.cancel_jobrun")

    # -- columns -----------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[JobRun], search_term: str
    ) -> tuple[QuerySet[JobRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if (pk := ascii_int(term, high=2**63 - 1)) is not None:
            return queryset.filter(pk=pk), False
        return queryset.filter(idempotency_key=term), False

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> JobRun | None:
        obj: JobRun | None = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.pgsched_now = db_now()  # type: ignore[attr-defined]
            if not request.user.has_perm("pgsched.change_schedule"):
                # header values (credentials) only for those who may change schedules;
                # a run's page changes no kwargs, so the masked copy is never written
                obj.kwargs = masked_kwargs(obj.kwargs)
        return obj

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
        return super().change_view(request, object_id, form_url, context)

    def tools(self, request: HttpRequest, obj: JobRun) -> list[dict[str, Any]]:
        """Cancel carries the lease token seen now: it cancels this attempt, not a later one."""
        tools = []
        if obj.status in UNFINISHED_STATUSES and self.has_cancel_permission(request):
            tools.append(
                {
                    "label": "Cancel",
                    "url": reverse("admin:pgsched_jobrun_cancel", args=[obj.pk]),
                    "fields": {"token": str(obj.claimed_by or "")},
                }
            )
        if obj.status in api.RETRYABLE and self.has_retry_permission(request):
            tools.append(
                {"label": "Retry", "url": reverse("admin:pgsched_jobrun_retry", args=[obj.pk])}
            )
        return tools

    buttons = (("cancel", "cancel_view"), ("retry", "retry_view"))

    def _target(self, request: HttpRequest, object_id: str, allowed: bool) -> JobRun:
        obj: JobRun = target(self, request, object_id, allowed)
        return obj

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_cancel_permission(request))
        try:
            token = uuid.UUID(request.POST["token"]) if request.POST.get("token") else None
        except ValueError:
            raise BadRequest(f"token: not a lease token: {request.POST['token']!r}") from None
        self._cancel(request, [(obj.pk, token)])
        return HttpResponseRedirect(reverse("admin:pgsched_jobrun_change", args=[obj.pk]))

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_retry_permission(request))
        new = self._retry(request, [obj])
        target = new[0].pk if new else obj.pk
        return HttpResponseRedirect(reverse("admin:pgsched_jobrun_change", args=[target]))

    # -- actions -----------------------------------------------------------------------

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        seen = list(
            queryset.filter(status__in=UNFINISHED_STATUSES).values_list("pk", "claimed_by")[
                :ACTION_LIMIT
            ]
        )
        if not seen:
            self.message_user(request, "None of the selected runs is unfinished.", messages.WARNING)
            return
        self._cancel(request, seen)

    @admin.action(description="Retry selected runs (as new runs)", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        runs = list(queryset.filter(status__in=api.RETRYABLE)[:ACTION_LIMIT])
        if not runs:
            self.message_user(
                request, "None of the selected runs failed or was cancelled.", messages.WARNING
            )
            return
        self._retry(request, runs)

    def _cancel(self, request: HttpRequest, seen: Sequence[tuple[int, uuid.UUID | None]]) -> None:
        result = api.cancel_runs(seen, note=f"cancelled {by_whom(request)}")
        if result.cancelled:
            interrupted = ""
            if result.interrupted:
                interrupted = (
                    f" {len(result.interrupted)} of them were running: their replicas abandon "
                    "them at the next lease renewal."
                )
            self.message_user(
                request, f"Cancelled {_runs(result.cancelled)}.{interrupted}", messages.SUCCESS
            )
        if result.unchanged:
            self.message_user(
                request,
                f"Left {_runs(result.unchanged)} alone: finished, or claimed again, since the page "
                "was read.",
                messages.WARNING,
            )

    def _retry(self, request: HttpRequest, runs: Iterable[JobRun]) -> list[JobRun]:
        made = []
        for run in runs:
            try:
                new, created = api.retry_run(run, note=by_whom(request))
            except ValidationError as exc:
                self.message_user(
                    request, f"Run {run.pk}: {'; '.join(exc.messages)}", messages.ERROR
                )
                continue
            url = reverse("admin:pgsched_jobrun_change", args=[new.pk])
            if created:
                made.append(new)
                text = 'Run {} is retried as run <a href="{}">{}</a>.'
                self.message_user(request, format_html(text, run.pk, url, new.pk), messages.SUCCESS)
            else:
                text = 'Run {} was already retried as run <a href="{}">{}</a>; retry that one.'
                self.message_user(request, format_html(text, run.pk, url, new.pk), messages.WARNING)
        return made


def _runs(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:10]) + (", …" if len(ids) > 10 else "")
    return f"{len(ids)} run{'s' if len(ids) != 1 else ''} ({shown})"
