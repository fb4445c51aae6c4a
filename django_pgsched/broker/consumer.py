"""The executor's claim step through the broker (``PGSCHED["CLAIMS"]["TRANSPORT"] = "nats"``).

Each executor pass asks :meth:`BrokerClaims.pull` which runs to claim:

* ids from at most ``limit`` messages (the idle slots: lease rule 1 holds as
  with ``SKIP LOCKED``), claimed by id with ``executor_pass`` itself (the
  same predicates and fencing; only the claim cursor is replaced by the ids);
* or ``None``: claim with ``SKIP LOCKED`` this pass, because the broker is
  unreachable (the fallback, until it is back) or a sweep is due (every
  ``SWEEP_INTERVAL``: a run whose message was lost is claimed anyway; the
  broker is never the source of truth). A sweep that claimed a run which had
  waited longer than a sweep interval (its message lost, or a backlog) is
  followed by another :data:`SWEEP_AGAIN` seconds later, and so on while they
  find such runs: messages lost by a whole cluster's restart are recovered at the
  rate of the slots, not one sweep per interval.

After the claim committed, :meth:`claimed` holds the message of each run it
claimed and acknowledges the others (a run no longer claimable, an id that
does not exist, a malformed payload): dropped. :meth:`settle` acknowledges a
held message once its claim is over (its outcome recorded, the run released,
or the lease lost), so a replica killed mid-run leaves its messages to be
redelivered; by then the run is still leased (the message is dropped) or
reaped (the reaper's update writes a new outbox row): the lease and the reaper
decide, as with ``SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import queries
from ..engine.claims import Claim
from .client import BrokerUnavailable, Delivered, NatsBroker
from .messages import Malformed, parse
from .settings import ClaimsSettings

logger = logging.getLogger(__name__)

BROKER = "broker"
POSTGRES = "postgres"

# seconds from a sweep that claimed a run waiting longer than SWEEP_INTERVAL to the next
SWEEP_AGAIN = 1.0

# executor_pass claiming the pulled ids (engine/queries.sql: executor_pass_by_id)
EXECUTOR_PASS_BY_ID = queries.EXECUTOR_PASS_BY_ID


@dataclass
class ConsumerStats:
    """What this replica's consumer did (read by the metrics)."""

    path: str = POSTGRES  # the path of the last claim: broker, or postgres (fallback or sweep)
    delivered: int = 0
    claimed: int = 0
    dropped: int = 0  # not claimable any more (claimed elsewhere, finished, unknown id)
    malformed: int = 0
    redelivered: int = 0
    fallbacks: int = 0  # passes that claimed with SKIP LOCKED because the broker was unusable
    sweeps: int = 0
    stale_swept: int = 0  # runs a sweep claimed that had waited longer than SWEEP_INTERVAL
    by_path: dict[str, int] = field(default_factory=lambda: {BROKER: 0, POSTGRES: 0})


class BrokerClaims:
    """One executor's consumer: what to claim each pass, and which messages to acknowledge.

    The executor's :class:`~django_pgsched.engine.ports.ClaimSource`.
    """

    statement = EXECUTOR_PASS_BY_ID

    def __init__(
        self, broker: NatsBroker, settings: ClaimsSettings, clock: Callable[[], float]
    ) -> None:
        self.broker = broker
        self.settings = settings
        self.clock = clock
        self.stats = ConsumerStats()
        self._pulled: dict[int, list[Delivered]] = {}
        self._held: dict[uuid.UUID, list[Delivered]] = {}
        self._next_sweep = clock() + settings.SWEEP_INTERVAL.total_seconds()

    @property
    def active(self) -> bool:
        """The broker is where this replica's claims come from now."""
        return self.stats.path == BROKER and self.broker.available

    def next_ids(self, limit: int, *, waiting: bool) -> list[int] | None:
        """For a pass: :meth:`pull`, at once when outcomes wait to be recorded."""
        return self.pull(limit, 0.0 if waiting else self.settings.FETCH_WAIT.total_seconds())

    def pull(self, limit: int, wait: float) -> list[int] | None:
        """Run ids to claim by id (at most ``limit``); ``None``: claim with ``SKIP LOCKED``."""
        self.give_back()
        if not self.broker.available:
            self._use(POSTGRES)
            self.stats.fallbacks += 1
            return None
        if self.clock() >= self._next_sweep:
            self._next_sweep = self.clock() + self.settings.SWEEP_INTERVAL.total_seconds()
            self.stats.sweeps += 1
            self.stats.by_path[POSTGRES] += 1
            return None
        try:
            messages = self.broker.fetch(limit, wait)
        except BrokerUnavailable as exc:
            logger.warning(
                "claims: fetching from the broker failed (%s); claiming from PostgreSQL", exc
            )
            self._use(POSTGRES)
            self.stats.fallbacks += 1
            return None
        self._use(BROKER)
        poison: list[Delivered] = []
        for message in messages:
            self.stats.delivered += 1
            self.stats.redelivered += message.redelivered
            try:
                run_id = parse(message.data).run_id
            except Malformed as exc:
                logger.warning(
                    "claims: dropped a malformed message on %s: %s", message.subject, exc
                )
                self.stats.malformed += 1
                poison.append(message)
                continue
            self._pulled.setdefault(run_id, []).append(message)
        self.broker.ack(poison)
        return sorted(self._pulled)

    def claimed(self, claims: Sequence[Claim]) -> None:
        """The claim committed: hold the messages of ``claims``, acknowledge the rest (dropped)."""
        for claim in claims:
            messages = self._pulled.pop(claim.run_id, [])
            if messages:
                self._held[claim.token] = messages
        self.stats.claimed += len(claims)
        dropped = [m for messages in self._pulled.values() for m in messages]
        self.stats.dropped += len(dropped)
        self._pulled = {}
        self.broker.ack(dropped)

    def swept(self, claims: Sequence[Claim]) -> None:
        """A ``SKIP LOCKED`` pass (a sweep, or the fallback) claimed ``claims``.

        When one had waited longer than a sweep interval since it fell due, its
        message may be lost (a cluster that restarted loses what it had not written
        out) or the replicas are behind: sweep again :data:`SWEEP_AGAIN` seconds on.
        """
        stale = self.settings.SWEEP_INTERVAL
        waited = sum(1 for claim in claims if claim.started_at - claim.fire_after > stale)
        if waited:
            self.stats.stale_swept += waited
            self._next_sweep = min(self._next_sweep, self.clock() + SWEEP_AGAIN)

    def give_back(self) -> None:
        """A pass that pulled failed before its claim committed: redeliver what it pulled."""
        if self._pulled:
            self.broker.nak([m for messages in self._pulled.values() for m in messages])
            self._pulled = {}

    def settle(self, held: Collection[Any]) -> None:
        """Acknowledge the messages of claims that are over (not among the tokens ``held``)."""
        over = [token for token in self._held if token not in held]
        if over:
            self.broker.ack([m for token in over for m in self._held.pop(token)])

    def _use(self, path: str) -> None:
        if path != self.stats.path:
            if path == POSTGRES and self.stats.path == BROKER and not self.broker.available:
                logger.warning("claims: the broker is unreachable; claiming with SKIP LOCKED")
            elif path == BROKER:
                logger.info("claims: claiming through the broker")
        self.stats.path = path
        self.stats.by_path[path] += 1
