"""The operator's view: schedules (edit, pause, resume, run now) and runs (read, retry, cancel).

Three rules keep it honest and fast:

* **Every write goes through the library or a fenced statement.** An edit
  saves only the fields the form changed (never the planner's
  ``next_fire_at``, ``last_fire_at`` or ``skipped_occurrences`` as they were
  when the page loaded). Pause and resume are one ``UPDATE`` predicated on the
  current status; the database's triggers NOTIFY the replicas and cancel
  unstarted runs, so they take effect at once. Run now is
  :func:`~django_pgsched.api.run_schedule_now`, retry is
  :func:`~django_pgsched.api.enqueue`, and a cancel writes a running run only
  while it still carries the lease token that was read, so the executor's next
  renewal finds its lease gone and abandons the job.
* **A page costs a fixed number of queries**, whatever the row count: the
  strip of recent runs for a whole page of schedules is one ``LATERAL``
  query, and nothing in a run row touches a related object.
* **Nothing scans the run table.** The run list counts at most
  :attr:`BoundedCountPaginator.exact_limit` rows and estimates beyond; its
  order and each of its filters have an index (migration 0003); filter
  choices come from settings, the registry and the schedules table, never from
  ``SELECT DISTINCT`` over runs; search is by exact id or idempotency key;
  facet counts are off.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import connections, transaction
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from . import api, describe, timetable
from .conf import get_settings
from .forms import EDITABLE_FIELDS, ScheduleForm
from .models import (
    CLAIMABLE_STATUSES,
    Attempt,
    JobRun,
    RunStatus,
    Schedule,
    ScheduleStatus,
    db_now,
)
from .registry import all_jobs

RECENT_RUNS = 10  # cells in a schedule's strip
ACTION_LIMIT = 1000  # rows one bulk action handles
SCHEDULE_CHOICES = 100  # schedules listed in the run list's filter
UNFINISHED = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.RETRYING)
RETRYABLE = (RunStatus.FAILED, RunStatus.CANCELLED)
TIME = "%Y-%m-%d %H:%M:%S"

if TYPE_CHECKING:  # generic only in django-stubs, not at run time
    ScheduleAdminBase = admin.ModelAdmin[Schedule]
    JobRunAdminBase = admin.ModelAdmin[JobRun]
    AttemptInlineBase = admin.TabularInline[Attempt, JobRun]
    PaginatorBase = Paginator[Any]
else:
    ScheduleAdminBase = JobRunAdminBase = admin.ModelAdmin
    AttemptInlineBase = admin.TabularInline
    PaginatorBase = Paginator

# The last runs of each schedule on the page (its occurrences, and its run-now
# and retry runs: all carry schedule_name), newest first: one backward scan of
# pgsched_run_by_schedule_idx per schedule that stops after %(limit)s rows.
RECENT_RUNS_SQL = """
SELECT s.id, statement_timestamp(), r.id, r.status, r.scheduled_for
  FROM unnest(%(ids)s::bigint[], %(names)s::text[]) AS s(id, name)
  LEFT JOIN LATERAL (
        SELECT id, status, scheduled_for
          FROM pgsched_job_run
         WHERE schedule_name = s.name
           AND scheduled_for <= statement_timestamp()
         ORDER BY scheduled_for DESC, id DESC
         LIMIT %(limit)s
       ) r ON true
 ORDER BY s.id, r.scheduled_for DESC, r.id DESC
