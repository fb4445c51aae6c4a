"""The publisher: the outbox walk, on every replica, leaderless.

A run made claimable while the transport is ``nats`` has an outbox row
(``schema.py``: written by a trigger in the transaction that made it
claimable). Each replica's publisher loop takes the rows that are due with
``FOR UPDATE SKIP LOCKED`` (replicas take different rows, none waits),
publishes them, and deletes the rows the stream acknowledged, in the same
transaction. A replica killed between the broker's acknowledgement and its
commit leaves its rows to another replica, which publishes them again under
the same message id: the stream drops the repeat (within its
``DUPLICATE_WINDOW``). A row whose run is no longer pending or retrying (it
was claimed meanwhile, e.g. by a ``SKIP LOCKED`` fallback, or cancelled) is
deleted without publishing. When the broker is unreachable nothing is taken:
the rows wait, and ``outbox_lag()`` says for how long.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import sqlfiles
from ..conf import Settings
from ..engine import db, failpoints
from .client import BrokerUnavailable, NatsBroker, Publication
from .messages import message_id, payload, subject

logger = logging.getLogger(__name__)

# the outbox walk's statements (queries.sql)
TAKE = sqlfiles.get("broker", "outbox_take")
NEXT_DUE = sqlfiles.get("broker", "outbox_next_due")
DELETE = sqlfiles.get("broker", "outbox_delete")
LAG = sqlfiles.get("broker", "outbox_lag")


@dataclass(frozen=True)
class PublishPass:
    """What one publisher pass did."""

    published: int = 0
    dropped: int = 0  # rows of runs no longer claimable, deleted unpublished
    failed: int = 0  # rows the stream did not acknowledge (left for the next pass)
    full: bool = False  # took a whole batch: more may be due
    next_due_in: float | None = None  # seconds until the next outbox row falls due


class Publisher:
    """Publishes the due outbox rows. ``run_once()`` does one pass."""

    def __init__(self, broker: NatsBroker, settings: Settings) -> None:
        self.broker = broker
        self.settings = settings
        self.claims = settings.claims
        self.using = settings.DATABASE_ALIAS

    def run_once(self, now: datetime | None = None) -> PublishPass:
        if not self.broker.available:
            return PublishPass()
        batch = self.claims.PUBLISH_BATCH
        with db.session("publisher", self.using) as conn, transaction.atomic(using=self.using):
            with conn.cursor() as cursor:
                cursor.execute(TAKE, {"now": now, "batch": batch})
                rows = cursor.fetchall()
            live = [row for row in rows if row[5]]
            dead = [row[0] for row in rows if not row[5]]
            acked: list[bool] = []
            if live:
                failpoints.hit("publisher.before_publish")
                acked = self.broker.publish(
                    [
                        Publication(
                            subject(self.claims.SUBJECT_PREFIX, queue, tenant),
                            message_id(key, outbox_id),
                            payload(run_id),
                        )
                        for outbox_id, run_id, queue, tenant, key, _ in live
                    ]
                )
            published = [row[0] for row, ok in zip(live, acked, strict=True) if ok]
            if published:
                failpoints.hit("publisher.after_publish")
            done = published + dead
            with conn.cursor() as cursor:
                if done:
                    cursor.execute(DELETE, {"ids": done})
                cursor.execute(NEXT_DUE)
                (next_due,) = cursor.fetchone()
        failed = len(live) - len(published)
        if failed:
            logger.warning(
                "claims: the stream acknowledged %d of %d message(s): %s",
                len(published),
                len(live),
                self.broker.last_error,
            )
        return PublishPass(
            published=len(published),
            dropped=len(dead),
            failed=failed,
            full=len(rows) == batch,
            next_due_in=None if next_due is None else float(next_due),
        )


def outbox_lag(conn: BaseDatabaseWrapper) -> tuple[float, int]:
    """(seconds the oldest due outbox row has waited, how many are due)."""
    with conn.cursor() as cursor:
        cursor.execute(LAG)
        lag, count = cursor.fetchone()
    return float(lag), int(count)


__all__ = ["BrokerUnavailable", "PublishPass", "Publisher", "outbox_lag"]
