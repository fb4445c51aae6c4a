"""What the catalog says about the months: attached, detaching, or standalone tables.

Every replica reads this at each upkeep and retention pass; nothing about the
months is stored anywhere else, so a replica killed halfway through leaves a
state the next one reads and finishes (:mod:`.upkeep`, :mod:`.retention`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import sqlfiles
from .months import TABLES, add_months, month_start

_NAME = re.compile(r"^(pgsched_job_run|pgsched_attempt)_p(\d{4})(\d{2})$")

LAYOUT_SQL = sqlfiles.get("partitions", "month_layout")

# The same key as pgsched_create_month's transaction lock: upkeep, retention and an
# insert creating its month on demand never work on one month at once.
LOCK_CLASS = 1885825


@dataclass
class Layout:
    """The months of both tables, as the catalog has them."""

    attached: dict[str, set[datetime]] = field(default_factory=dict)
    pending: dict[str, set[datetime]] = field(default_factory=dict)  # DETACH ... CONCURRENTLY
    standalone: dict[str, set[datetime]] = field(default_factory=dict)  # not attached

    def complete(self) -> set[datetime]:
        """Months attached in both tables (not being detached)."""
        both = set.intersection(*(self.attached.get(t, set()) for t in TABLES))
        pending = set().union(*(self.pending.get(t, set()) for t in TABLES))
        return both - pending

    def months_ahead(self, now: datetime) -> int:
        """Whole months after the current one that are ready, counted without a gap."""
        complete = self.complete()
        current = month_start(now)
        if current not in complete:
            return -1
        ahead = 0
        while add_months(current, ahead + 1) in complete:
            ahead += 1
        return ahead


def parse(name: str) -> tuple[str, datetime] | None:
    """``("pgsched_job_run", December 2026)`` for ``pgsched_job_run_p202612``."""
    match = _NAME.match(name)
    if match is None or not 1 <= int(match[3]) <= 12:
        return None
    return match[1], datetime(int(match[2]), int(match[3]), 1, tzinfo=UTC)


def read(conn: BaseDatabaseWrapper) -> Layout:
    layout = Layout(
        {t: set() for t in TABLES}, {t: set() for t in TABLES}, {t: set() for t in TABLES}
    )
    with conn.cursor() as cursor:
        cursor.execute(LAYOUT_SQL)
        rows = cursor.fetchall()
    for name, attached, pending in rows:
        parsed = parse(name)
        if parsed is None:
            continue
        table, month = parsed
        if pending:
            layout.pending[table].add(month)
        if attached:
            layout.attached[table].add(month)
        else:
            layout.standalone[table].add(month)
    return layout


def lock_key(month: datetime) -> int:
    return month.year * 100 + month.month


def try_lock(conn: BaseDatabaseWrapper, month: datetime) -> bool:
    """The month's session lock, if no other session works on it (never waits)."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [LOCK_CLASS, lock_key(month)])
        return bool(cursor.fetchone()[0])


def unlock(conn: BaseDatabaseWrapper, month: datetime) -> None:
    with conn.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [LOCK_CLASS, lock_key(month)])


@contextmanager
def step(conn: BaseDatabaseWrapper, lock_timeout: str) -> Iterator[Any]:
    """One short transaction (a savepoint inside a test's) that waits at most ``lock_timeout``
    for its locks, so nothing queues behind it for longer."""
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [lock_timeout])
        yield cursor


def ddl_lock_timeout(conn: BaseDatabaseWrapper, value: str) -> Any:
    """Set the session's lock_timeout for a statement outside a transaction; the old value."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, false)", [value]
        )
        return cursor.fetchone()[0]
