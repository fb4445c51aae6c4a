"""The shipped capabilities, plugged into the engine's ports (``engine/ports.py``).

Called once by :meth:`django_pgsched.apps.PgSchedConfig.ready`. This module
stands above the engine and every capability: the only place that names both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .engine import ports

if TYPE_CHECKING:
    from .conf import Settings


def _month_upkeep(settings: Settings) -> ports.Service:
    from .partitions.upkeep import Upkeep

    return Upkeep(settings=settings)


def _month_retention(settings: Settings) -> ports.MonthRetention:
    from .partitions.retention import MonthRetention

    return MonthRetention(settings=settings)


def _nats(settings: Settings, queues: Sequence[str] | None) -> ports.Transport:
    from .broker.runtime import BrokerRuntime  # nats-py only when the broker is used

    return BrokerRuntime(settings, queues=queues)


def plug_shipped() -> None:
    """Monthly partitions (months made on insert, upkeep, retention) and the NATS claims."""
    from .partitions.months import Months

    ports.plug(
        months=Months(),
        maintenance=_month_upkeep,
        month_retention=_month_retention,
        transport=("nats", _nats),
    )
