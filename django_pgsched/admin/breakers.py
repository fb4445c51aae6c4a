"""Circuit breakers of HTTP delivery: their state, and a reset behind its own permission.

Read-only but for the reset, which closes a breaker and releases the runs it
held back (:func:`django_pgsched.delivery.breaker.reset`); only users with
``pgsched.reset_breaker`` see the button and the action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from ..delivery import breaker
from ..models import Breaker
from .common import ACTION_LIMIT, ObjectButtons, UnreadableRows, badge, target, utc

if TYPE_CHECKING:
    BreakerAdminBase = admin.ModelAdmin[Breaker]
else:
    BreakerAdminBase = admin.ModelAdmin

STATE_BADGES = {"closed": "succeeded", "open": "failed", "half_open": "retrying"}


@admin.register(Breaker)
class BreakerAdmin(ObjectButtons, UnreadableRows, BreakerAdminBase):
    change_form_template = "admin/pgsched/change_form.html"
    list_display = ("destination", "tenant", "state_badge", "since_column", "failures", "retry")
    list_filter = ("state",)
    search_fields = ("destination",)
    actions = ("reset_selected",)
    fields = (
        "tenant",
        "destination",
        "state_badge",
        "since_column",
        "failures",
        "retry",
        "cooldown",
        "probe_run_id",
        "park_until",
        "opened",
        "opened_at",
        "last_error_text",
        "last_failure_at",
        "last_success_at",
    )
    readonly_fields = fields

    class Media:
        css = {"all": ("pgsched/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_reset_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pgsched.reset_breaker")

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Breaker) -> SafeString:
        return badge(STATE_BADGES.get(obj.state, obj.state), obj.get_state_display())

    @admin.display(description="since (UTC)", ordering="since")
    def since_column(self, obj: Breaker) -> SafeString:
        return utc(obj.since)

    @admin.display(description="next probe / probe given up (UTC)")
    def retry(self, obj: Breaker) -> SafeString:
        return utc(obj.retry_at)

    @admin.display(description="last error")
    def last_error_text(self, obj: Breaker) -> SafeString:
        if not obj.last_error:
            return mark_safe("—")  # format_html() needs arguments from Django 6.0 on
        return format_html("<pre>{}</pre>", obj.last_error)

    # -- reset ---------------------------------------------------------------------------

    @admin.action(description="Reset selected circuit breakers", permissions=["reset"])
    def reset_selected(self, request: HttpRequest, queryset: QuerySet[Breaker]) -> None:
        released = 0
        chosen = list(queryset.exclude(state="closed", failures=0)[:ACTION_LIMIT])
        for obj in chosen:
            released += breaker.reset(obj.pk)
        self.log_change_all(request, chosen)
        self.message_user(
            request,
            f"Reset {len(chosen)} circuit breaker(s); {released} held run(s) released.",
            messages.SUCCESS,
        )

    def log_change_all(self, request: HttpRequest, objects: list[Breaker]) -> None:
        for obj in objects:
            self.log_change(request, obj, "Reset")

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        if self.has_reset_permission(request):
            url = reverse("admin:pgsched_breaker_reset", args=[object_id])
            context["pgsched_tools"] = [{"label": "Reset", "url": url}]
        return super().change_view(request, object_id, form_url, context)

    buttons = (("reset", "reset_view"),)

    def reset_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj: Breaker = target(self, request, object_id, self.has_reset_permission(request))
        released = breaker.reset(obj.pk)
        self.log_change(request, obj, "Reset")
        self.message_user(
            request,
            f"Reset the circuit breaker for {obj.destination}; {released} held run(s) released.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:pgsched_breaker_change", args=[obj.pk]))
