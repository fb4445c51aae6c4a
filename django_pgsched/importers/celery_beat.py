"""Import django-celery-beat's periodic tasks as schedules (``manage.py pgsched_import_beat``).

:func:`import_beat` reads every ``PeriodicTask`` (when ``django_celery_beat`` is
installed), maps each one (:mod:`.beat_mapping`) and upserts the schedules by
name (the task's name, after an optional prefix), marked ``source =
"celery_beat"``. It is idempotent: a repeated import updates only what changed
in beat (the job, kwargs, cron or interval, time zone, queue) and leaves alone what is the
user's (status after creation, misfire policy, attempts, timeout). A schedule
of that name that was not imported from beat is never touched. What cannot be
mapped is reported, task by task, with the reason.

A dry run does the same work in a transaction that is rolled back, so it
reports exactly what the import would do, database checks included, and
writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import DatabaseError, transaction

from django_pgsched.conf import get_settings
from django_pgsched.models import Schedule, ScheduleStatus, db_now

from .beat_mapping import (
    OPTIONAL_OWNED_FIELDS,
    OWNED_FIELDS,
    BeatTask,
    Crontab,
    Mapped,
    NotMappable,
    map_task,
)

SOURCE = "celery_beat"


@dataclass
class ImportResult:
    """What an import did (or, in a dry run, would do), by schedule name."""

    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    created_active: list[str] = field(default_factory=list)  # created, and firing at once
    updated: dict[str, list[str]] = field(default_factory=dict)  # name -> fields changed
    unchanged: list[str] = field(default_factory=list)
    unmapped: dict[str, str] = field(default_factory=dict)  # task name -> reasons
    notes: dict[str, list[str]] = field(default_factory=dict)  # task name -> what was dropped
    stale: list[str] = field(default_factory=list)  # imported before; its task is gone


def read_tasks(using: str | None = None) -> list[BeatTask]:
    """Every ``PeriodicTask`` with its schedule, by name; crontabs expanded by Celery."""
    if not apps.is_installed("django_celery_beat"):
        raise ImproperlyConfigured(
            "django_celery_beat is not in INSTALLED_APPS: there are no periodic tasks to import"
        )
    from django_celery_beat.models import PeriodicTask

    rows = PeriodicTask.objects.using(using or "default").select_related(
        "crontab", "interval", "solar", "clocked"
    )
    return [_task(row) for row in rows.order_by("name")]


def _task(row: Any) -> BeatTask:
    every = None
    if row.interval is not None:
        every = timedelta(**{row.interval.period: row.interval.every})
    other = ""
    if row.solar is not None:
        other = (
            f"a solar schedule ({row.solar.event} at {row.solar.latitude}, "
            f"{row.solar.longitude}): schedules have no solar times"
        )
    elif row.clocked is not None:
        other = (
            f"a clocked schedule (once, at {row.clocked.clocked_time:%Y-%m-%d %H:%M:%S%z}): "
            "create a one-off run with django_pgsched.enqueue(job, run_at=...)"
        )
    return BeatTask(
        name=row.name,
        task=row.task,
        crontab=_crontab(row.crontab) if row.crontab is not None else None,
        every=every,
        other=other,
        args=row.args,
        kwargs=row.kwargs,
        queue=row.queue,
        enabled=row.enabled,
        one_off=row.one_off,
        start_time=row.start_time,
        expires=row.expires,
        expire_seconds=row.expire_seconds,
        last_run_at=row.last_run_at,
        priority=row.priority,
        exchange=row.exchange,
        routing_key=row.routing_key,
        headers=row.headers,
    )


def _crontab(row: Any) -> Crontab:
    """The crontab's texts and the value sets Celery itself expands them to."""
    from celery.schedules import crontab

    texts = {
        "minute": row.minute,
        "hour": row.hour,
        "day_of_month": row.day_of_month,
        "month_of_year": row.month_of_year,
        "day_of_week": row.day_of_week,
    }
    try:
        c = crontab(**texts)
        sets: tuple[frozenset[int], ...] | None = tuple(
            frozenset(int(v) for v in values)
            for values in (c.minute, c.hour, c.day_of_month, c.month_of_year, c.day_of_week)
        )
        error = ""
    except (ValueError, TypeError) as exc:
        sets, error = None, str(exc)
    return Crontab(**texts, timezone=str(row.timezone), sets=sets, error=error)


