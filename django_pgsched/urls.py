"""The tenant APIs: ``path("scheduler/", include("django_pgsched.urls"))``.

``schedules/`` and ``schedules/<name>/`` (with ``pause/``, ``resume/``, ``trigger/``):
a tenant's own schedules (:mod:`django_pgsched.history.schedule_views`);
``runs/`` (a page of runs), ``runs/<id>/`` (one run with its attempts),
``schedules/<name>/occurrences/`` (what became of each occurrence of a schedule:
:mod:`django_pgsched.ledger.views`) and ``openapi.json``; see
:mod:`django_pgsched.history.views`.
"""

from __future__ import annotations

from django.urls import path

from .history import schedule_views, views
from .ledger import views as ledger_views

app_name = "pgsched"

urlpatterns = [
    path("runs/", views.run_list, name="history-runs"),
    path("runs/<str:run_id>/", views.run_detail, name="history-run"),
    path("schedules/", schedule_views.schedules, name="tenant-schedules"),
    path("schedules/<str:name>/", schedule_views.schedule, name="tenant-schedule"),
    path("schedules/<str:name>/pause/", schedule_views.pause, name="tenant-schedule-pause"),
    path("schedules/<str:name>/resume/", schedule_views.resume, name="tenant-schedule-resume"),
    path("schedules/<str:name>/trigger/", schedule_views.trigger, name="tenant-schedule-trigger"),
    path(
        "schedules/<str:name>/occurrences/",
        ledger_views.schedule_occurrences,
        name="schedule-occurrences",
    ),
    path("openapi.json", views.openapi, name="history-openapi"),
]
