"""LISTEN/NOTIFY: wake the loops as soon as something changes.

Notifications are a latency optimisation, never a correctness mechanism: every
loop also wakes on its own timer (the reconciliation), and a (re)connected
listener wakes every loop once, so a notification lost while the listener was
down costs at most one reconciliation interval.

Channels (payloads carry ids only):

- ``pgsched_schedule``: a schedule was created, changed, paused, resumed or
  deleted (sent by a trigger, so raw SQL and bulk updates notify too);
- ``pgsched_wait``: runs were created or became claimable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from django.db import DatabaseError, connections

from ..conf import get_settings
from . import db
from .backoff import Backoff

logger = logging.getLogger(__name__)

SCHEDULE_CHANNEL = "pgsched_schedule"
WAIT_CHANNEL = "pgsched_wait"


class Listener:
    """Listens on the scheduler's channels and sets the matching wake events."""

    def __init__(
        self,
        wakes: Mapping[str, Sequence[threading.Event]],
        *,
        stop: threading.Event,
        using: str | None = None,
        poll: float = 1.0,
    ) -> None:
        self.wakes = {channel: list(events) for channel, events in wakes.items()}
        self.stop = stop
        self.using = using or get_settings().DATABASE_ALIAS
        self.poll = poll
        self.connected = threading.Event()
        self.received = 0

    def _wake_all(self) -> None:
        for events in self.wakes.values():
            for event in events:
                event.set()

    def run(self) -> None:
        """Listen until ``stop`` is set, reconnecting with backoff after errors."""
        backoff = Backoff()
        while not self.stop.is_set():
            try:
                self._listen()
                backoff.reset()
            except DatabaseError as exc:
                self.connected.clear()
                wait = backoff.next()
                logger.warning(
                    "listener lost its connection (%s); reconnecting in %.1fs", exc, wait
                )
                db.discard(connections[self.using])
                self.stop.wait(wait)
            except Exception:  # psycopg raises its own errors from notifies()
                self.connected.clear()
                wait = backoff.next()
                logger.exception("listener failed; reconnecting in %.1fs", wait)
                db.discard(connections[self.using])
                self.stop.wait(wait)
        db.discard(connections[self.using])

    def _listen(self) -> None:
        conn = connections[self.using]
        db.configure(conn, "listener")
        with conn.cursor() as cursor:
            for channel in self.wakes:
                cursor.execute(f"LISTEN {channel}")
        self.connected.set()
        self._wake_all()  # anything missed while disconnected: reconcile now
        raw = conn.connection
        while not self.stop.is_set():
            for notify in raw.notifies(timeout=self.poll):
                self.received += 1
                for event in self.wakes.get(notify.channel, ()):
                    event.set()
                if self.stop.is_set():
                    break
