"""The engine's ports: where capabilities plug in. The engine names none of them.

The loops call what is plugged in here; :mod:`django_pgsched.wiring` (above the
engine and every capability) plugs the shipped ones in when Django starts
(``PgSchedConfig.ready``). Nothing plugged in means none of it: no months to
make before an insert, no month upkeep, no month retention, only the
``postgres`` claim transport.

- :class:`RunMonths`: "make the months for these times", before runs are
  inserted (``django_pgsched.partitions.months``).
- ``maintenance``: services of the maintenance loop that run at the retention
  interval, in order, before retention (``django_pgsched.partitions.upkeep``).
- ``month_retention``: makes the service that retires whole months of runs
  (``django_pgsched.partitions.retention``).
- ``transports``: by ``PGSCHED["CLAIMS"]["TRANSPORT"]``, makes the runtime of a
  claim transport other than ``postgres`` (``django_pgsched.broker.runtime``):
  its claim source for the executor and its loops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from ..conf import Settings
    from .claims import Claim
    from .queries import Statement


class RunMonths(Protocol):
    """The months of the run history that inserts need."""

    def needs_ensuring(self, alias: str, times: Iterable[datetime], now: datetime) -> bool:
        """Whether an insert of runs at ``times`` should make their months first."""
        ...

    def ensure(self, conn: BaseDatabaseWrapper, times: Iterable[datetime]) -> int:
        """Make the months of ``times`` in ``conn``'s transaction; how many were made."""
        ...

    def statement(self, times: Collection[datetime]) -> tuple[Statement[Any], dict[str, Any]]:
        """The statement (and its parameters) that makes them, to send in a pipeline."""
        ...


class Service(Protocol):
    """One maintenance service: ``run_once()`` does one round and returns what it did."""

    def run_once(self) -> object: ...


class MonthRetention(Protocol):
    """Retires whole months of runs past the retention, in ``conn``'s session."""

    def run_once(self, conn: BaseDatabaseWrapper, now: datetime) -> Any: ...


class ClaimSource(Protocol):
    """Where an executor pass gets the ids of the runs it claims (a claim transport's).

    :meth:`next_ids` returns the ids to claim by id with :attr:`statement` (at most
    ``limit``: lease rule 1), or ``None``: claim with ``SKIP LOCKED`` this pass; the
    claims of such a pass go to :meth:`swept`, those claimed by id to :meth:`claimed`.
    """

    statement: Statement[Any]  # executor_pass claiming %(claim_ids)s

    @property
    def active(self) -> bool: ...

    def next_ids(self, limit: int, *, waiting: bool) -> list[int] | None: ...

    def claimed(self, claims: Sequence[Claim]) -> None: ...

    def swept(self, claims: Sequence[Claim]) -> None: ...

    def settle(self, held: Collection[Any]) -> None: ...

    def give_back(self) -> None: ...


class Transport(Protocol):
    """A claim transport's runtime in one replica: its claim source and its loop."""

    wake: threading.Event

    @property
    def claims(self) -> ClaimSource: ...

    def start(self) -> None: ...

    def publisher_loop(self, stopping: threading.Event, tick: Callable[[], None]) -> None: ...

    def close(self) -> None: ...


class NoMonths:
    """A history without months to make (nothing plugged in)."""

    def needs_ensuring(self, alias: str, times: Iterable[datetime], now: datetime) -> bool:
        return False

    def ensure(self, conn: BaseDatabaseWrapper, times: Iterable[datetime]) -> int:
        return 0

    def statement(self, times: Collection[datetime]) -> tuple[Statement[Any], dict[str, Any]]:
        raise NotImplementedError("no months to make")


@dataclass
class Ports:
    months: RunMonths = field(default_factory=NoMonths)
    maintenance: list[Callable[[Settings], Service]] = field(default_factory=list)
    month_retention: Callable[[Settings], MonthRetention] | None = None
    transports: dict[str, Callable[[Settings, Sequence[str] | None], Transport]] = field(
        default_factory=dict
    )


PORTS = Ports()


def plug(
    *,
    months: RunMonths | None = None,
    maintenance: Callable[[Settings], Service] | None = None,
    month_retention: Callable[[Settings], MonthRetention] | None = None,
    transport: tuple[str, Callable[[Settings, Sequence[str] | None], Transport]] | None = None,
) -> None:
    """Plug a capability in (idempotent: plugging the same maintenance service twice keeps one)."""
    if months is not None:
        PORTS.months = months
    if maintenance is not None and maintenance not in PORTS.maintenance:
        PORTS.maintenance.append(maintenance)
    if month_retention is not None:
        PORTS.month_retention = month_retention
    if transport is not None:
        name, factory = transport
        PORTS.transports[name] = factory
