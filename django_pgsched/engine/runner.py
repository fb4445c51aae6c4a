"""The runner: the only code that sleeps, wakes and stops the loops.

``runscheduler`` builds a :class:`Runner` and calls :meth:`Runner.run`. Each
loop (planner, executor, maintenance) runs its ``run_once()`` on a thread of
its own with its own database connection; a listener thread turns
NOTIFY into wake-ups. Shutdown is two-stage: the first SIGTERM/SIGINT stops
claiming, lets running jobs finish within ``SHUTDOWN_GRACE``, gives back
claimed-but-unstarted runs and returns; a second signal exits 1 at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from types import FrameType

from django.db import DatabaseError, connections

from .. import events
from ..conf import Settings, get_settings
from . import db, failpoints, stranded
from .backoff import Backoff
from .executor import Executor
from .guard import Guard
from .maintenance import Reaper, Retention
from .notifications import SCHEDULE_CHANNEL, WAIT_CHANNEL, Listener
from .planner import Planner, PlanResult
from .ports import PORTS, Transport
from .stranded import Stranded

logger = logging.getLogger(__name__)

LOOPS = ("planner", "executor", "maintenance")
# the longest an idle planner sleeps while the listener is connected (seconds): the
# bound on a change whose notification was lost while the listener seemed connected
PLANNER_IDLE_WAIT = 10.0


@dataclass
class RunnerState:
    """What health checks and metrics read about this replica."""

    started: float = field(default_factory=time.monotonic)
    last_tick: dict[str, float] = field(default_factory=dict)
    clock_skew: float | None = None  # seconds: this replica's clock minus the database's
    errors: dict[str, int] = field(default_factory=dict)
    waiting_for: str = ""  # at start, before the loops: what the replica waits for


class Runner:
    """Runs the chosen loops until :meth:`request_stop` (or a signal)."""

    def __init__(
        self,
        *,
        loops: Sequence[str] = LOOPS,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        settings: Settings | None = None,
        listen: bool | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        # PGSCHED["CLAIMS"] other than "postgres": that transport's runtime, as plugged in
        # at engine/ports.py (the broker's: broker/runtime.py)
        self.broker: Transport | None = None
        transport = self.settings.claims.TRANSPORT
        if transport != "postgres":
            if transport not in PORTS.transports:
                raise ValueError(f"no claim transport {transport!r} is plugged in")
            self.broker = PORTS.transports[transport](self.settings, queues)
        unknown = set(loops) - set(LOOPS)
        if unknown:
            raise ValueError(f"unknown loop(s): {', '.join(sorted(unknown))}")
        self.loops = tuple(loop for loop in LOOPS if loop in loops)
        self.worker_id = worker_id or db.default_worker_id()
        db.set_worker_id(self.worker_id)
        self.stopping = threading.Event()
        self.state = RunnerState()
        self.planner_wake = threading.Event()
        self.listener: Listener | None = None  # set by start() when it listens
        self.planner = Planner(settings=self.settings)
        self.executor = Executor(
            concurrency=concurrency,
            queues=queues,
            worker_id=self.worker_id,
            settings=self.settings,
            shutdown=self.stopping,
            broker=self.broker.claims if self.broker and "executor" in self.loops else None,
        )
        self.reaper = Reaper(settings=self.settings)
        self.guard = Guard(settings=self.settings)
        self.stranded = Stranded(settings=self.settings)
        self.retention = Retention(settings=self.settings)
        # services plugged in at engine/ports.py (month upkeep: partitions/upkeep.py)
        self.services = [make(self.settings) for make in PORTS.maintenance]
        self.listen = self.settings.LISTEN if listen is None else listen
        self._threads: list[threading.Thread] = []
        self._executor_done = threading.Event()

    # -- lifecycle -------------------------------------------------------------------

    def request_stop(self) -> None:
        """First stage of shutdown: stop claiming and planning; running jobs may finish."""
        if not self.stopping.is_set():
            failpoints.hit("runner.on_stop")
            logger.info(
                "stopping: no new claims; waiting up to %ss for running jobs",
                self.settings.SHUTDOWN_GRACE.total_seconds(),
            )
            self.stopping.set()
            self.planner_wake.set()
            self.executor.wake.set()
            if self.broker is not None:
                self.broker.wake.set()

    def start(self) -> None:
        """Start the loop threads and return (tests drive a runner in-process this way)."""
        targets: list[tuple[str, Callable[[], None]]] = []
        if "planner" in self.loops:
            targets.append(("planner", self._planner_loop))
        if "executor" in self.loops:
            self.executor.start_threads()
            targets.append(("executor", self._executor_loop))
        else:
            self._executor_done.set()
        if "maintenance" in self.loops:
            targets.append(("maintenance", self._maintenance_loop))
        publisher_wake: list[threading.Event] = []
        if self.broker is not None and ("planner" in self.loops or "executor" in self.loops):
            self.broker.start()
            broker = self.broker
            targets.append(
                (
                    "publisher",
                    lambda: broker.publisher_loop(self.stopping, partial(self._tick, "publisher")),
                )
            )
            publisher_wake.append(broker.wake)
        if self.listen and ("planner" in self.loops or "executor" in self.loops):
            wakes = {
                SCHEDULE_CHANNEL: [self.planner_wake],
                WAIT_CHANNEL: [self.executor.wake, *publisher_wake],
            }
            listener = Listener(wakes, stop=self.stopping, using=self.settings.DATABASE_ALIAS)
            self.listener = listener
            targets.append(("listener", listener.run))
        for name, target in targets:
            thread = threading.Thread(
                target=self._guard(name, target), name=f"pgsched-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        logger.info(
            "scheduler %s running loops %s (concurrency %d)",
            self.worker_id,
            ",".join(self.loops),
            self.executor.concurrency,
        )

    def wait(self) -> None:
        """Block until stop was requested and the executor drained, then join the loops."""
        while not self.stopping.wait(1.0):
            pass
        grace = self.settings.SHUTDOWN_GRACE.total_seconds()
        if not self._executor_done.wait(grace):
            interrupted = self.executor.abandon_running(
                "interrupted: the replica shut down and the job outlived the "
                f"{grace:g}s grace period"
            )
            logger.warning(
                "%d job(s) still running after the grace period; recording them as failed attempts",
                len(interrupted),
            )
            self.executor.wake.set()
            if not self._executor_done.wait(10.0):
                logger.error("could not record the interrupted runs; their leases will expire")
        for thread in self._threads:
            thread.join(timeout=5.0)
        self.executor.stop_threads(timeout=2.0)
        if self.broker is not None:
            self.broker.close()
        for conn in connections.all(initialized_only=True):
            conn.close()

    def run(self) -> None:
        """Start, wait for a signal, drain, return. Installs SIGTERM/SIGINT handlers."""
        with handle_signals(self.request_stop):
            self.start()
            self.wait()
        logger.info("scheduler %s stopped", self.worker_id)

    # -- loops -----------------------------------------------------------------------

    def _guard(self, name: str, target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except Exception:  # pragma: no cover - a loop must never die silently
                logger.exception("the %s loop crashed; stopping this replica", name)
                self.request_stop()
            finally:
                connections.close_all()

        return run

    def _tick(self, loop: str) -> None:
        self.state.last_tick[loop] = time.monotonic()

    def _failed(self, loop: str, backoff: Backoff) -> float:
        """Count and log a failed pass; returns how long to wait before the next."""
        self.state.errors[loop] = self.state.errors.get(loop, 0) + 1
        wait = backoff.next()
        logger.warning("%s pass failed; retrying in %.1fs", loop, wait, exc_info=True)
        return wait

    def _planner_loop(self) -> None:
        interval = self.settings.PLANNER_INTERVAL.total_seconds()
        backoff = Backoff()
        while not self.stopping.is_set():
            self.planner_wake.clear()
            try:
                before = time.time()
                result = self.planner.run_once()
                after = time.time()
                if result.db_now is not None:
                    self._measure_skew(before, after, result.db_now.timestamp())
                self._tick("planner")
                backoff.reset()
                if result.batch_full:
                    continue
                wait = self._planner_wait(result, interval)
            except Exception:  # database down, a bug, a failpoint: log, back off, go on
                wait = self._failed("planner", backoff)
            self.planner_wake.wait(wait)

    def _planner_wait(self, result: PlanResult, interval: float) -> float:
        """How long the planner sleeps after a pass: ``PLANNER_INTERVAL``; or, when nothing
        was due and the listener is connected, until the next schedule comes within the
        lookahead, at most :data:`PLANNER_IDLE_WAIT` seconds.

        A schedule created, changed, paused or resumed meanwhile notifies
        ``pgsched_schedule`` and wakes the planner at once; the listener's loss (or
        its reconnection, which wakes every loop) brings back the interval.
        """
        listener = self.listener
        if (
            result.schedules
            or result.next_due is None
            or result.db_now is None
            or listener is None
            or not listener.connected.is_set()
        ):
            return interval
        until = result.next_due - self.settings.PLANNER_LOOKAHEAD - result.db_now
        return min(max(interval, until.total_seconds()), max(interval, PLANNER_IDLE_WAIT))

    def _measure_skew(self, before: float, after: float, db_time: float) -> None:
        skew = (before + after) / 2 - db_time
        previous = self.state.clock_skew
        self.state.clock_skew = skew
        limit = self.settings.CLOCK_SKEW_WARNING.total_seconds()
        if abs(skew) > limit and (previous is None or abs(previous) <= limit):
            logger.warning(
                "this replica's clock is %.3fs off the database's; due times follow "
                "the database, but fix NTP on this host",
                skew,
            )

    def _executor_loop(self) -> None:
        backoff = Backoff()
        executor = self.executor
        try:
            while True:
                executor.wake.clear()
                try:
                    executor.run_once()
                    # this replica's jobs, held as advisory locks by this session (stranded.py)
                    stranded.register(
                        connections[self.settings.DATABASE_ALIAS], self.executor.queues
                    )
                    self._tick("executor")
                    backoff.reset()
                    wait = executor.seconds_until_next_pass()
                except Exception:
                    wait = self._failed("executor", backoff)
                if self.stopping.is_set():
                    try:
                        executor.release_unstarted()
                    except DatabaseError:
                        logger.warning(
                            "could not release unstarted runs; leases will expire", exc_info=True
                        )
                    if executor.drained():
                        return
                    wait = min(wait, 0.2)
                executor.wake.wait(wait)
        finally:
            executor.lease_sessions.close()
            self._executor_done.set()

    def _maintenance_loop(self) -> None:
        reap_every = self.settings.REAPER_INTERVAL.total_seconds()
        retain_every = self.settings.RETENTION_INTERVAL.total_seconds()
        next_reap = next_retention = time.monotonic()
        maintenance_backoff = Backoff(
            first=1.0, cap=1.0
        )  # its own passes are rare: retry each second
        while not self.stopping.is_set():
            now = time.monotonic()
            try:
                if now >= next_reap:
                    self.reaper.run_once()
                    self.guard.run_once()
                    next_reap = now + reap_every
                if now >= next_retention:
                    for service in self.services:  # the months ahead, before the old ones go
                        service.run_once()
                    self.retention.run_once()
                    self.stranded.run_once()
                    next_retention = now + retain_every
                self._tick("maintenance")
                events.loop_ticked.send(sender=type(self), loop="maintenance")
            except Exception:
                wait = self._failed("maintenance", maintenance_backoff)
                next_reap = next_retention = time.monotonic() + wait
            else:
                maintenance_backoff.reset()
            self.stopping.wait(max(0.0, min(next_reap, next_retention) - time.monotonic()))


@contextmanager
def handle_signals(on_first: Callable[[], None]) -> Iterator[None]:
    """First SIGTERM/SIGINT calls ``on_first``; a second one exits 1 at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 1:
            logger.warning("second signal: exiting at once")
            os._exit(1)
        on_first()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
