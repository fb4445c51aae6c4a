"""No URLs: replicas serve only the metrics port, which is not a Django view."""

from __future__ import annotations

from typing import Any

urlpatterns: list[Any] = []
