"""Views the acceptance tests call over HTTP: enqueue a django.tasks task, read its result."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse


def enqueue_task(request: HttpRequest) -> JsonResponse:
    from tests.testapp.tasks import witness

    result = witness.enqueue(
        label=request.GET.get("label", ""), seconds=float(request.GET.get("seconds", "0"))
    )
    return JsonResponse({"id": result.id, "status": str(result.status)})


def task_result(request: HttpRequest, result_id: str) -> JsonResponse:
    from tests.testapp.tasks import witness

    result = witness.get_result(result_id)
    return JsonResponse(
        {
            "id": result.id,
            "status": str(result.status),
            "return_value": result.return_value if result.is_finished else None,
            "attempts": result.attempts,
            "errors": [e.exception_class_path for e in result.errors],
        }
    )
