"""The broker's metrics, read at scrape time from this replica's runner and the outbox.

``pgsched_claims_path{path}`` is 1 for the path this replica's executor
claims through now (``broker``, or ``postgres``: the fallback while the broker
is unreachable); ``pgsched_claims_passes_total{path}`` counts executor passes
by path (the sweep's ``SKIP LOCKED`` claims count as ``postgres``); the
consumer's and publisher's counts; ``pgsched_claims_outbox_lag_seconds`` and
``pgsched_claims_outbox_due`` say how far publishing lags (read from the
database: every replica answers the same).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .consumer import BROKER, POSTGRES
from .publisher import outbox_lag

if TYPE_CHECKING:
    from .runtime import BrokerRuntime

logger = logging.getLogger(__name__)


class BrokerCollector(Collector):
    """Gauges and counters of one replica's broker parts."""

    def __init__(self, runtime: BrokerRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self.runtime.claims.stats
        current = BROKER if self.runtime.claims.active else POSTGRES
        path = GaugeMetricFamily(
            "pgsched_claims_path",
            "1 for the path this replica's executor claims through now (broker or postgres).",
            labels=["path"],
        )
        passes = CounterMetricFamily(
            "pgsched_claims_passes",
            "Executor claim passes by path (the fallback and the sweep claim with postgres).",
            labels=["path"],
        )
        for name in (BROKER, POSTGRES):
            path.add_metric([name], 1 if name == current else 0)
            passes.add_metric([name], stats.by_path[name])
        yield path
        yield passes
        yield GaugeMetricFamily(
            "pgsched_claims_broker_up",
            "1 while this replica is connected to the broker with its stream and consumers.",
            value=1 if self.runtime.broker.available else 0,
        )
        messages = CounterMetricFamily(
            "pgsched_claims_messages",
            "Messages this replica's consumer handled, by outcome.",
            labels=["outcome"],
        )
        for outcome, value in (
            ("claimed", stats.claimed),
            ("dropped", stats.dropped),
            ("malformed", stats.malformed),
            ("redelivered", stats.redelivered),
        ):
            messages.add_metric([outcome], value)
        yield messages
        yield CounterMetricFamily(
            "pgsched_claims_swept_waiting",
            "Runs a sweep claimed that had waited longer than SWEEP_INTERVAL (lost messages).",
            value=stats.stale_swept,
        )
        yield CounterMetricFamily(
            "pgsched_claims_published",
            "Runs this replica's publisher published (acknowledged by the stream).",
            value=self.runtime.published,
        )
        yield CounterMetricFamily(
            "pgsched_claims_publish_duplicates",
            "Publications the stream dropped as repeats of a message id it had stored.",
            value=self.runtime.broker.duplicates,
        )
        alias = self.runtime.settings.DATABASE_ALIAS
        try:
            lag, due = outbox_lag(connections[alias])
        except DatabaseError:
            logger.warning("metrics: the outbox could not be read", exc_info=True)
            return
        yield GaugeMetricFamily(
            "pgsched_claims_outbox_lag_seconds",
            "How long the oldest due outbox row has waited to be published (0: none waits).",
            value=lag,
        )
        yield GaugeMetricFamily(
            "pgsched_claims_outbox_due",
            "Outbox rows due and not yet published.",
            value=due,
        )
