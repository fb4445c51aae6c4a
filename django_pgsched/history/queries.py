"""``runs()``: one page of a tenant's run history, newest first.

A page is one statement: the runs of the tenant (and the filters), in
``(scheduled_for, id)`` descending order, strictly before the cursor's
position, ``limit + 1`` rows (the extra row only says whether there is a next
page). It reads ``pgsched_run_tenant_idx`` from the cursor's position (or
``until``) and stops after the page; ``since``, ``until`` and the cursor are
plain ranges on ``scheduled_for``, the partition key, so a partitioned table
reads only the months they cover. Nothing is counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from ..conf import get_settings
from ..models import JobRun
from ..statuses import RunStatus
from ..tenants import validate_tenant
from .cursors import InvalidParameter, Position, decode, encode, query_digest

MAX_LIMIT = 500
SCHEDULE_MAX_LENGTH = 200


class _AllTenants:
    """The type of :data:`ALL_TENANTS` (a sentinel, never a tenant's name)."""

    _instance: _AllTenants | None = None

    def __new__(cls) -> _AllTenants:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ALL_TENANTS"


#: ``runs(tenant=ALL_TENANTS)``: every tenant's runs (for staff, never for a tenant).
ALL_TENANTS: Final = _AllTenants()


@dataclass(frozen=True)
class Page:
    """One page of runs: ``items`` newest first; ``next_cursor`` is ``None`` at the end."""

    items: list[JobRun]
    next_cursor: str | None


@dataclass(frozen=True)
class Query:
    """A checked history query (what a cursor is bound to, plus the page size)."""

    tenant: str | _AllTenants
    schedule: str | None
    statuses: tuple[str, ...] | None
    since: datetime | None
    until: datetime | None
    limit: int

    def digest(self) -> str:
        who: dict[str, Any] = (
            {"all": True} if isinstance(self.tenant, _AllTenants) else {"tenant": self.tenant}
        )
        return query_digest(
            {
                **who,
                "schedule": self.schedule,
                "status": list(self.statuses) if self.statuses is not None else None,
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None,
            }
        )


def _aware(name: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidParameter(name, f"expected a datetime, got {value!r}")
    if timezone.is_naive(value):
        raise InvalidParameter(name, f"timezone offset required, got {value.isoformat()}")
    return value


def check_query(
    *,
    tenant: object,
    schedule: object = None,
    status: object = None,
    since: object = None,
    until: object = None,
    limit: object = 100,
) -> Query:
    """The parameters as a :class:`Query`, or :class:`InvalidParameter` naming the first bad one."""
    if not isinstance(tenant, _AllTenants):
        try:
            validate_tenant(tenant)
        except ValidationError as exc:
            raise InvalidParameter("tenant", exc.messages[0].removeprefix("tenant: ")) from None
    if schedule is not None and (
        not isinstance(schedule, str)
        or not 1 <= len(schedule) <= SCHEDULE_MAX_LENGTH
        or any(ord(c) < 32 or ord(c) == 127 for c in schedule)
    ):
        raise InvalidParameter(
            "schedule",
            f"expected a schedule name of 1 to {SCHEDULE_MAX_LENGTH} characters,"
            " without control characters",
        )
    statuses: tuple[str, ...] | None = None
    if status is not None:
        values: list[object] = (
            list(status)
            if isinstance(status, Iterable) and not isinstance(status, (str, bytes, dict))
            else [status]
        )
        bad = [v for v in values if v not in RunStatus.values]
        if bad or not values:
            raise InvalidParameter(
                "status",
                f"expected one or more of {', '.join(RunStatus.values)}, got "
                f"{', '.join(repr(v) for v in bad) if bad else 'none'}",
            )
        statuses = tuple(sorted({str(v) for v in values}))
    since_at, until_at = _aware("since", since), _aware("until", until)
    if since_at is not None and until_at is not None and since_at >= until_at:
        raise InvalidParameter("until", "must be later than since")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidParameter("limit", f"expected an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return Query(
        tenant=tenant if isinstance(tenant, _AllTenants) else str(tenant),
        schedule=schedule,
        statuses=statuses,
        since=since_at,
        until=until_at,
        limit=limit,
    )


def select(
    query: Query,
    position: Position | None,
    *,
    using: str | None = None,
    only: Sequence[str] | None = None,
) -> QuerySet[JobRun]:
    """The runs of ``query`` after ``position``, in page order (not yet limited)."""
    qs: QuerySet[JobRun] = JobRun.objects.using(using or get_settings().DATABASE_ALIAS)
    if not isinstance(query.tenant, _AllTenants):
        qs = qs.filter(tenant=query.tenant)
        if query.tenant:  # the index's predicate, spelled as it is (no proof needed)
            qs = qs.exclude(tenant="")
    if query.schedule is not None:
        qs = qs.filter(schedule_name=query.schedule)
    if query.statuses is not None:
        qs = qs.filter(status__in=query.statuses)
    if query.since is not None:
        qs = qs.filter(scheduled_for__gte=query.since)
    if query.until is not None:
        qs = qs.filter(scheduled_for__lt=query.until)
    if position is not None:
        # the plain range prunes partitions; the row comparison is the index's condition
        qs = qs.filter(scheduled_for__lte=position.scheduled_for).extra(
            where=['("pgsched_job_run"."scheduled_for", "pgsched_job_run"."id") < (%s, %s)'],
            params=[position.scheduled_for, position.id],
        )
    if only is not None:
        qs = qs.only(*only)
    return qs.order_by("-scheduled_for", "-id")


def page(
    query: Query,
    cursor: str | None = None,
    *,
    using: str | None = None,
    only: Sequence[str] | None = None,
) -> Page:
    """One page of ``query`` from ``cursor`` (``None``: the newest runs)."""
    digest = query.digest()
    position = decode(cursor, digest) if cursor is not None else None
    rows = list(select(query, position, using=using, only=only)[: query.limit + 1])
    items = rows[: query.limit]
    more = len(rows) > query.limit
    last = items[-1] if items else None
    next_cursor = encode(Position(last.scheduled_for, last.pk), digest) if more and last else None
    return Page(items=items, next_cursor=next_cursor)


def runs(
    *,
    tenant: str | _AllTenants,
    schedule: str | None = None,
    status: str | Iterable[str] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 100,
    using: str | None = None,
) -> Page:
    """One page of ``tenant``'s runs, newest first by ``(scheduled_for, id)``.

    ``tenant`` is required: a tenant's name, ``""`` for the runs without a
    tenant, or :data:`ALL_TENANTS`. ``schedule`` is a schedule's name (its
    runs, including run-now runs and the history of a deleted schedule);
    ``status`` one status or several; ``since`` (inclusive) and ``until``
    (exclusive) bound ``scheduled_for`` and must be aware. ``cursor`` is a
    page's ``next_cursor``, valid only with the same tenant and filters
    (``limit`` may change). Raises :class:`InvalidParameter` naming the first
    bad parameter.
    """
    query = check_query(
        tenant=tenant, schedule=schedule, status=status, since=since, until=until, limit=limit
    )
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidParameter("cursor", f"expected a string, got {type(cursor).__name__}")
    return page(query, cursor, using=using)
