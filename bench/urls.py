"""URLs of the bench: the Django admin when it is installed (the admin benchmark), else none."""

from __future__ import annotations

from django.apps import apps
from django.urls import URLPattern, URLResolver, path

urlpatterns: list[URLPattern | URLResolver] = []
if apps.is_installed("django.contrib.admin"):
    from django.contrib import admin

    urlpatterns.append(path("admin/", admin.site.urls))
