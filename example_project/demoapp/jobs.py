"""The demo's jobs: one fast, one slow, one that fails sometimes."""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta
from typing import Any

from django_pgsched import RunContext, job

logger = logging.getLogger(__name__)


@job(name="demo.heartbeat")
def heartbeat(**kwargs: Any) -> None:
    """Fast: logs a line."""
    logger.info("heartbeat")


@job(name="demo.slow_report", takes_context=True, timeout=timedelta(seconds=30))
def slow_report(context: RunContext, seconds: float = 3.0, **kwargs: Any) -> None:
    """Slow: works for a few seconds, stopping early if the run is cancelled."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if context.is_cancelled():
            logger.info("report for %s stopped: %s", context.scheduled_for, context.cancel_reason)
            return
        time.sleep(0.1)
    logger.info("report for %s done (attempt %d)", context.scheduled_for, context.attempt)


@job(name="demo.flaky_sync", takes_context=True, max_attempts=3)
def flaky_sync(context: RunContext, **kwargs: Any) -> None:
    """Fails about one time in three; retried with backoff, deduplicated by idempotency key."""
    if random.random() < 0.33:
        raise ConnectionError(f"upstream unavailable (key {context.idempotency_key})")
    logger.info("synced %s", context.idempotency_key)


@job(name="demo.greet")
def greet(name: str = "world", **kwargs: Any) -> None:
    """For schedules you create in the admin: takes a ``name`` kwarg."""
    logger.info("hello, %s", name)
