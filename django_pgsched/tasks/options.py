"""The backend's ``OPTIONS``: what a task's run gets where django.tasks has no word for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from ..registry import validate_max_attempts, validate_timeout

KNOWN = ("MAX_ATTEMPTS", "TIMEOUT")


@dataclass(frozen=True)
class Options:
    """``TASKS[alias]["OPTIONS"]`` of a :class:`~django_pgsched.tasks.PgschedBackend`.

    ``None`` means the scheduler's default (``PGSCHED["DEFAULT_MAX_ATTEMPTS"]``,
    ``PGSCHED["DEFAULT_TIMEOUT"]``), read when a task is enqueued.
    """

    MAX_ATTEMPTS: int | None = None
    TIMEOUT: timedelta | None = None


def parse(alias: str, raw: Any) -> Options:
    """Validate ``raw``; ``ValueError`` names the alias, the key and the value."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(KNOWN))
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(KNOWN)}"
        )
    values: dict[str, Any] = {}
    try:
        if raw.get("MAX_ATTEMPTS") is not None:
            values["MAX_ATTEMPTS"] = validate_max_attempts(raw["MAX_ATTEMPTS"], "MAX_ATTEMPTS")
        timeout = raw.get("TIMEOUT")
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            try:
                timeout = timedelta(seconds=timeout)
            except (ValueError, OverflowError):
                raise ValueError(f"{where}: TIMEOUT: {timeout!r} is not a duration") from None
        if timeout is not None:
            values["TIMEOUT"] = validate_timeout(timeout, "TIMEOUT")
    except ValidationError as exc:
        raise ValueError(f"{where}: {exc.messages[0]}") from None
    return Options(**values)
