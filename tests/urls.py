from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("tasks/enqueue/", views.enqueue_task),
    path("tasks/<str:result_id>/", views.task_result),
]
