"""The run context a job receives with ``@job(takes_context=True)``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class RunContext:
    """What a job knows about the run it is executing.

    ``idempotency_key`` is the same for every attempt of a run: use it to drop
    repeats, because execution is at-least-once. Long jobs should poll
    :meth:`is_cancelled` and stop early when it turns true: the lease was lost,
    the timeout passed, the run was cancelled, or the replica is shutting down.
    """

    job_run_id: int
    job: str
    schedule_name: str | None
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    idempotency_key: str
    worker: str
    deadline: float = float("inf")  # time.monotonic() value of the timeout
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    _shutdown: threading.Event | None = field(default=None, repr=False)
    _reason: str = field(default="", repr=False)
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def is_cancelled(self) -> bool:
        """True once the job should stop: lease lost, timed out, cancelled, or shutting down."""
        return (
            self._cancelled.is_set()
            or (self._shutdown is not None and self._shutdown.is_set())
            or self._clock() >= self.deadline
        )

    @property
    def cancel_reason(self) -> str:
        if self._cancelled.is_set():
            return self._reason
        if self._shutdown is not None and self._shutdown.is_set():
            return "the replica is shutting down"
        if self._clock() >= self.deadline:
            return "the timeout passed"
        return ""

    def cancel(self, reason: str) -> None:
        if not self._cancelled.is_set():
            self._reason = reason
            self._cancelled.set()

    @property
    def is_retry(self) -> bool:
        return self.attempt > 1
