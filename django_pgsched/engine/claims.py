"""A claimed run, its outcome, and calling its job.

The executor keeps one :class:`Claim` per run it holds a lease on; a slot
thread calls :func:`invoke` to run the job and turns what happened into an
:class:`Outcome`. A job's failure is data: every exception (even
``SystemExit``) becomes a failed attempt with its traceback, never a crash.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections

from ..context import RunContext
from ..registry import get_job
from . import failpoints
from .leases import Lease

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 8000


@dataclass
class Claim:
    """A run this replica holds a lease on."""

    run_id: int
    token: uuid.UUID
    attempt: int
    max_attempts: int
    timeout: timedelta
    job: str
    queue: str
    kwargs: dict[str, Any]
    schedule_name: str | None
    scheduled_for: datetime
    idempotency_key: str
    fire_after: datetime
    started_at: datetime
    lease: Lease
    context: RunContext
    # queued -> running [-> overdue] -> done; or released (unstarted, given back),
    # abandoned (lease lost) or interrupted (shutdown gave up on it)
    state: str = "queued"
    started_mono: float | None = None
    # the job's thread is done with it (returned, or never started it)
    returned: bool = False


@dataclass(frozen=True)
class Outcome:
    claim: Claim
    result: str  # attempt status: succeeded, failed, timed_out
    error: str
    duration: float
    retry: bool = True


def invoke(claim: Claim, *, like_a_request: bool) -> tuple[str, str, bool]:
    """Run ``claim``'s job: (attempt status, error text, whether a failure may be retried).

    On a slot thread (``like_a_request``) the job's database connections are
    handled as Django handles a request's: closed if unusable or past
    ``CONN_MAX_AGE`` before and after.
    """
    spec = get_job(claim.job)
    try:
        if like_a_request:
            close_old_connections()
        failpoints.hit("executor.before_job")
        if spec is None:
            return "failed", f"job {claim.job!r} is not registered here", False
        if spec.takes_context:
            spec.func(claim.context, **claim.kwargs)
        else:
            spec.func(**claim.kwargs)
        return "succeeded", "", True
    except BaseException as exc:
        return "failed", format_error(exc), True
    finally:
        if like_a_request:
            try:
                close_old_connections()
            except Exception:  # pragma: no cover
                logger.debug("closing the job's connections failed", exc_info=True)


def clean_text(text: str) -> str:
    return text.replace("\x00", "\\x00")


def format_error(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=20)
    text = "".join(lines)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n…\n" + text[-(MAX_ERROR_CHARS * 3) // 4 :]
    return clean_text(text)
