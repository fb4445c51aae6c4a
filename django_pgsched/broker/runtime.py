"""A replica's broker parts, built by the runner when ``PGSCHED["CLAIMS"]`` is ``"nats"``.

:class:`BrokerRuntime` holds the connection (``client.py``), the executor's
consumer (``consumer.py``) and the publisher (``publisher.py``), and runs the
publisher's loop on a thread of the runner's. At start it makes sure the
outbox's triggers are enabled (``schema.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from django.db import DatabaseError, connections

from ..conf import Settings
from ..engine import db
from ..engine.backoff import Backoff
from .client import NatsBroker
from .consumer import BrokerClaims
from .publisher import Publisher, PublishPass
from .schema import ensure_outbox

logger = logging.getLogger(__name__)


class BrokerRuntime:
    """The broker's side of one replica."""

    def __init__(
        self,
        settings: Settings,
        *,
        queues: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.broker = NatsBroker(settings.claims, queues)
        self.claims = BrokerClaims(self.broker, settings.claims, clock)
        self.publisher = Publisher(self.broker, settings)
        self.wake = threading.Event()
        self.last_pass: PublishPass | None = None
        self.published = 0

    def start(self) -> None:
        """Enable the outbox (if this role may) and start connecting to the broker."""
        try:
            with db.session("publisher", self.settings.DATABASE_ALIAS) as conn:
                if ensure_outbox(conn):
                    logger.info("claims: enabled the outbox triggers on pgsched_job_run")
        except DatabaseError:
            logger.exception(
                "claims: could not enable the outbox triggers (run `manage.py pgsched_claims "
                "--enable` as the tables' owner); runs are claimed by the sweep meanwhile"
            )
        finally:
            connections[self.settings.DATABASE_ALIAS].close()
        self.broker.start()

    def close(self) -> None:
        self.broker.close()

    def publisher_loop(self, stopping: threading.Event, tick: Callable[[], None]) -> None:
        """Publish due outbox rows until ``stopping``; NOTIFY (``wake``) or the next due time."""
        interval = self.settings.claims.PUBLISH_INTERVAL.total_seconds()
        backoff = Backoff()
        while not stopping.is_set():
            self.wake.clear()
            try:
                result = self.publisher.run_once()
                self.last_pass = result
                self.published += result.published
                tick()
                backoff.reset()
                if result.full:
                    continue
                wait = interval
                if result.failed or not self.broker.available:
                    wait = min(interval, 0.5)
                elif result.next_due_in is not None:
                    wait = max(0.0, min(wait, result.next_due_in))
            except Exception:
                wait = backoff.next()
                logger.warning("publisher pass failed; retrying in %.1fs", wait, exc_info=True)
            self.wake.wait(wait)
        connections.close_all()
