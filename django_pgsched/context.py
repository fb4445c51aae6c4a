"""The run context a job receives with ``@job(takes_context=True)``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .outcomes import LeaseLost

logger = logging.getLogger(__name__)


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
    tenant: str = ""
    #: What the job wants kept with this attempt (a JSON object, stored on its
    #: ``Attempt.detail``): ``pgsched.http`` records its evidence here.
    detail: dict[str, Any] = field(default_factory=dict)
    # set by the executor: re-assert the lease (a fenced renewal), raise LeaseLost if gone
    _lease_check: Callable[[float], None] | None = field(default=None, repr=False)
    _cancel_hooks: list[Callable[[str], None]] = field(default_factory=list, repr=False)
    # a flag, not a threading.Event: nothing waits on it, and building an Event (a
    # Condition and a lock) per claim was about 5 % of the executor's samples under
    # py-spy --gil (bench.passes --concurrency 32)
    _cancelled: bool = field(default=False, repr=False)
    _shutdown: threading.Event | None = field(default=None, repr=False)
    _reason: str = field(default="", repr=False)
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def is_cancelled(self) -> bool:
        """True once the job should stop: lease lost, timed out, cancelled, or shutting down."""
        return (
            self._cancelled
            or (self._shutdown is not None and self._shutdown.is_set())
            or self._clock() >= self.deadline
        )

    @property
    def cancel_reason(self) -> str:
        if self._cancelled:
            return self._reason
        if self._shutdown is not None and self._shutdown.is_set():
            return "the replica is shutting down"
        if self._clock() >= self.deadline:
            return "the timeout passed"
        return ""

    def cancel(self, reason: str) -> None:
        if not self._cancelled:
            self._reason = reason
            self._cancelled = True
            for hook in list(self._cancel_hooks):
                try:
                    hook(reason)
                except Exception:
                    logger.exception("a cancel hook of run %s failed", self.job_run_id)

    def on_cancel(self, hook: Callable[[str], None]) -> Callable[[], None]:
        """Call ``hook(reason)`` when the run is cancelled (lease lost, timeout, operator).

        For work that blocks: an HTTP request registers a hook that closes its
        connection. Called at once if the run is already cancelled. Returns a
        function that removes the hook.
        """
        self._cancel_hooks.append(hook)
        if self._cancelled:
            hook(self._reason)

        def remove() -> None:
            if hook in self._cancel_hooks:
                self._cancel_hooks.remove(hook)

        return remove

    def ensure_lease(self, needed: float = 0.0) -> None:
        """Re-assert ownership of the run now; raise :class:`LeaseLost` if it is gone.

        A fenced renewal in the database (the run is still ours, under the same
        lease token) that also checks this replica can trust the lease for
        ``needed`` more seconds. Call it just before an effect that must not
        happen twice, such as a request leaving: a run reaped a moment ago is
        then not delivered by this replica.
        """
        if self.is_cancelled():
            raise LeaseLost(self.cancel_reason or "cancelled")
        if self._lease_check is not None:
            self._lease_check(needed)

    @property
    def is_retry(self) -> bool:
        return self.attempt > 1
