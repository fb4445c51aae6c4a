"""Tenants: their quotas and pause, and what each uses now.

The list shows, beside each record's quotas, how many schedules the tenant has
and how many of its runs hold a live lease now (all replicas together: what
``max_running`` counts). Both are counted in the list's one query, by a
subquery per row on indexes of their own (``pgsched_schedule_tenant_name``,
``pgsched_run_tenant_running_idx``), never over the history. Editing a record
goes through the model's ``clean()``; the database's CHECKs and the quota trigger
hold for every writer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, Now
from django.http import HttpRequest
from django.utils.safestring import SafeString

from ..models import JobRun, Schedule, Tenant
from .common import UnreadableRows, badge

if TYPE_CHECKING:
    TenantAdminBase = admin.ModelAdmin[Tenant]
else:
    TenantAdminBase = admin.ModelAdmin


def _count(queryset: QuerySet[Any]) -> Subquery:
    """``count(*)`` of ``queryset`` (correlated on the tenant) as a subquery."""
    counted = queryset.order_by().values("tenant").annotate(n=Count("*")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)  # type: ignore[return-value]


@admin.register(Tenant)
class TenantAdmin(UnreadableRows, TenantAdminBase):
    change_form_template = "admin/pgsched/change_form.html"
    list_display = (
        "key",
        "state",
        "schedules_column",
        "max_schedules",
        "running_column",
        "max_running",
        "weight",
        "min_interval",
        "pause_reason",
    )
    list_filter = ("paused",)
    search_fields = ("key",)
    ordering = ("key",)
    fieldsets = (
        (None, {"fields": ("key",)}),
        ("Pause", {"fields": ("paused", "pause_reason")}),
        ("Quotas", {"fields": ("max_schedules", "min_interval", "allowed_jobs")}),
        ("Claims", {"fields": ("max_running", "weight")}),
        ("Now", {"fields": ("schedules_column", "running_column", "updated_at")}),
    )
    readonly_fields = ("schedules_column", "running_column", "updated_at")

    class Media:
        css = {"all": ("pgsched/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        schedules = Schedule.objects.filter(tenant=OuterRef("key"))
        running = JobRun.objects.filter(
            tenant=OuterRef("key"), status="running", claim_expires_at__gte=Now()
        )
        return (
            super()
            .get_queryset(request)
            .annotate(schedules_now=_count(schedules), running_now=_count(running))
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> Any:
        # a tenant's key names its schedules and runs: fixed once the record exists
        return (*self.readonly_fields, "key") if obj is not None else self.readonly_fields

    @admin.display(description="state", ordering="paused")
    def state(self, obj: Tenant) -> SafeString:
        return badge("cancelled", "paused") if obj.paused else badge("succeeded", "active")

    @admin.display(description="schedules")
    def schedules_column(self, obj: Tenant) -> int:
        value = getattr(obj, "schedules_now", None)
        return value if value is not None else Schedule.objects.filter(tenant=obj.key).count()

    @admin.display(description="running now")
    def running_column(self, obj: Tenant) -> int:
        value = getattr(obj, "running_now", None)
        if value is not None:
            return int(value)
        return JobRun.objects.filter(
            tenant=obj.key, status="running", claim_expires_at__gte=Now()
        ).count()
