"""Admin for schedules and runs (placeholder; the operator-surface issue grows it)."""

from __future__ import annotations

from django.contrib import admin

from .models import JobRun, Schedule

admin.site.register(Schedule)
admin.site.register(JobRun)
