"""Tenants: whose schedules and runs these are, as a plain string.

A tenant is data, not a Django user: ``Schedule.tenant`` and ``JobRun.tenant``
hold whatever identifies a customer in the host project (``""`` = no tenant).
A run copies its schedule's tenant when it is planned; ``enqueue(...,
tenant=...)`` sets it for a one-off run. How an HTTP request maps to a tenant
is the host project's decision (``PGSCHED["TENANT_RESOLVER"]``, see
:mod:`django_pgsched.history.views`).

A tenant may have a record (:class:`~django_pgsched.models.Tenant`) with its
quotas and its pause; :func:`pause` and :func:`resume` stop and restart all of a
tenant's schedules and runs at once.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from ..limits import MAX_NOTE_CHARS

if TYPE_CHECKING:
    from .models import Tenant

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


def validate_allowed_jobs(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(j, str) and j for j in value):
        raise ValidationError(f"allowed_jobs: a list of job names, got {value!r}"[:300])
    return tuple(value)


def pause(tenant: str, reason: str = "", *, using: str | None = None) -> Tenant:
    """Pause ``tenant``: from the commit on, none of its runs is claimed (those running
    finish) and none planned; its schedules' occurrences go to the ledger with reason
    ``tenant_paused``. ``reason`` shows in the admin and the tenant API."""
    from ..conf import get_settings
    from .models import Tenant

    validate_tenant(tenant)
    if tenant == NO_TENANT:
        raise ValidationError("tenant: the empty tenant (no tenant) cannot be paused")
    if not isinstance(reason, str) or len(reason) > MAX_NOTE_CHARS:
        raise ValidationError(f"reason: a string of at most {MAX_NOTE_CHARS} characters")
    alias = using or get_settings().DATABASE_ALIAS
    with transaction.atomic(using=alias):
        record, _ = Tenant.objects.using(alias).select_for_update().get_or_create(key=tenant)
        record.paused, record.pause_reason = True, reason
        record.save(using=alias, update_fields=["paused", "pause_reason", "updated_at"])
    return record


def resume(tenant: str, *, using: str | None = None) -> Tenant:
    """Resume ``tenant``: its runs are claimed again and its schedules carry on from their
    next occurrence, by each one's own policies (what fell due meanwhile is in the ledger)."""
    from ..conf import get_settings
    from .models import Tenant

    validate_tenant(tenant)
    alias = using or get_settings().DATABASE_ALIAS
    with transaction.atomic(using=alias):
        record, _ = Tenant.objects.using(alias).select_for_update().get_or_create(key=tenant)
        record.paused, record.pause_reason = False, ""
        record.save(using=alias, update_fields=["paused", "pause_reason", "updated_at"])
    return record
