"""The job registry: ``@job`` and discovery of each installed app's ``jobs`` module.

Schedules and runs name a job by its registered name. Nothing is ever imported
from a dotted path stored in the database or typed into the admin: a name that
is not in this registry is rejected when the schedule is validated and fails
the run (without retries) if it reaches the executor anyway.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, overload

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.module_loading import autodiscover_modules

from .limits import MAX_ATTEMPTS, MAX_TIMEOUT, MIN_TIMEOUT

if TYPE_CHECKING:
    from .conf import Settings

JOB_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:<>\-]{0,199}$")
QUEUE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class JobSpec:
    """A registered job and its defaults (a schedule or run may override them)."""

    name: str
    func: Callable[..., Any]
    timeout: timedelta | None = None
    max_attempts: int | None = None
    queue: str | None = None
    takes_context: bool = False
    #: ``check(kwargs, timeout) -> kwargs``: the job's own check of a schedule's or
    #: run's kwargs (raises ``ValidationError``); ``timeout`` is the run's, if known.
    check_kwargs: Callable[[dict[str, Any], timedelta | None], dict[str, Any]] | None = None
    # Runs the claimed run itself instead of ``func(**kwargs)`` and returns the JSON text of
    # what to record as the run's return value (django.tasks' tasks, django_pgsched.tasks).
    runner: Callable[[Any], str | None] | None = None
    # claim order among due runs (-100..100, higher first): a django.tasks task's priority
    priority: int = 0

    def checked_kwargs(
        self, kwargs: dict[str, Any], timeout: timedelta | None, *, tenant: str
    ) -> dict[str, Any]:
        """``kwargs`` through the job's ``check_kwargs``, if it has one; a check that takes
        a ``tenant`` keyword is told the schedule's or run's tenant."""
        if self.check_kwargs is None:
            return kwargs
        if _takes_tenant(self.check_kwargs):
            return self.check_kwargs(kwargs, timeout, tenant=tenant)  # type: ignore[call-arg]
        return self.check_kwargs(kwargs, timeout)


def _takes_tenant(check: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(check).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "tenant" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in parameters
    )


_registry: dict[str, JobSpec] = {}


def validate_job_name(name: object) -> str:
    if not isinstance(name, str) or not JOB_NAME_RE.match(name):
        raise ValidationError(
            f"job: {name!r} is not a valid job name "
            "(letters, digits, _ . : - < >; at most 200 characters)",
            code="job_name",
        )
    return name


def validate_queue(queue: object) -> str:
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        raise ValidationError(
            f"queue: {queue!r} is not a valid queue name "
            "(letters, digits, _ . : -; 1 to 100 characters)",
            code="queue_name",
        )
    return queue


def validate_timeout(timeout: object, field: str = "timeout") -> timedelta:
    if not isinstance(timeout, timedelta):
        raise ValidationError(f"{field}: expected a timedelta, got {timeout!r}", code="timeout")
    if timeout < MIN_TIMEOUT or timeout > MAX_TIMEOUT:
        raise ValidationError(
            f"{field}: must be between {MIN_TIMEOUT.total_seconds():g} second and "
            f"{MAX_TIMEOUT.days} days, got {timeout}",
            code="timeout",
        )
    return timeout


def validate_max_attempts(value: object, field: str = "max_attempts") -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_ATTEMPTS:
        raise ValidationError(
            f"{field}: must be an integer from 1 to {MAX_ATTEMPTS}, got {value!r}",
            code="max_attempts",
        )
    return value


def register(spec: JobSpec) -> JobSpec:
    existing = _registry.get(spec.name)
    if existing is not None and existing.func is not spec.func:
        same_code = getattr(existing.func, "__module__", None) == getattr(
            spec.func, "__module__", None
        ) and getattr(existing.func, "__qualname__", None) == getattr(
            spec.func, "__qualname__", None
        )
        if not same_code:  # a module reloaded (autoreload, tests) may re-register itself
            raise ImproperlyConfigured(
                f"job name {spec.name!r} is registered twice: by "
                f"{existing.func.__module__}.{existing.func.__qualname__} and "
                f"{spec.func.__module__}.{spec.func.__qualname__}"
            )
    _registry[spec.name] = spec
    return spec


@overload
def job(func: F, /) -> F: ...


@overload
def job(
    *,
    name: str | None = None,
    timeout: timedelta | None = None,
    max_attempts: int | None = None,
    queue: str | None = None,
    takes_context: bool = False,
    check_kwargs: Callable[[dict[str, Any], timedelta | None], dict[str, Any]] | None = None,
) -> Callable[[F], F]: ...


def job(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    timeout: timedelta | None = None,
    max_attempts: int | None = None,
    queue: str | None = None,
    takes_context: bool = False,
    check_kwargs: Callable[[dict[str, Any], timedelta | None], dict[str, Any]] | None = None,
) -> F | Callable[[F], F]:
    """Register a function as a job.

    ``@job`` names it ``"<module>.<qualname>"``; ``@job(name=..., timeout=...,
    max_attempts=..., queue=..., takes_context=...)`` sets its name and defaults.
    With ``takes_context=True`` the function receives a
    :class:`~django_pgsched.context.RunContext` as its first argument.
    ``check_kwargs(kwargs, timeout)`` checks the kwargs of its schedules and
    runs wherever they are defined (admin, settings, ``full_clean()``,
    ``enqueue()``): raise ``ValidationError``, or return the kwargs. A check that
    also takes a ``tenant`` keyword is given the schedule's or run's tenant.
    """

    def decorate(f: F) -> F:
        if not callable(f):
            raise TypeError(f"@job expects a function, got {f!r}")
        job_name = name if name is not None else f"{f.__module__}.{f.__qualname__}"
        try:
            validate_job_name(job_name)
            if timeout is not None:
                validate_timeout(timeout)
            if max_attempts is not None:
                validate_max_attempts(max_attempts)
            if queue is not None:
                validate_queue(queue)
        except ValidationError as exc:
            raise ImproperlyConfigured(f"@job on {f.__qualname__}: {exc.messages[0]}") from None
        if takes_context:
            params = list(inspect.signature(f).parameters.values())
            if not params or params[0].kind not in (
                inspect.Parameter.POSITIONAL_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ):
                raise ImproperlyConfigured(
                    f"@job(takes_context=True) on {f.__qualname__}: the function must take the "
                    "run context as its first positional argument"
                )
        spec = register(
            JobSpec(job_name, f, timeout, max_attempts, queue, takes_context, check_kwargs)
        )
        f.job_spec = spec  # type: ignore[attr-defined]
        return f

    if func is not None:
        return decorate(func)
    return decorate


def get_job(name: str) -> JobSpec | None:
    return _registry.get(name)


@dataclass(frozen=True)
class JobDefaults:
    """What a run of a job gets when its schedule (or ``enqueue()``) leaves it empty."""

    queue: str
    max_attempts: int
    timeout: timedelta
    priority: int = 0


def job_defaults(job: JobSpec | str | None, settings: Settings) -> JobDefaults:
    """A job's queue, max_attempts and timeout: its ``@job`` options, else the settings.

    The one place these defaults are resolved: the planner (for a schedule's
    runs) and ``enqueue()`` (for one-off runs) both ask here. A job that is not
    registered in this process gets the settings' defaults.
    """
    spec = get_job(job) if isinstance(job, str) else job
    return JobDefaults(
        queue=(spec.queue if spec else None) or settings.DEFAULT_QUEUE,
        max_attempts=(spec.max_attempts if spec else None) or settings.DEFAULT_MAX_ATTEMPTS,
        timeout=(spec.timeout if spec else None) or settings.DEFAULT_TIMEOUT,
        priority=spec.priority if spec else 0,
    )


def require_job(name: object, field: str = "job") -> JobSpec:
    """The registered job called ``name``, or a ``ValidationError`` naming the field."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"{field}: a registered job name is required", code="job_required")
    spec = _registry.get(name)
    if spec is None:
        known = ", ".join(sorted(_registry)[:20]) or "none are registered"
        raise ValidationError(
            f"{field}: unknown job {name!r} (registered jobs: {known})", code="job_unknown"
        )
    return spec


def all_jobs() -> dict[str, JobSpec]:
    return dict(_registry)


def autodiscover() -> None:
    """Import the ``jobs`` module of every installed app (like admin autodiscovery)."""
    autodiscover_modules("jobs")
