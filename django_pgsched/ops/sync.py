"""Upsert the schedules declared in ``PGSCHED["SCHEDULES"]``.

Runs when ``runscheduler`` starts and through ``manage.py pgsched_sync``. It is
idempotent and safe to run from many replicas at once: unchanged schedules are
not written (their ``next_fire_at`` is kept), changed ones are updated, and
schedules that were declared in settings but no longer are, are deleted
(``prune``). Status is not synced: a declared schedule paused in the admin
stays paused. The audit trail records its changes as made by ``settings sync``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, DataError, IntegrityError, transaction

from ..audit.actor import SYNC, actor
from ..conf import get_settings
from ..models import DEFINITION_FIELDS, Schedule
from ..tenants import validate_tenant

SYNCED_FIELDS = DEFINITION_FIELDS
SOURCE = "settings"


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


MAX_SECONDS = 10 * 366 * 86400  # far above any valid interval, timeout or grace


def _seconds(name: str, key: str, value: Any) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value == value and abs(value) <= MAX_SECONDS:  # not NaN, not absurd
            return timedelta(seconds=value)
        problem = f"{value!r} is not a usable number of seconds"
    else:
        problem = f"expected a timedelta or a number of seconds, got {value!r}"
    raise ValidationError(f"SCHEDULES[{name!r}]: {key}: {problem}")


def validate_name(name: Any) -> None:
    """A declared name obeys the model's rules (text, 1 to 200 characters, no NUL)."""
    if not isinstance(name, str):
        raise ValidationError(
            f"SCHEDULES[{name!r}]: a schedule's name must be text, got {type(name).__name__}"
        )
    try:
        Schedule._meta.get_field("name").clean(name, None)
    except ValidationError as exc:
        shown = name if len(name) <= 60 else f"{name[:40]}...({len(name)} characters)"
        raise ValidationError(f"SCHEDULES[{shown!r}]: name: {'; '.join(exc.messages)}") from None


def build(name: str, options: Mapping[str, Any]) -> Schedule:
    """An unsaved, validated :class:`Schedule` from one declaration."""
    validate_name(name)
    if not isinstance(options, Mapping):
        raise ValidationError(f"SCHEDULES[{name!r}]: expected a dict of options, got {options!r}")
    unknown = sorted(set(options) - set(SYNCED_FIELDS))
    if unknown:
        raise ValidationError(
            f"SCHEDULES[{name!r}]: unknown option(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(SYNCED_FIELDS)}"
        )
    if "tenant" in options:  # full_clean() would turn a number into its text
        try:
            validate_tenant(options["tenant"])
        except ValidationError as exc:
            raise ValidationError(f"SCHEDULES[{name!r}]: {'; '.join(exc.messages)}") from None
    values: dict[str, Any] = {"name": name, "source": SOURCE, "kwargs": {}}
    values.update(options)
    for key in ("interval", "misfire_grace", "timeout", "start_deadline"):
        values[key] = _seconds(name, key, values.get(key))
    values["jitter"] = _seconds(name, "jitter", values.get("jitter", 0))
    settings = get_settings()
    values.setdefault("misfire_policy", settings.DEFAULT_MISFIRE_POLICY)
    values.setdefault("catch_up_limit", settings.DEFAULT_CATCH_UP_LIMIT)
    schedule = Schedule(**values)
    try:
        schedule.full_clean(
            exclude=["name", "next_fire_at"], validate_unique=False, validate_constraints=False
        )
    except ValidationError as exc:
        raise ValidationError(f"SCHEDULES[{name!r}]: {'; '.join(exc.messages)}") from None
    return schedule


def refused(name: str, exc: DatabaseError) -> ValidationError:
    """The database refused a declaration: say which, and why, in one line."""
    diag = getattr(exc.__cause__, "diag", None)
    where = [
        f"{label} {value}"
        for label, value in (
            ("column", getattr(diag, "column_name", None)),
            ("constraint", getattr(diag, "constraint_name", None)),
        )
        if value
    ]
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ValidationError(
        f"SCHEDULES[{name!r}]: the database refused it: {detail}"
        + (f" ({', '.join(where)})" if where else "")
    )


def _differs(current: Schedule, wanted: Schedule) -> list[str]:
    changed = []
    for f in SYNCED_FIELDS:
        a, b = getattr(current, f), getattr(wanted, f)
        if f == "anchor" and b is None:
            continue  # keep the stored anchor when the declaration has none
        if isinstance(a, datetime) and isinstance(b, datetime):
            if a != b:
                changed.append(f)
        elif a != b:
            changed.append(f)
    return changed


def _declared(rows: Iterable[Schedule], wanted: Mapping[str, Schedule]) -> dict[str, Schedule]:
    """The stored schedule of each declaration: names are unique within a tenant, so
    the one of the declared tenant, else a declared one of another tenant (the
    declaration moved it: it is updated in place, its history kept)."""
    found: dict[str, Schedule] = {}
    for row in rows:
        want = wanted[row.name].tenant
        if row.tenant == want:
            found[row.name] = row
        elif row.source == SOURCE and found.get(row.name) is None:
            found[row.name] = row
    return found


def sync_schedules(
    declared: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    prune: bool = True,
    dry_run: bool = False,
    using: str | None = None,
) -> SyncResult:
    """Make the database match ``declared`` (default: ``PGSCHED["SCHEDULES"]``)."""
    settings = get_settings()
    alias = using or settings.DATABASE_ALIAS
    declared = settings.SCHEDULES if declared is None else declared
    wanted = {name: build(name, options) for name, options in declared.items()}
    result = SyncResult()
    with transaction.atomic(using=alias), actor(SYNC, using=alias):
        existing = _declared(
            Schedule.objects.using(alias).select_for_update().filter(name__in=list(wanted)),
            wanted,
        )
        for name, schedule in wanted.items():
            current = existing.get(name)
            if current is None:
                if not dry_run:
                    try:
                        with transaction.atomic(using=alias):
                            schedule.save(using=alias, force_insert=True)
                    except IntegrityError as exc:
                        if (
                            Schedule.objects.using(alias)
                            .filter(tenant=schedule.tenant, name=name)
                            .exists()
                        ):
                            result.unchanged.append(name)  # another replica created it just now
                            continue
                        raise refused(name, exc) from exc
                    except DataError as exc:
                        raise refused(name, exc) from exc
                result.created.append(name)
                continue
            changed = _differs(current, schedule)
            if current.source != SOURCE:
                changed.append("source")
            if not changed:
                result.unchanged.append(name)
                continue
            for f in changed:
                setattr(current, f, getattr(schedule, f))
            if not dry_run:
                try:
                    with transaction.atomic(using=alias):
                        current.save(using=alias)
                except (IntegrityError, DataError) as exc:
                    raise refused(name, exc) from exc
            result.updated.append(name)
        if prune:
            keep = {(w.tenant, name) for name, w in wanted.items()}
            stale = [
                (pk, name)
                for pk, tenant, name in Schedule.objects.using(alias)
                .filter(source=SOURCE)
                .values_list("pk", "tenant", "name")
                if (tenant, name) not in keep
            ]
            result.deleted = sorted(name for _, name in stale)
            if not dry_run and stale:
                Schedule.objects.using(alias).filter(pk__in=[pk for pk, _ in stale]).delete()
    return result
