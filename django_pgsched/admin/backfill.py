"""Backfill in the admin: an action on selected schedules, behind its own permission.

The action shows a form (the range in UTC, an optional queue and limit); a
preview says how many runs each schedule would get, and the backfill itself is
:func:`django_pgsched.ledger.backfill.backfill_occurrences`, one transaction per
schedule, refused with the count when it would exceed the limit.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from ..audit import actor, for_user
from ..conf import get_settings
from ..ledger.backfill import BackfillRefused, backfill_occurrences
from ..limits import MAX_BACKFILL
from ..models import Schedule
from .common import ACTION_LIMIT

TEMPLATE = "admin/pgsched/backfill.html"


class BackfillForm(forms.Form):
    start = forms.DateTimeField(help_text="UTC, for example 2026-11-23 00:00:00")
    end = forms.DateTimeField(help_text="UTC; occurrences before this (not at it)")
    queue = forms.CharField(
        required=False, max_length=100, help_text="Empty: each schedule's own queue."
    )
    limit = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_BACKFILL,
        help_text="Refuse more runs than this per schedule.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["limit"].help_text += f" Default {get_settings().BACKFILL_LIMIT}."

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") and data.get("end") and data["start"] >= data["end"]:
            raise ValidationError("The end must be after the start.")
        return data


def backfill_action(
    model_admin: admin.ModelAdmin[Schedule], request: HttpRequest, queryset: QuerySet[Schedule]
) -> HttpResponse | None:
    """Show the form; with ``preview`` say what would happen; with ``apply`` backfill."""
    schedules = list(queryset.order_by("name")[:ACTION_LIMIT])
    with timezone.override(UTC):  # the form's times are UTC, whatever TIME_ZONE says
        form = BackfillForm(request.POST if "start" in request.POST else None)
        valid = form.is_valid()
    previews: list[tuple[str, str]] = []
    if valid and ("preview" in request.POST or "apply" in request.POST):
        dry_run = "apply" not in request.POST
        done = 0
        with actor(for_user(request.user.get_username())):
            for schedule in schedules:
                line = _one(schedule, form.cleaned_data, dry_run=dry_run)
                previews.append((schedule.name, line))
                done += 0 if line.startswith("refused") else 1
        if not dry_run:
            for name, line in previews:
                level = (
                    messages.ERROR if line.startswith(("refused", "error")) else messages.SUCCESS
                )
                model_admin.message_user(request, f"{name}: {line}", level)
            return None
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Backfill schedules",
        "opts": model_admin.model._meta,
        "schedules": schedules,
        "form": form,
        "previews": previews,
        "action": request.POST.get("action", "backfill_selected"),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
    }
    return TemplateResponse(request, TEMPLATE, context)


def _one(schedule: Schedule, data: dict[str, Any], *, dry_run: bool) -> str:
    try:
        result = backfill_occurrences(
            schedule.name,
            data["start"],
            data["end"],
            limit=data.get("limit"),
            queue=data.get("queue") or None,
            dry_run=dry_run,
            note="backfill (admin)",
            tenant=schedule.tenant,
        )
    except BackfillRefused as exc:
        return f"refused: {exc}"
    except ValidationError as exc:
        return "error: " + "; ".join(exc.messages)
    verb = "would create" if dry_run else "created"
    text = f"{verb} {result.created} run(s); {result.already} of {result.occurrences} had one"
    if result.horizon < data["end"]:
        text += f"; from {result.horizon:%Y-%m-%d %H:%M:%S} on left to the planner"
    return text
