"""How one django-celery-beat periodic task becomes a schedule. Pure: no database, no Celery.

:func:`map_task` takes a :class:`BeatTask` (a ``PeriodicTask`` row, read once by
:mod:`django_pgsched.importers.celery_beat`) and returns the schedule's fields,
or raises :class:`NotMappable` with every reason it cannot be imported as it is.

The rules, in brief (``docs/how-to/move-from-celery-beat.md`` has the table):

* ``CrontabSchedule`` becomes a five-field cron expression. It is built from the
  value sets Celery itself expands the crontab's fields to, so it fires exactly
  when beat would. Celery fires on a day when the day of month **and** the day
  of week match; cron (ours, like Vixie cron) when **either** does if both are
  restricted, so a crontab that restricts both is not mapped.
* ``IntervalSchedule`` becomes an interval (whole seconds), anchored at the
  task's last run so that it keeps its phase.
* A crontab's time zone becomes the schedule's ``timezone``, with the default
  policies at daylight-saving transitions (a skipped time runs shifted, a
  repeated one once).
* Solar and clocked schedules, one-off tasks, positional ``args``, and a start
  time or an expiry still ahead are reported.
* The Celery task name is the job name unless ``jobs`` maps it to another; the
  job must be registered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_pgsched.limits import MAX_START_DEADLINE, MIN_START_DEADLINE
from django_pgsched.registry import get_job
from django_pgsched.timing import cron as cron_parser
from django_pgsched.timing.errors import TimetableError
from django_pgsched.timing.zones import DEFAULT_ZONE

# minute, hour, day of month, month, day of week (Sunday = 0): every value of each field
FULL = tuple(frozenset(r) for r in (range(60), range(24), range(1, 32), range(1, 13), range(7)))
MAX_NAME_LENGTH = 200  # Schedule.name
UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu",
     "GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "GMT+0", "Etc/GMT+0", "GMT-0", "Etc/GMT-0",
     "Greenwich", "Etc/Greenwich"}
)  # fmt: skip


class NotMappable(ValueError):
    """The task cannot become a schedule as it is; the message gives every reason."""


@dataclass(frozen=True)
class Crontab:
    """A ``CrontabSchedule``: its texts, its zone, and the sets Celery expands them to."""

    minute: str = "*"
    hour: str = "*"
    day_of_month: str = "*"
    month_of_year: str = "*"
    day_of_week: str = "*"
    timezone: str = "UTC"
    # (minute, hour, day of month, month, day of week) as Celery reads the texts;
    # None when Celery rejects them (``error`` says why)
    sets: tuple[frozenset[int], ...] | None = FULL
    error: str = ""

    def __str__(self) -> str:
        texts = (self.minute, self.hour, self.day_of_month, self.month_of_year, self.day_of_week)
        return f"'{' '.join(_compact(t) for t in texts)}' ({self.timezone})"


@dataclass(frozen=True)
class BeatTask:
    """What the importer reads of one ``PeriodicTask`` (and its schedule)."""

    name: str
    task: str
    crontab: Crontab | None = None
    every: timedelta | None = None  # an IntervalSchedule
    other: str = ""  # a solar or clocked schedule, described
    args: str | None = "[]"
    kwargs: str | None = "{}"
    queue: str | None = None
    enabled: bool = True
    one_off: bool = False
    start_time: datetime | None = None
    expires: datetime | None = None
    expire_seconds: int | None = None
    last_run_at: datetime | None = None
    priority: int | None = None
    exchange: str | None = None
    routing_key: str | None = None
    headers: str | None = None


@dataclass(frozen=True)
class Mapped:
    """A task as a schedule: its name, the fields the importer owns, and what was dropped."""

    name: str
    fields: dict[str, Any]  # OWNED_FIELDS
    anchor: datetime | None  # for a new interval schedule: its last run (keeps the phase)
    enabled: bool
    notes: tuple[str, ...]


# The fields an import sets, and compares on a repeated import. Everything else
# (misfire policy, attempts, timeout, DST policies, status after creation) is the user's.
# ``start_deadline`` is the import's only when the task has an ``expire_seconds``
# (``Mapped.fields`` then holds it); otherwise it stays the user's.
OWNED_FIELDS = ("job", "kwargs", "cron", "interval", "timezone", "queue")
OPTIONAL_OWNED_FIELDS = ("start_deadline",)


def schedule_name(task_name: str, prefix: str = "") -> str:
    return f"{prefix}{task_name}"


def map_task(
    task: BeatTask, *, now: datetime, jobs: Mapping[str, str] | None = None, prefix: str = ""
) -> Mapped:
    """The schedule for ``task`` at the database time ``now``; ``NotMappable`` if none."""
    reasons: list[str] = []
    fields: dict[str, Any] = {"cron": None, "interval": None, "timezone": DEFAULT_ZONE}
    name = schedule_name(task.name, prefix)
    if len(name) > MAX_NAME_LENGTH:
        reasons.append(f"the schedule name would be longer than {MAX_NAME_LENGTH} characters")
    try:
        fields["job"] = _job(task.task, jobs or {})
    except NotMappable as exc:
        reasons.append(str(exc))
    for convert in (_schedule, _arguments, _window):
        try:
            fields.update(convert(task, now))
        except NotMappable as exc:
            reasons.append(str(exc))
    if reasons:
        raise NotMappable("; ".join(reasons))
    fields["queue"] = task.queue or None
    deadline, deadline_note = _start_deadline(task)
    if deadline is not None:
        fields["start_deadline"] = deadline
    anchor = None
    if task.every is not None:
        anchor = _second(task.last_run_at or task.start_time)
    notes = (deadline_note,) if deadline_note else ()
    return Mapped(name, fields, anchor, task.enabled, notes + _notes(task))


def _job(task_name: str, jobs: Mapping[str, str]) -> str:
    job = jobs.get(task_name, task_name)
    if get_job(job) is not None:
        return job
    if job != task_name:
        raise NotMappable(f"job {job!r} (mapped from task {task_name!r}) is not registered")
    if task_name == "celery.backend_cleanup":
        raise NotMappable(
            "celery.backend_cleanup is Celery's own clean-up of task results; "
            "pgsched deletes old runs itself (PGSCHED['RETENTION'])"
        )
    raise NotMappable(
        f"task {task_name!r} is not a registered job: register a @job with that name, "
        f"or map it with --job {task_name}=JOB"
    )


def _schedule(task: BeatTask, now: datetime) -> dict[str, Any]:
    if task.other:
        raise NotMappable(task.other)
    if task.one_off:
        raise NotMappable(
            "a one-off task (beat runs it once, then disables it): "
            "create a one-off run with django_pgsched.enqueue(job, run_at=...)"
        )
    if task.crontab is not None:
        return {"cron": cron_expression(task.crontab), **zone_fields(task.crontab)}
    if task.every is not None:
        seconds = task.every.total_seconds()
        if seconds < 1 or seconds != int(seconds):
            raise NotMappable(f"an interval of {task.every}: intervals are whole seconds, ≥ 1 s")
        return {"interval": timedelta(seconds=int(seconds))}
    raise NotMappable("it has no schedule")


# ---- Time zones: the one place that decides what a crontab's zone becomes. ----------
# The crontab's IANA zone is the schedule's (the model validates the name); UTC by
# any of its names is the default zone. The DST policies keep their defaults.
def zone_fields(tab: Crontab) -> dict[str, Any]:
    return {"timezone": DEFAULT_ZONE if tab.timezone in UTC_NAMES else tab.timezone}


def cron_expression(tab: Crontab) -> str:
    """A five-field expression that fires exactly when Celery's crontab does."""
    if tab.sets is None:
        raise NotMappable(f"crontab {tab}: Celery rejects it ({tab.error})")
    full = [values == every for values, every in zip(tab.sets, FULL, strict=True)]
    if not full[2] and not full[4]:
        raise NotMappable(
            f"crontab {tab} restricts both the day of month and the day of week: Celery "
            "fires when both match, cron when either does; split it into two tasks"
        )
    texts = (tab.minute, tab.hour, tab.day_of_month, tab.month_of_year, tab.day_of_week)
    as_written = " ".join("*" if f else _compact(t) for f, t in zip(full, texts, strict=True))
    listed = " ".join("*" if f else _ranges(v) for f, v in zip(full, tab.sets, strict=True))
    problem = ""
    for candidate in (as_written, listed):
        try:
            parsed = cron_parser.parse(candidate)
        except TimetableError as exc:
            problem = str(exc)
            continue
        expanded = (
            parsed.minutes,
            parsed.hours,
            parsed.days_of_month,
            parsed.months,
            parsed.days_of_week,
        )
        either = parsed.dom_restricted and parsed.dow_restricted  # Vixie's OR: never Celery's
        if expanded == tab.sets and parsed.seconds == {0} and not either:
            return parsed.expression
    raise NotMappable(f"crontab {tab}: {problem or 'no cron expression fires at the same times'}")


