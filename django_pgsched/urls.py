"""The read-only history API: ``path("scheduler/", include("django_pgsched.urls"))``.

``runs/`` (a page of runs), ``runs/<id>/`` (one run with its attempts) and
``openapi.json`` (the description of both); see :mod:`django_pgsched.history.views`.
"""

from __future__ import annotations

from django.urls import path

from .history import views

app_name = "pgsched"

urlpatterns = [
    path("runs/", views.run_list, name="history-runs"),
    path("runs/<str:run_id>/", views.run_detail, name="history-run"),
    path("openapi.json", views.openapi, name="history-openapi"),
]
