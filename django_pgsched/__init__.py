"""django-pgsched: leaderless cron and interval scheduling for Django on PostgreSQL."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .context import RunContext
from .outcomes import Defer, Fail, LeaseLost
from .registry import job

if TYPE_CHECKING:
    from .models import JobRun

try:
    __version__ = version("django-pgsched")
except PackageNotFoundError:  # pragma: no cover - running from a plain checkout
    __version__ = "0+unknown"

__all__ = [
    "Defer",
    "Fail",
    "LeaseLost",
    "RunContext",
    "__version__",
    "backfill",
    "enqueue",
    "job",
    "pause",
    "resume",
]


def pause(name: Any, *, reason: str = "", tenant: str = "") -> Any:
    """Pause a schedule (by name, of ``tenant``) with a reason: see
    :func:`django_pgsched.api.pause`; a whole tenant: :func:`django_pgsched.tenants.pause`."""
    from .api import pause as _pause

    return _pause(name, reason=reason, tenant=tenant)


def resume(name: Any, *, tenant: str = "") -> Any:
    """Resume a schedule (by name, of ``tenant``): see :func:`django_pgsched.api.resume`."""
    from .api import resume as _resume

    return _resume(name, tenant=tenant)


def enqueue(
    job_name: str, *, kwargs: dict[str, Any] | None = None, run_at: Any = None, **options: Any
) -> JobRun:
    """Create a one-off run of a registered job (see :func:`django_pgsched.api.enqueue`)."""
    from .api import enqueue as _enqueue

    return _enqueue(job_name, kwargs=kwargs, run_at=run_at, **options)


def backfill(
    schedule_name: str, start: Any, end: Any, *, limit: int | None = None, **options: Any
) -> int:
    """Create the runs of a schedule's past occurrences in ``[start, end)`` that have none.

    Returns how many it created (see :func:`django_pgsched.ledger.backfill.backfill`).
    """
    from .ledger.backfill import backfill as _backfill

    return _backfill(schedule_name, start, end, limit=limit, **options)
