"""The checks a schedule's or a run's fields go through, shared by every way in.

``Schedule.clean()`` (the ORM's ``full_clean()``, the admin, the tenant
schedule API, ``PGSCHED["SCHEDULES"]``) and :func:`django_pgsched.api.enqueue`
check the same fields the same way: each check adds its messages, by field, to
one :class:`Problems`, and every problem found is raised together in one
``ValidationError`` (each message names its field and the value it refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError

from .conf import Settings
from .payload import validate_kwargs
from .registry import JobSpec, validate_max_attempts, validate_queue, validate_timeout
from .tenants import validate_tenant
from .timing.timetable import TimetableError


class Problems:
    """Messages by field, gathered from every check before one ``ValidationError``."""

    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_field)

    def add(self, field: str, problem: ValidationError | TimetableError | str) -> None:
        if isinstance(problem, ValidationError):
            messages = problem.messages
        else:
            messages = [str(problem)]
        self.by_field.setdefault(field, []).extend(messages)

    def add_all(self, exc: ValidationError) -> None:
        """Every message of ``exc``, under its own field (a dict ``ValidationError``)."""
        for field, messages in exc.message_dict.items():
            self.by_field.setdefault(field, []).extend(messages)

    def check(self, field: str, check: Callable[..., Any], *args: Any) -> Any:
        """``check(*args)``'s result; ``None`` and its messages under ``field`` if it refused."""
        try:
            return check(*args)
        except (ValidationError, TimetableError) as exc:
            self.add(field, exc)
            return None

    def raise_any(self) -> None:
        if self.by_field:
            raise ValidationError(self.by_field)


def job_kwargs(
    problems: Problems,
    spec: JobSpec | None,
    kwargs: Any,
    *,
    timeout: Any,
    tenant: Any,
    settings: Settings,
) -> Any:
    """``kwargs`` as stored: within the payload bounds, then as the job checks them.

    ``timeout`` is the run's own (a ``timedelta``) or anything else for the job's
    default; the job's check (``pgsched.http``'s, for one) may depend on it and on
    the tenant. Without a ``spec`` (an unknown job) only the payload bounds apply.
    On a refusal the messages go under ``kwargs`` and ``kwargs`` is returned as given.
    """
    try:
        clean = validate_kwargs(
            kwargs, max_bytes=settings.MAX_PAYLOAD_BYTES, max_depth=settings.MAX_PAYLOAD_DEPTH
        )
        if spec is not None:
            run_timeout = timeout if isinstance(timeout, timedelta) else spec.timeout
            clean = spec.checked_kwargs(
                clean,
                run_timeout or settings.DEFAULT_TIMEOUT,
                tenant=tenant if isinstance(tenant, str) else "",
            )
    except ValidationError as exc:
        problems.add("kwargs", exc)
        return kwargs
    return clean


#: The options a schedule and a one-off run share, each with its check (``None``: the default).
RUN_OPTIONS: Mapping[str, Callable[[Any], Any]] = {
    "max_attempts": validate_max_attempts,
    "timeout": validate_timeout,
    "queue": validate_queue,
}


def run_options(problems: Problems, values: Mapping[str, Any]) -> None:
    """Check each of :data:`RUN_OPTIONS` given in ``values`` and not ``None``."""
    for field, validator in RUN_OPTIONS.items():
        value = values.get(field)
        if value is not None:
            problems.check(field, validator, value)


def tenant(problems: Problems, value: Any) -> None:
    problems.check("tenant", validate_tenant, value)


def choice(problems: Problems, field: str, value: Any, choices: list[str]) -> None:
    """``value`` is one of ``choices``, else a message that lists them."""
    if value not in choices:
        problems.add(field, f"{field}: {value!r} is not one of {', '.join(choices)}")
