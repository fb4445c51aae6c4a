"""The admin lists' filters: each one's choices come from a small table or the registry,
never from ``SELECT DISTINCT`` over the runs, and each filter's predicate has an index.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from ..conf import get_settings
from ..models import Schedule
from ..registry import all_jobs

TENANT_CHOICES = 100  # tenants listed in the tenant filters
SCHEDULE_CHOICES = 100  # schedules listed in the run list's filter
QUEUE_INDEX_LEAVES_OUT = "default"  # pgsched_run_by_queue_idx: WHERE queue <> 'default'


class TenantFilter(admin.SimpleListFilter):
    """By tenant; choices are the schedules' tenants (never ``SELECT DISTINCT`` over runs).

    Hidden while no schedule has a tenant. A run's tenant that no schedule has
    (a one-off run enqueued with it) is still reachable as ``?tenant=<name>``.
    """

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        tenants = list(
            Schedule.objects.exclude(tenant="")
            .order_by("tenant")
            .values_list("tenant", flat=True)
            .distinct()[:TENANT_CHOICES]
        )
        if self.value() and self.value() not in tenants:
            tenants.append(self.value())  # type: ignore[arg-type]
        return [(t, t) for t in tenants]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(tenant=self.value()) if self.value() else queryset


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
        return [
            ("database", "the admin or code"),
            ("settings", "settings"),
            ("celery_beat", "imported from celery beat"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(source=self.value()) if self.value() else queryset


class RunScheduleFilter(admin.SimpleListFilter):
    """By schedule name (occurrences, run-now and retries); choices from the schedules table.

    The schedule's occurrences are found by its id (the unique ``(schedule_id,
    scheduled_for)`` index), its one-off runs (run now, retries, and the history
    of a deleted schedule) by name among the runs of no schedule
    (``pgsched_run_one_off_idx``): two index ranges, OR-ed.
    """

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
        name = self.value()
        if not name:
            return queryset
        one_offs = Q(schedule__isnull=True, schedule_name=name)
        # the id as a constant (not a subquery), so the planner estimates this
        # schedule's share of the runs from the statistics rather than an average
        # (names are unique within a tenant: every tenant's schedule of that name)
        ids = list(Schedule.objects.filter(name=name).values_list("pk", flat=True)[:100])
        if not ids:  # deleted: its history is found by name alone
            return queryset.filter(one_offs)
        return queryset.filter(Q(schedule_id__in=ids) | one_offs)


class RunQueueFilter(admin.SimpleListFilter):
    """Queues named in settings, by jobs and by schedules (never SELECT DISTINCT over runs).

    A queue other than ``default`` is a range of ``pgsched_run_by_queue_idx``,
    which leaves ``default`` out: the filter repeats that predicate so the
    planner can use the index. ``default`` is read in order from
    ``pgsched_run_recent_idx`` with a filter (it is the dense case).
    """

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
        queue = self.value()
        if not queue:
            return queryset
        queryset = queryset.filter(queue=queue)
        if queue == QUEUE_INDEX_LEAVES_OUT:
            return queryset
        return queryset.exclude(queue=QUEUE_INDEX_LEAVES_OUT)
