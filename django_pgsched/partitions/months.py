"""Calendar months (UTC) of the run history, and a run's month made on demand.

Every month of ``pgsched_job_run`` is one partition, ``pgsched_job_run_pYYYYMM``
(and ``pgsched_attempt_pYYYYMM`` for its attempts). The maintenance loop keeps
the coming months ready (:mod:`.upkeep`); a run outside them (a ``run_at`` years
ahead, a backfill of a month long gone) has its month created by
:func:`ensure`, called before every insert whose times this process has not
seen covered, in the inserting transaction (``pgsched_ensure_months``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..engine import db, queries
from ..engine.rows import EnsuredMonths

TABLES = ("pgsched_job_run", "pgsched_attempt")


def month_start(at: datetime) -> datetime:
    """The first instant of ``at``'s calendar month, in UTC."""
    at = at.astimezone(UTC)
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def add_months(month: datetime, count: int) -> datetime:
    """``month`` (a month's start) moved by ``count`` months."""
    index = month.year * 12 + month.month - 1 + count
    return month.replace(year=index // 12, month=index % 12 + 1)


def partition_name(table: str, month: datetime) -> str:
    """``pgsched_job_run_p202612`` for December 2026."""
    return f"{table}_p{month.year:04d}{month.month:02d}"


class _Known:
    """Months this process has seen attached, by database alias.

    Trusted only for months not before the current one: retention never drops
    those, so a cached month cannot have disappeared (an older one may have).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._months: dict[str, set[datetime]] = {}

    def add(self, alias: str, months: Iterable[datetime]) -> None:
        with self._lock:
            self._months.setdefault(alias, set()).update(months)

    def covers(self, alias: str, months: Iterable[datetime], now: datetime) -> bool:
        current = month_start(now)
        with self._lock:
            known = self._months.get(alias, set())
            return all(m >= current and m in known for m in months)

    def forget(self, alias: str | None = None) -> None:
        with self._lock:
            if alias is None:
                self._months.clear()
            else:
                self._months.pop(alias, None)


known = _Known()


def ensure(
    conn: BaseDatabaseWrapper, times: Iterable[datetime], *, now: datetime | None = None
) -> int:
    """Make sure the months of ``times`` have partitions, in ``conn``'s transaction.

    Returns how many months were created. Without a round trip when this process
    has seen them all attached (and they are not in the past of ``now``).
    """
    months = {month_start(t) for t in times}
    if not months:
        return 0
    if now is not None and known.covers(conn.alias, months, now):
        return 0
    rows: list[EnsuredMonths] = db.fetch(conn, queries.ENSURE_MONTHS, {"times": sorted(months)})
    return rows[0].created


def needs_ensuring(alias: str, times: Iterable[datetime], now: datetime) -> bool:
    """Whether an insert of runs at ``times`` should send ``ensure_months`` first."""
    months = {month_start(t) for t in times}
    return bool(months) and not known.covers(alias, months, now)


class Months:
    """The engine's :class:`~django_pgsched.engine.ports.RunMonths` port: monthly partitions."""

    def needs_ensuring(self, alias: str, times: Iterable[datetime], now: datetime) -> bool:
        return needs_ensuring(alias, times, now)

    def ensure(self, conn: BaseDatabaseWrapper, times: Iterable[datetime]) -> int:
        return ensure(conn, times)

    def statement(
        self, times: Iterable[datetime]
    ) -> tuple[queries.Statement[EnsuredMonths], dict[str, Any]]:
        return queries.ENSURE_MONTHS, {"times": sorted(times)}
