"""Live replicas, read from PostgreSQL's own list of sessions, and the runs they hold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from ..models import JobRun, Replica, RunStatus
from .common import utc

if TYPE_CHECKING:
    ReplicaAdminBase = admin.ModelAdmin[Replica]
else:
    ReplicaAdminBase = admin.ModelAdmin


@admin.register(Replica)
class ReplicaAdmin(ReplicaAdminBase):
    """Read-only: a replica is listed while any of its loops is connected."""

    list_display = ("worker", "loops", "sessions", "since", "address", "holding")
    list_display_links = None
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Replica]:
        held = (
            JobRun.objects.filter(status=RunStatus.RUNNING, worker=OuterRef("worker"))
            .order_by()
            .values("worker")
            .annotate(n=Count("id"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(held=Coalesce(Subquery(held, output_field=IntegerField()), 0))
        )

    @admin.display(description="connected since", ordering="connected_since")
    def since(self, obj: Replica) -> SafeString:
        return utc(obj.connected_since)

    @admin.display(description="running runs it holds", ordering="held")
    def holding(self, obj: Any) -> SafeString:
        url = reverse("admin:pgsched_jobrun_changelist")
        query = urlencode({"status__exact": RunStatus.RUNNING, "worker": obj.worker})
        return format_html('<a href="{}?{}">{}</a>', url, query, obj.held)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