def import_beat(
    *,
    jobs: Mapping[str, str] | None = None,
    prefix: str = "",
    paused: bool = False,
    dry_run: bool = False,
    tasks: list[BeatTask] | None = None,
    using: str | None = None,
) -> ImportResult:
    """Import the periodic tasks (default: :func:`read_tasks`) as schedules.

    ``jobs`` maps Celery task names to job names (default: the same name);
    ``prefix`` goes before each schedule's name; ``paused`` creates every new
    schedule paused (otherwise a disabled task's schedule is paused and the
    others are active).
    """
    alias = using or get_settings().DATABASE_ALIAS
    tasks = read_tasks() if tasks is None else tasks
    result = ImportResult(dry_run=dry_run)
    with transaction.atomic(using=alias):
        now = db_now(alias)
        mapped: list[tuple[BeatTask, Mapped]] = []
        for task in tasks:
            try:
                mapped.append((task, map_task(task, now=now, jobs=jobs, prefix=prefix)))
            except NotMappable as exc:
                result.unmapped[task.name] = str(exc)
        names = [m.name for _, m in mapped]
        existing = {
            s.name: s
            for s in Schedule.objects.using(alias)
            .select_for_update()
            .filter(tenant="", name__in=names)
        }
        for task, m in mapped:
            if m.notes:
                result.notes[task.name] = list(m.notes)
            try:
                with transaction.atomic(using=alias):
                    _upsert(m, existing.get(m.name), paused=paused, result=result, using=alias)
            except (ValidationError, DatabaseError) as exc:
                messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
                result.unmapped[task.name] = "; ".join(messages)
                result.notes.pop(task.name, None)
        wanted = {f"{prefix}{t.name}" for t in tasks}
        result.stale = sorted(
            name
            for name in Schedule.objects.using(alias)
            .filter(source=SOURCE, name__startswith=prefix)
            .values_list("name", flat=True)
            if name not in wanted
        )
        if dry_run:
            transaction.set_rollback(True, using=alias)
    return result


def _upsert(
    m: Mapped, current: Schedule | None, *, paused: bool, result: ImportResult, using: str
) -> None:
    if current is not None and current.source != SOURCE:
        raise ValidationError(
            f"a schedule named {m.name!r} exists and was not imported from celery beat "
            f"(source {current.source!r}); rename one of them, or import with --prefix"
        )
    if current is None:
        status = ScheduleStatus.PAUSED if paused or not m.enabled else ScheduleStatus.ACTIVE
        schedule = Schedule(name=m.name, source=SOURCE, status=status, anchor=m.anchor, **m.fields)
        _validate(schedule)
        schedule.save(using=using, force_insert=True)
        result.created.append(m.name)
        if status == ScheduleStatus.ACTIVE:
            result.created_active.append(m.name)
        return
    owned = [*OWNED_FIELDS, *(f for f in OPTIONAL_OWNED_FIELDS if f in m.fields)]
    changed = [f for f in owned if getattr(current, f) != m.fields[f]]
    if not changed:
        result.unchanged.append(m.name)
        return
    for f in changed:
        setattr(current, f, m.fields[f])
    if "interval" in changed and m.fields["interval"] is not None and current.anchor is None:
        current.anchor = m.anchor
    _validate(current)
    current.save(using=using)
    result.updated[m.name] = changed


def _validate(schedule: Schedule) -> None:
    schedule.full_clean(exclude=["next_fire_at"], validate_unique=False, validate_constraints=False)


__all__ = ["SOURCE", "ImportResult", "import_beat", "read_tasks"]