def _arguments(task: BeatTask, now: datetime) -> dict[str, Any]:
    reasons = []
    args: Any = []
    try:
        args = json.loads(task.args or "[]")
    except ValueError as exc:
        reasons.append(f"args is not valid JSON ({exc})")
    if args != []:
        reasons.append(
            f"positional args {task.args}: jobs take keyword arguments only; "
            "move them into kwargs (and the task's signature)"
        )
    kwargs: Any = {}
    try:
        kwargs = json.loads(task.kwargs or "{}")
    except ValueError as exc:
        reasons.append(f"kwargs is not valid JSON ({exc})")
    if not isinstance(kwargs, dict):
        reasons.append(f"kwargs {task.kwargs} is not a JSON object")
    if reasons:
        raise NotMappable("; ".join(reasons))
    return {"kwargs": kwargs}


def _window(task: BeatTask, now: datetime) -> dict[str, Any]:
    if task.expires is not None and task.expires <= now:
        raise NotMappable(f"it expired at {task.expires:%Y-%m-%d %H:%M:%S%z}: beat runs it no more")
    if task.expires is not None:
        raise NotMappable(
            f"it expires at {task.expires:%Y-%m-%d %H:%M:%S%z}: schedules have no end date; "
            "clear the expiry to import it, and pause the schedule when it should end"
        )
    if task.start_time is not None and task.start_time > now:
        raise NotMappable(
            f"it starts at {task.start_time:%Y-%m-%d %H:%M:%S%z}: schedules have no start "
            "time; import it after then"
        )
    return {}


