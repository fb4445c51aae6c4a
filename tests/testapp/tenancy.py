"""A test resolver for the history API: the tenant is the X-Tenant header (tests only!)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


def from_header(request: HttpRequest) -> str:
    tenant = request.headers.get("X-Tenant")
    if tenant is None:
        raise PermissionDenied("no X-Tenant header")
    return tenant
