from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    # the run history API (staff only here: no PGSCHED["TENANT_RESOLVER"]), e.g.
    # /scheduler/runs/?since=2026-03-10 once logged in to the admin
    path("scheduler/", include("django_pgsched.urls")),
    path("", RedirectView.as_view(url="/admin/pgsched/")),
]
