"""The read-only history API: ``path("scheduler/", include("django_pgsched.urls"))``.

``runs/`` (a page of runs), ``runs/<id>/`` (one run with its attempts),
``schedules/<name>/occurrences/`` (what became of each occurrence of a schedule:
:mod:`django_pgsched.ledger.views`) and ``openapi.json``; see
:mod:`django_pgsched.history.views`.
"""

from __future__ import annotations

from django.urls import path

from .history import views
from .ledger import views as ledger_views

app_name = "pgsched"

urlpatterns = [
    path("runs/", views.run_list, name="history-runs"),
    path("runs/<str:run_id>/", views.run_detail, name="history-run"),
    path(
        "schedules/<str:name>/occurrences/",
        ledger_views.schedule_occurrences,
        name="schedule-occurrences",
    ),
    path("openapi.json", views.openapi, name="history-openapi"),
]