"""

# Cancel runs that have not finished. A pending or retrying run is cancelled if
# it still is; a running one only while it still carries the lease token that
# was read (FOR NO KEY UPDATE re-checks the condition on the row's latest
# version), and its in-flight attempt is recorded as cancelled. The executor's
# next renewal no longer finds its token, so it abandons the job, and its
# outcome write (fenced on the token too) changes nothing.
CANCEL_SQL = """
WITH target AS MATERIALIZED (
    SELECT r.id, r.status AS was
      FROM pgsched_job_run r
      JOIN unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS t(id, token) ON t.id = r.id
     WHERE r.status IN ('pending', 'retrying')
        OR (r.status = 'running' AND r.claimed_by = t.token)
       FOR NO KEY UPDATE OF r
),
cancelled AS (
    UPDATE pgsched_job_run r
       SET status = 'cancelled',
           finished_at = clock_timestamp(),
           claimed_by = NULL,
           claim_expires_at = NULL,
           note = %(note)s
      FROM target t
     WHERE r.id = t.id
    RETURNING r.id, t.was, r.attempts, r.started_at, r.worker
),
recorded AS (
    INSERT INTO pgsched_attempt (job_run_id, number, status, started_at, finished_at, worker, error)
    SELECT id, attempts, 'cancelled', started_at, clock_timestamp(), coalesce(worker, ''), %(note)s
      FROM cancelled
     WHERE was = 'running' AND attempts >= 1
        ON CONFLICT DO NOTHING
)
SELECT id, was FROM cancelled ORDER BY id
"""


# -- operations on runs (candidates for api.py) ----------------------------------------


@dataclass
class CancelResult:
    cancelled: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)  # of those, the ones that were running
    unchanged: list[int] = field(default_factory=list)  # finished or re-claimed meanwhile


def cancel_runs(
    seen: Sequence[tuple[int, uuid.UUID | None]], *, note: str, using: str | None = None
) -> CancelResult:
    """Cancel runs given as ``(id, lease token seen)``; a running one only if the token holds."""
    result = CancelResult()
    if not seen:
        return result
    alias = using or get_settings().DATABASE_ALIAS
    params: dict[str, Any] = {
        "ids": [pk for pk, _ in seen],
        "tokens": [token for _, token in seen],
        "note": note,
    }
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(CANCEL_SQL, params)
        for pk, was in cursor.fetchall():
            result.cancelled.append(pk)
            if was == RunStatus.RUNNING:
                result.interrupted.append(pk)
    result.unchanged = [pk for pk, _ in seen if pk not in set(result.cancelled)]
    return result


def retry_run(run: JobRun, *, note: str = "") -> tuple[JobRun, bool]:
    """A new run of a failed or cancelled ``run``: same job, kwargs, queue, attempts, timeout.

    The original keeps its status and attempts; the new run's note says "retry
    of run N" and it keeps the schedule's name. Its idempotency key derives
    from the original's id, so a run is retried at most once, even when two
    operators click at once: to try again, retry the retry. Returns ``(run,
    created)``.
    """
    if run.status not in RETRYABLE:
        raise ValidationError(
            f"status: run {run.pk} is {run.status}; only failed or cancelled runs can be retried"
        )
    key = f"pgsched:retry:{run.pk}"
    existing = JobRun.objects.filter(idempotency_key=key).first()
    if existing is not None:
        return existing, False
    new = api.enqueue(
        run.job,
        kwargs=run.kwargs,
        queue=run.queue,
        max_attempts=run.max_attempts,
        timeout=run.timeout,
        idempotency_key=key,
        schedule_name=run.schedule_name,
        note=f"retry of run {run.pk}" + (f" {note}" if note else ""),
    )
    return new, True


# -- shared pieces -------------------------------------------------------------------------


def badge(status: str, label: str | None = None, title: str = "") -> SafeString:
    return format_html(
        '<span class="pgsched-badge pgsched-{}" title="{}">{}</span>',
        status,
        title,
        label or status.replace("_", " "),
    )


def utc(value: datetime | None, now: datetime | None = None) -> SafeString:
    """A time in UTC, and how far it is from ``now`` when given."""
    if value is None:
        return format_html("{}", "—")
    text = value.astimezone(UTC).strftime(TIME)
    if now is None:
        return format_html("{}", text)
    return format_html(
        '{}<br><span class="pgsched-muted">{}</span>', text, describe.relative(value, now)
    )


def by_whom(request: HttpRequest) -> str:
    return f"by {request.user.get_username()} in the admin"


class BoundedCountPaginator(PaginatorBase):
    """Counts exactly up to :attr:`exact_limit` rows; beyond, the planner's estimate.

    The exact count is ``SELECT count(*) FROM (… ORDER BY … LIMIT n + 1)``, an
    ordered index scan that stops early; the estimate is ``EXPLAIN``'s row
    count. No page costs a scan of the whole table.
    """

    exact_limit = 1000
    estimated = False

    @cached_property
    def count(self) -> int:
        qs = self.object_list
        if not isinstance(qs, QuerySet):
            return len(qs)
        exact = qs[: self.exact_limit + 1].count()
        if exact <= self.exact_limit:
            return exact
        self.estimated = True
        plan = json.loads(qs.explain(format="json"))
        return max(exact, int(plan[0]["Plan"]["Plan Rows"]))


def post_only(admin_site: admin.AdminSite, view: Callable[..., HttpResponse]) -> Any:
    return admin_site.admin_view(require_POST(view))


# -- schedules -------------------------------------------------------------------------------


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


class ScheduleChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        attach_recent_runs(self.result_list)


class JobFilter(admin.SimpleListFilter):
    """The registered jobs: from the registry, no query."""

    title = "job"
    parameter_name = "job"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted(all_jobs())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(job=self.value()) if self.value() else queryset


class SourceFilter(admin.SimpleListFilter):
    title = "declared in"
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("database", "the admin or code"), ("settings", "settings")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(source=self.value()) if self.value() else queryset


@admin.register(Schedule)
class ScheduleAdmin(ScheduleAdminBase):
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
    list_filter = ("status", JobFilter, "misfire_policy", SourceFilter)
    search_fields = ("name", "job", "cron")
    search_help_text = "Name, job or cron expression contains…"
    sortable_by = ("name", "job", "state", "next_fire", "last_fire", "skipped")
    actions = ("pause_selected", "resume_selected", "run_selected_now")
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
    )
    fieldsets = (
        (None, {"fields": ("name", "job", "kwargs")}),
        ("When (UTC)", {"fields": ("cron", "interval", "anchor", "preview")}),
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
    )

    class Media:
        css = {"all": ("pgsched/admin.css",)}

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.pause_schedule")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.run_schedule_now")

    # -- columns ---------------------------------------------------------------------

    @admin.display(description="When (UTC)")
    def when(self, obj: Schedule) -> SafeString:
        if obj.cron:
            try:
                words = describe.cron(obj.cron)
            except timetable.TimetableError as exc:
                return format_html(
                    '<code>{}</code><br><span class="pgsched-error">{}</span>', obj.cron, exc
                )
            return format_html('{}<br><code class="pgsched-muted">{}</code>', words, obj.cron)
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

    @admin.display(description="Next fire (UTC)", ordering="next_fire_at")
    def next_fire(self, obj: Schedule) -> SafeString:
        if obj.status != ScheduleStatus.ACTIVE:
            return format_html("{}", "—")
        if obj.next_fire_at is None:
            return format_html('<span class="pgsched-muted">{}</span>', "being computed")
        return utc(obj.next_fire_at, getattr(obj, "pgsched_now", None))

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

    @admin.display(description="Next fire times (UTC)")
    def preview(self, obj: Schedule) -> SafeString:
        if obj._state.adding:
            return format_html("{}", "Shown once the schedule is saved.")
        now = getattr(obj, "pgsched_now", None) or db_now()
        try:
            lattice = obj.get_timetable()
            times = [lattice.next_after(now)]
            while len(times) < 5:
                times.append(lattice.next_after(times[-1]))
            words = describe.cron(obj.cron) if obj.cron else describe.interval(obj.interval)  # type: ignore[arg-type]
        except timetable.TimetableError as exc:
            return format_html('<span class="pgsched-error">{}</span>', exc)
        items = format_html_join(
            "",
            '<li>{} <span class="pgsched-muted">{}</span></li>',
            ((t.strftime(TIME), describe.relative(t, now)) for t in times),
        )
        paused = "" if obj.status == ScheduleStatus.ACTIVE else " (once resumed)"
        return format_html(
            '<strong>{}</strong>{}<ol class="pgsched-preview">{}</ol>', words, paused, items
        )

    @admin.display(description="Declared in")
    def declared_in(self, obj: Schedule) -> str:
        if obj.source == "settings":
            return (
                "settings (PGSCHED['SCHEDULES']): edits here are overwritten at the next sync "
                "(runscheduler start or manage.py pgsched_sync); pause and resume are kept"
            )
        return "the admin or code"

    # -- pages -----------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Schedule | None:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            attach_recent_runs([obj])
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

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path(
                "<path:object_id>/pause/",
                post_only(site, self.pause_view),
                name="pgsched_schedule_pause",
            ),
            path(
                "<path:object_id>/resume/",
                post_only(site, self.resume_view),
                name="pgsched_schedule_resume",
            ),
            path(
                "<path:object_id>/run-now/",
                post_only(site, self.run_now_view),
                name="pgsched_schedule_run_now",
            ),
            *super().get_urls(),
        ]

    def _target(self, request: HttpRequest, object_id: str, allowed: bool) -> Schedule:
        if not allowed:
            raise PermissionDenied
        obj = super().get_object(request, object_id)
        if obj is None:
            raise Http404(f"no schedule with id {object_id!r}")
        return obj

    def _back(self, obj: Schedule) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:pgsched_schedule_change", args=[obj.pk]))

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_pause_permission(request))
        api.pause(obj)
        self.log(request, [obj], "Paused")
        self.message_user(
            request, f"Paused {obj.name}; its unstarted runs were cancelled.", messages.SUCCESS
        )
        return self._back(obj)

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._target(request, object_id, self.has_pause_permission(request))
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


# -- runs --------------------------------------------------------------------------------------


class RunChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        now = db_now()
        for run in self.result_list:
            run.pgsched_now = now


class RunScheduleFilter(admin.SimpleListFilter):
    """By schedule name (occurrences, run-now and retries); choices from the schedules table."""

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = list(
            Schedule.objects.order_by("name").values_list("name", flat=True)[:SCHEDULE_CHOICES]
        )
        if self.value() and self.value() not in names:
            names.append(self.value())  # type: ignore[arg-type]
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(schedule_name=self.value()) if self.value() else queryset


class RunQueueFilter(admin.SimpleListFilter):
    """Queues named in settings, by jobs and by schedules (never SELECT DISTINCT over runs)."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queues = {get_settings().DEFAULT_QUEUE}
        queues.update(spec.queue for spec in all_jobs().values() if spec.queue)
        declared = Schedule.objects.exclude(queue=None).values_list("queue", flat=True)
        queues.update(q for q in declared.distinct() if q)
        if self.value():
            queues.add(self.value())  # type: ignore[arg-type]
        return [(q, q) for q in sorted(queues)] if len(queues) > 1 else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class AttemptInline(AttemptInlineBase):
    model = Attempt
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ("number",)
    fields = ("number", "outcome", "started", "finished", "took", "worker", "details")
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
class JobRunAdmin(JobRunAdminBase):
    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_select_related = False  # no column reads a related object (see schedule_column)
    change_form_template = "admin/pgsched/change_form.html"
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
    list_filter = ("status", RunScheduleFilter, RunQueueFilter)
    sortable_by = ("id", "scheduled")
    search_fields = ("idempotency_key",)  # see get_search_results: exact matches only
    search_help_text = "A run id or an idempotency key (exact)."
    actions = ("retry_selected", "cancel_selected")
    inlines = (AttemptInline,)
    fieldsets = (
        (None, {"fields": ("state", "schedule_column", "job", "arguments", "queue", "note")}),
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

    # -- permissions: runs are history; the engine writes them --------------------------

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
        return utc(obj.fire_after, getattr(obj, "pgsched_now", None))

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
        return format_html("<pre>{}</pre>", json.dumps(obj.kwargs, indent=2, sort_keys=True))

    # -- pages -------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[JobRun], search_term: str
    ) -> tuple[QuerySet[JobRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        if term.isdigit() and len(term) < 19:
            return queryset.filter(pk=int(term)), False
        return queryset.filter(idempotency_key=term), False

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> JobRun | None:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj.pgsched_now = db_now()  # type: ignore[attr-defined]
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
        if obj.status in UNFINISHED and self.has_cancel_permission(request):
            tools.append(
                {
                    "label": "Cancel",
                    "url": reverse("admin:pgsched_jobrun_cancel", args=[obj.pk]),
                    "fields": {"token": str(obj.claimed_by or "")},
                }
            )
        if obj.status in RETRYABLE and self.has_retry_permission(request):
            tools.append(
                {"label": "Retry", "url": reverse("admin:pgsched_jobrun_retry", args=[obj.pk])}
            )
        return tools

    def get_urls(self) -> list[URLPattern]:
        site = self.admin_site
        return [
            path(
                "<path:object_id>/cancel/",
                post_only(site, self.cancel_view),
                name="pgsched_jobrun_cancel",
            ),
            path(
                "<path:object_id>/retry/",
                post_only(site, self.retry_view),
                name="pgsched_jobrun_retry",
            ),
            *super().get_urls(),
        ]

    def _target(self, request: HttpRequest, object_id: str, allowed: bool) -> JobRun:
        if not allowed:
            raise PermissionDenied
        obj = super().get_object(request, object_id)
        if obj is None:
            raise Http404(f"no run with id {object_id!r}")
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
            queryset.filter(status__in=UNFINISHED).values_list("pk", "claimed_by")[:ACTION_LIMIT]
        )
        if not seen:
            self.message_user(request, "None of the selected runs is unfinished.", messages.WARNING)
            return
        self._cancel(request, seen)

    @admin.action(description="Retry selected runs (as new runs)", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        runs = list(queryset.filter(status__in=RETRYABLE)[:ACTION_LIMIT])
        if not runs:
            self.message_user(
                request, "None of the selected runs failed or was cancelled.", messages.WARNING
            )
            return
        self._retry(request, runs)

    def _cancel(self, request: HttpRequest, seen: Sequence[tuple[int, uuid.UUID | None]]) -> None:
        result = cancel_runs(seen, note=f"cancelled {by_whom(request)}")
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
                new, created = retry_run(run, note=by_whom(request))
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
