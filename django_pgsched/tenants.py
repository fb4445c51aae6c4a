"""Tenants: whose schedules and runs these are, as a plain string.

A tenant is data, not a Django user: ``Schedule.tenant`` and ``JobRun.tenant``
hold whatever identifies a customer in the host project (``""`` = no tenant).
A run copies its schedule's tenant when it is planned; ``enqueue(...,
tenant=...)`` sets it for a one-off run. How an HTTP request maps to a tenant
is the host project's decision (``PGSCHED["TENANT_RESOLVER"]``, see
:mod:`django_pgsched.history.views`).
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

MAX_LENGTH = 200
NO_TENANT = ""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_tenant(value: object, field: str = "tenant") -> str:
    """``value`` if it is a usable tenant: a string of at most 200 characters, no control ones."""
    if not isinstance(value, str):
        raise ValidationError(f"{field}: expected a string, got {value!r}", code="tenant")
    if len(value) > MAX_LENGTH:
        raise ValidationError(
            f"{field}: at most {MAX_LENGTH} characters, got {len(value)}", code="tenant"
        )
    if _CONTROL.search(value):
        raise ValidationError(
            f"{field}: control characters are not allowed, got {value!r}", code="tenant"
        )
    return value
