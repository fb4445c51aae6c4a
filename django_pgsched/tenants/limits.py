"""What a tenant may do: its record's limits, or ``PGSCHED["TENANT_DEFAULTS"]``.

The quotas' names are public (a breach is a ``ValidationError`` whose message names
the quota and the values): ``max_schedules``, ``min_interval``, ``allowed_jobs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError

from . import validate_allowed_jobs

KEYS = ("max_schedules", "min_interval", "max_running", "weight", "allowed_jobs")


@dataclass(frozen=True)
class TenantLimits:
    max_schedules: int | None = None
    min_interval: timedelta | None = None
    max_running: int | None = None
    weight: int = 1
    #: None: any job through the ORM and the admin, none through the tenant API
    allowed_jobs: tuple[str, ...] | None = None
    paused: bool = False
    pause_reason: str = ""


def build_defaults(raw: object) -> TenantLimits:
    """``PGSCHED["TENANT_DEFAULTS"]`` checked (ImproperlyConfigured naming the key)."""
    if raw is None:
        return TenantLimits()
    where = "PGSCHED['TENANT_DEFAULTS']"
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{where}: expected a dict, got {raw!r}"[:300])
    unknown = sorted(map(str, set(raw) - set(KEYS)))
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(KEYS)}"
        )
    values: dict[str, Any] = {}
    for key in ("max_schedules", "max_running"):
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ImproperlyConfigured(f"{where}[{key!r}]: a non-negative integer or None")
        values[key] = value
    weight = raw.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
        raise ImproperlyConfigured(f"{where}['weight']: a positive integer, got {weight!r}")
    values["weight"] = weight
    gap = raw.get("min_interval")
    if isinstance(gap, (int, float)) and not isinstance(gap, bool):
        gap = timedelta(seconds=gap)
    if gap is not None and (not isinstance(gap, timedelta) or gap <= timedelta(0)):
        raise ImproperlyConfigured(
            f"{where}['min_interval']: a positive timedelta or seconds, or None"
        )
    values["min_interval"] = gap
    try:
        values["allowed_jobs"] = validate_allowed_jobs(raw.get("allowed_jobs"))
    except ValidationError as exc:
        raise ImproperlyConfigured(f"{where}: {exc.messages[0]}") from None
    return TenantLimits(**values)


def limits_for(tenant: str, raw_defaults: object, *, using: str) -> TenantLimits | None:
    """The limits of ``tenant`` (its record's, else ``raw_defaults``, the setting
    ``TENANT_DEFAULTS``); ``None`` for no tenant."""
    from .models import Tenant

    if tenant == "":
        return None
    defaults = build_defaults(raw_defaults)
    row = Tenant.objects.using(using).filter(key=tenant).first()
    if row is None:
        return defaults
    allowed = validate_allowed_jobs(row.allowed_jobs)
    return TenantLimits(
        max_schedules=row.max_schedules,
        min_interval=row.min_interval,
        max_running=row.max_running,
        weight=row.weight,
        allowed_jobs=allowed if allowed is not None else defaults.allowed_jobs,
        paused=row.paused,
        pause_reason=row.pause_reason,
    )