def _start_deadline(task: BeatTask) -> tuple[timedelta | None, str]:
    """Celery's ``expire_seconds`` (a task received later is revoked) as ``start_deadline``.

    A run not started within that many seconds of its occurrence ends ``missed``
    without running, as Celery's worker drops an expired message. Outside the
    deadline's bounds it is dropped with a note.
    """
    if task.expire_seconds is None:
        return None, ""
    deadline = timedelta(seconds=task.expire_seconds)
    if not MIN_START_DEADLINE <= deadline <= MAX_START_DEADLINE:
        return None, (
            f"expire_seconds {task.expire_seconds} dropped: a start deadline is "
            f"{int(MIN_START_DEADLINE.total_seconds())} s to "
            f"{MAX_START_DEADLINE.days} days, so a late run still starts"
        )
    return deadline, ""


def _notes(task: BeatTask) -> tuple[str, ...]:
    """What Celery would use and a schedule has no place for (the task is imported)."""
    notes = []
    if task.priority is not None:
        notes.append(
            f"priority {task.priority} dropped: Celery's priorities are the broker's "
            "(RabbitMQ takes higher numbers first, Redis lower ones); a schedule's runs "
            "of a job have priority 0"
        )
    for option in ("exchange", "routing_key"):
        if getattr(task, option):
            notes.append(f"{option} {getattr(task, option)!r} dropped: no broker routing")
    if task.headers and task.headers.strip() not in ("{}", ""):
        notes.append(f"headers {task.headers} dropped: runs carry no message headers")
    return tuple(notes)


def _compact(text: str | None) -> str:
    """A Celery field's text as django-celery-beat shows it: no spaces, empty is ``*``."""
    return (text or "").replace(" ", "") or "*"


def _ranges(values: frozenset[int]) -> str:
    """``{1, 2, 3, 7}`` as ``1-3,7``."""
    ordered = sorted(values)
    parts: list[str] = []
    start = prev = ordered[0]
    for value in [*ordered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


def _second(t: datetime | None) -> datetime | None:
    return t.replace(microsecond=0) if t is not None else None


__all__ = ["BeatTask", "Crontab", "Mapped", "NotMappable", "map_task"]
