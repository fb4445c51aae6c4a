from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from tests import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("scheduler/", include("django_pgsched.urls")),
    path("tasks/enqueue/", views.enqueue_task),
    path("tasks/<str:result_id>/", views.task_result),
]
