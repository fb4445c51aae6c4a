"""The one module that talks to NATS JetStream (``nats-py``, asyncio) for the sync engine.

:class:`NatsBroker` runs an asyncio loop on a daemon thread of its own and
offers blocking calls with timeouts to the engine's threads: publish a batch
and wait for the stream's acknowledgements, fetch at most ``n`` messages, ack.
It keeps itself connected: a first connection that fails, a lost connection,
a stream that went missing are retried in the background; meanwhile
:attr:`NatsBroker.available` is False and the engine claims with ``SKIP
LOCKED`` (``consumer.py``). Nothing here decides anything about a run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from .messages import queue_filter, token
from .settings import ClaimsSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ACK_PENDING = 100_000  # messages delivered and not yet acknowledged, per consumer
# a message fetched beyond a batch and not handed out this long after is given back, so a
# replica whose slots stay busy does not sit on runs another replica could start
SPARE_TTL = 0.5


class BrokerUnavailable(RuntimeError):
    """The broker cannot be used now (not connected, or a request failed)."""


@dataclass(frozen=True)
class Publication:
    subject: str
    msg_id: str
    data: bytes


@dataclass(frozen=True)
class Delivered:
    """A message fetched from the stream (``handle`` is nats-py's, for :meth:`NatsBroker.ack`)."""

    data: bytes
    subject: str
    redelivered: bool
    handle: Any


def durable_name(queue: str | None) -> str:
    """The durable consumer executors of ``queue`` share (``None``: every queue)."""
    if queue is None:
        return "pgsched_all"
    return "pgsched_q_" + token(queue).replace("%", "~")


class NatsBroker:
    """A connection to JetStream, kept alive, with blocking calls for the engine's threads."""

    def __init__(self, settings: ClaimsSettings, queues: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.queues: list[str | None] = list(queues) if queues else [None]
        self.timeout = settings.TIMEOUT.total_seconds()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="pgsched-nats", daemon=True)
        self._nc: Any = None
        self._js: Any = None
        self._subs: list[Any] = []
        self._ready = False  # connected, stream and consumers in place
        self._closing = False
        self._keeper: Future[None] | None = None
        self._next_sub = 0
        self.last_error = ""
        self.duplicates = 0  # publications the stream had stored already (dropped as repeats)
        self._spare: list[Any] = []  # delivered beyond a batch: handed out first next time
        self._tasks: set[asyncio.Future[None]] = set()  # give-backs under way

    # -- lifecycle ------------------------------------------------------------------

    def start(self, wait: float = 0.0) -> NatsBroker:
        """Start connecting (in the background); wait up to ``wait`` seconds for readiness."""
        self._thread.start()
        self._keeper = asyncio.run_coroutine_threadsafe(self._keep(), self._loop)
        if wait:
            self.wait_ready(wait)
        return self

    def wait_ready(self, timeout: float) -> bool:
        deadline = self._loop.time() + timeout
        while not self.available and self._loop.time() < deadline:
            threading.Event().wait(0.05)
        return self.available

    def close(self) -> None:
        self._closing = True
        if self._keeper is not None:
            self._keeper.cancel()
        if self._spare and self._thread.is_alive():
            try:  # hand the messages fetched beyond a batch back for redelivery now
                self._call(self._nak(self._delivered(self._spare)), self.timeout)
            except Exception:
                logger.debug("giving spare messages back failed", exc_info=True)
            self._spare = []
        if self._nc is not None and self._thread.is_alive():
            try:
                self._call(self._nc.close(), self.timeout)
            except Exception:
                logger.debug("closing the NATS connection failed", exc_info=True)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if not self._loop.is_running():
            self._loop.close()

    @property
    def available(self) -> bool:
        """Connected, with the stream and consumers in place: claims may go through it."""
        return self._ready and self._nc is not None and self._nc.is_connected

    # -- the engine's calls ---------------------------------------------------------

    def publish(self, items: Sequence[Publication]) -> list[bool]:
        """Publish ``items`` and wait for the stream; which ones it acknowledged (stored)."""
        if not self.available:
            raise BrokerUnavailable(self.last_error or "not connected")
        return self._call(self._publish(items), self.timeout * 2)

    def fetch(self, batch: int, wait: float) -> list[Delivered]:
        """At most ``batch`` messages, waiting up to ``wait`` seconds for the first."""
        if not self.available:
            raise BrokerUnavailable(self.last_error or "not connected")
        return self._call(self._fetch(batch, wait), wait + self.timeout)

    def ack(self, messages: Sequence[Delivered]) -> None:
        """Acknowledge ``messages`` (sent without waiting: a lost ack is a redelivery)."""
        if messages:
            asyncio.run_coroutine_threadsafe(self._ack(messages), self._loop)

    def nak(self, messages: Sequence[Delivered]) -> None:
        """Give ``messages`` back for redelivery now (a pass that pulled them failed)."""
        if messages:
            asyncio.run_coroutine_threadsafe(self._nak(messages), self._loop)

    def stream_info(self) -> Any:
        return self._call(self._js.stream_info(self.settings.STREAM), self.timeout * 2)

    # -- on the loop ------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError as exc:
            future.cancel()
            raise BrokerUnavailable(f"no answer from the broker in {timeout:g}s") from exc

    async def _keep(self) -> None:
        """Connect, put the stream and consumers in place, and do it again when they are lost."""
        import nats

        while not self._closing:
            try:
                if self._nc is None:
                    self._nc = await nats.connect(
                        servers=list(self.settings.NATS_URL),
                        connect_timeout=max(1, round(self.timeout)),
                        allow_reconnect=True,
                        max_reconnect_attempts=-1,
                        reconnect_time_wait=0.5,
                        ping_interval=2,
                        max_outstanding_pings=2,
                        error_cb=self._on_error,
                        disconnected_cb=self._on_disconnected,
                        reconnected_cb=self._on_reconnected,
                    )
                    self._js = self._nc.jetstream(timeout=self.timeout)
                if self._nc.is_connected and not self._ready:
                    await self._prepare()
                    self._ready = True
                    self.last_error = ""
                    logger.info("claims: the broker is ready (stream %s)", self.settings.STREAM)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._ready = False
                if str(exc) != self.last_error:
                    logger.warning("claims: the broker is not usable: %s", exc)
                self.last_error = str(exc) or type(exc).__name__
            await asyncio.sleep(0.5)

    async def _prepare(self) -> None:
        from nats.js import api
        from nats.js.errors import NotFoundError

        s = self.settings
        try:
            await self._js.stream_info(s.STREAM)
        except NotFoundError:
            await self._js.add_stream(
                api.StreamConfig(
                    name=s.STREAM,
                    subjects=[f"{s.SUBJECT_PREFIX}.>"],
                    retention=api.RetentionPolicy.LIMITS,
                    storage=api.StorageType.FILE,
                    num_replicas=s.STREAM_REPLICAS,
                    max_age=s.MAX_AGE.total_seconds(),
                    duplicate_window=s.DUPLICATE_WINDOW.total_seconds(),
                )
            )
            logger.info("claims: created the stream %s", s.STREAM)
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:
                logger.debug("dropping an old subscription failed", exc_info=True)
        self._subs = []
        for queue in self.queues:
            config = api.ConsumerConfig(
                durable_name=durable_name(queue),
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=s.ACK_WAIT.total_seconds(),
                max_deliver=-1,
                max_ack_pending=MAX_ACK_PENDING,
                filter_subject=queue_filter(s.SUBJECT_PREFIX, queue),
                num_replicas=0,
            )
            self._subs.append(
                await self._js.pull_subscribe(
                    queue_filter(s.SUBJECT_PREFIX, queue),
                    durable=durable_name(queue),
                    stream=s.STREAM,
                    config=config,
                )
            )

    async def _publish(self, items: Sequence[Publication]) -> list[bool]:
        futures = []
        for item in items:
            futures.append(
                asyncio.ensure_future(
                    self._js.publish(
                        item.subject,
                        item.data,
                        timeout=self.timeout,
                        stream=self.settings.STREAM,
                        headers={"Nats-Msg-Id": item.msg_id},
                    )
                )
            )
        results = await asyncio.gather(*futures, return_exceptions=True)
        self.duplicates += sum(1 for r in results if getattr(r, "duplicate", False))
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            self.last_error = f"publish failed: {failures[0]!r}"
            if not self._nc.is_connected:
                self._ready = False
        return [not isinstance(r, BaseException) for r in results]

    async def _fetch(self, batch: int, wait: float) -> list[Delivered]:
        from nats.errors import TimeoutError as NatsTimeout

        got, self._spare = self._spare[:batch], self._spare[batch:]
        if len(got) == batch:
            return self._delivered(got)
        subs = self._subs
        start = self._next_sub = (self._next_sub + 1) % len(subs)
        order = subs[start:] + subs[:start]
        for index, sub in enumerate(order):
            if len(got) >= batch:
                break
            # with several queues, only the last consumer asked may wait
            timeout = wait if index == len(order) - 1 and not got else 0.001
            try:
                got += await sub.fetch(batch - len(got), timeout=max(timeout, 0.001))
            except (TimeoutError, NatsTimeout):
                continue
            except Exception as exc:
                self.last_error = f"fetch failed: {exc!r}"
                if not self._nc.is_connected or "consumer" in str(exc).lower():
                    self._ready = False  # e.g. the stream or consumer was deleted: prepare again
                raise BrokerUnavailable(self.last_error) from exc
        if len(got) > batch:
            # nats-py hands over every message already buffered for the subscription (the
            # late answers to an earlier pull), beyond the batch asked for: keep those for
            # the next fetch, or the executor would claim more runs than it has idle slots.
            # (Giving them back instead made a storm of redeliveries into the same buffer.)
            got, extra = got[:batch], got[batch:]
            self._spare.extend(extra)
            self._loop.call_later(SPARE_TTL, self._give_back_spares, extra)
        return self._delivered(got)

    def _give_back_spares(self, spares: list[Any]) -> None:
        """On the loop: give back those of ``spares`` still not handed out."""
        stale = {id(m) for m in spares}
        back = [m for m in self._spare if id(m) in stale]
        if back:
            self._spare = [m for m in self._spare if id(m) not in stale]
            task = asyncio.ensure_future(self._nak(self._delivered(back)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _delivered(got: list[Any]) -> list[Delivered]:
        return [
            Delivered(
                data=msg.data,
                subject=msg.subject,
                redelivered=msg.metadata.num_delivered > 1,
                handle=msg,
            )
            for msg in got
        ]

    async def _ack(self, messages: Sequence[Delivered]) -> None:
        for message in messages:
            try:
                await message.handle.ack()
            except Exception:
                logger.debug("acknowledging a message failed", exc_info=True)

    async def _nak(self, messages: Sequence[Delivered]) -> None:
        for message in messages:
            try:
                await message.handle.nak()
            except Exception:
                logger.debug("giving a message back failed", exc_info=True)

    async def _on_error(self, exc: Exception) -> None:
        self.last_error = repr(exc)

    async def _on_disconnected(self) -> None:
        logger.warning("claims: disconnected from the broker")

    async def _on_reconnected(self) -> None:
        logger.info("claims: reconnected to the broker")
        self._ready = False  # check the stream and consumers again (a new cluster may lack them)
