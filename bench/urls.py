"""URLs of the bench: the history API; the Django admin when installed (the admin benchmark)."""

from __future__ import annotations

from django.apps import apps
from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [path("scheduler/", include("django_pgsched.urls"))]
if apps.is_installed("django.contrib.admin"):
    from django.contrib import admin

    urlpatterns.append(path("admin/", admin.site.urls))
