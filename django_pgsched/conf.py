"""The one place that reads ``settings.PGSCHED``.

Every key has a default here; ``docs/reference/settings.md`` documents each one.
Durations may be given as a ``timedelta`` or as a number of seconds.
An unknown key or a bad value is reported by the system check ``pgsched.E003``
and makes :func:`get_settings` raise :class:`ImproperlyConfigured`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache, cached_property
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from .broker.settings import ClaimsSettings, build_claims_settings
from .delivery.settings import HttpSettings, build_http_settings
from .limits import MAX_ATTEMPTS, MAX_BACKFILL, MAX_CATCH_UP_LIMIT
from .statuses import MisfirePolicy

MISFIRE_POLICIES: tuple[str, ...] = tuple(MisfirePolicy.values)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Typed, defaulted view of ``settings.PGSCHED``."""

    DATABASE_ALIAS: str = "default"

    # planner
    PLANNER_INTERVAL: timedelta = timedelta(seconds=1)
    PLANNER_LOOKAHEAD: timedelta = timedelta(seconds=30)
    PLANNER_BATCH: int = 500
    MISFIRE_GRACE: timedelta = timedelta(seconds=60)
    DEFAULT_MISFIRE_POLICY: str = MisfirePolicy.LATEST.value
    DEFAULT_CATCH_UP_LIMIT: int = 10

    # executor
    CONCURRENCY: int = 4
    EXECUTOR_POLL_INTERVAL: timedelta = timedelta(seconds=5)
    DEFAULT_TIMEOUT: timedelta = timedelta(minutes=5)
    DEFAULT_MAX_ATTEMPTS: int = 3
    DEFAULT_QUEUE: str = "default"
    LEASE_FACTOR: float = 2.0
    LEASE_TRUST_MARGIN: timedelta = timedelta(seconds=1)
    RETRY_BACKOFF_BASE: timedelta = timedelta(seconds=2)
    RETRY_BACKOFF_MAX: timedelta = timedelta(hours=1)
    SHUTDOWN_GRACE: timedelta = timedelta(seconds=25)
    # the furthest a job's Defer may push its run (django_pgsched.outcomes.Defer)
    DEFER_MAX: timedelta = timedelta(days=1)
    # a slot thread keeps its job's database connection at least this long (the longer
    # of this and CONN_MAX_AGE; None: CONN_MAX_AGE alone, as for a request)
    JOB_CONNECTION_MAX_AGE: timedelta | None = timedelta(seconds=60)

    # maintenance
    REAPER_INTERVAL: timedelta = timedelta(seconds=5)
    REAPER_BATCH: int = 500
    RETENTION: timedelta | None = timedelta(days=30)
    RETENTION_INTERVAL: timedelta = timedelta(minutes=1)
    RETENTION_BATCH: int = 1000
    # a run no live replica can execute for this long is stranded (engine/stranded.py)
    STRANDED_GRACE: timedelta = timedelta(minutes=10)
    # partitions of the run history (django_pgsched.partitions): months made ahead of
    # the current one, and whether retention keeps a detached month instead of dropping it
    PARTITIONS_AHEAD: int = 3
    RETENTION_KEEP_DETACHED: bool = False

    # backfill, overlap and start deadlines (django_pgsched.ledger)
    BACKFILL_LIMIT: int = 1000

    # connections of the scheduler's own loops
    LOCK_TIMEOUT: timedelta = timedelta(seconds=5)
    STATEMENT_TIMEOUT: timedelta = timedelta(seconds=60)
    IDLE_IN_TRANSACTION_TIMEOUT: timedelta = timedelta(seconds=60)
    LISTEN: bool = True
    # server-side prepared statements on the scheduler's own connections (turn off
    # behind a pooler that cannot keep them, e.g. PgBouncer < 1.21 in transaction mode)
    PREPARED_STATEMENTS: bool = True

    # payloads
    MAX_PAYLOAD_BYTES: int = 65536
    MAX_PAYLOAD_DEPTH: int = 32

    # observability
    CLOCK_SKEW_WARNING: timedelta = timedelta(seconds=2)
    # label the runs' counter and histogram with their tenant (off: cardinality)
    METRICS_TENANT_LABEL: bool = False

    # HTTP delivery (the pgsched.http job); typed as ``.http`` (delivery/settings.py)
    HTTP: Mapping[str, Any] = field(default_factory=dict)

    # the history API (django_pgsched.history): a dotted path to resolver(request) -> str
    TENANT_RESOLVER: str | None = None
    #: the limits of a tenant without a pgsched_tenant row: checked where they are read
    #: (django_pgsched.tenants.limits.build_defaults) and by the system check pgsched.E003
    TENANT_DEFAULTS: Mapping[str, Any] | None = None

    # the claim transport: {"TRANSPORT": "postgres" | "nats", "NATS_URL": ...};
    # typed as ``.claims`` (broker/settings.py)
    CLAIMS: Mapping[str, Any] | str = field(default_factory=dict)

    # code-declared schedules: {name: {"job": ..., "cron": ... | "interval": ..., ...}}
    SCHEDULES: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @cached_property
    def http(self) -> HttpSettings:
        """``HTTP``, checked and typed (:class:`~django_pgsched.delivery.settings.HttpSettings`)."""
        return build_http_settings(self.HTTP)

    @cached_property
    def claims(self) -> ClaimsSettings:
        """``CLAIMS``, checked and typed (:class:`~.broker.settings.ClaimsSettings`)."""
        return build_claims_settings(self.CLAIMS)


_DURATION_KEYS = {f.name for f in dataclasses.fields(Settings) if "timedelta" in str(f.type)}
_POSITIVE_INT_KEYS = {
    "PLANNER_BATCH",
    "CONCURRENCY",
    "REAPER_BATCH",
    "RETENTION_BATCH",
    "PARTITIONS_AHEAD",
    "BACKFILL_LIMIT",
    "MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_DEPTH",
}
_NON_NEGATIVE_DURATIONS = {
    "MISFIRE_GRACE",
    "PLANNER_LOOKAHEAD",
    "LEASE_TRUST_MARGIN",
    "JOB_CONNECTION_MAX_AGE",
}


def _duration(key: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value or value in (float("inf"), float("-inf")):
            raise ImproperlyConfigured(f"PGSCHED[{key!r}]: {value!r} is not a finite duration")
        result = timedelta(seconds=value)
    else:
        raise ImproperlyConfigured(
            f"PGSCHED[{key!r}]: expected a timedelta or a number of seconds, got {value!r}"
        )
    if key in _NON_NEGATIVE_DURATIONS:
        if result < timedelta(0):
            raise ImproperlyConfigured(f"PGSCHED[{key!r}]: must not be negative, got {value!r}")
    elif result <= timedelta(0):
        raise ImproperlyConfigured(f"PGSCHED[{key!r}]: must be positive, got {value!r}")
    return result


def build_settings(raw: Mapping[str, Any]) -> Settings:
    """Validate ``raw`` (the ``PGSCHED`` dict) and return a :class:`Settings`."""
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGSCHED must be a dict, got {type(raw).__name__}")
    known = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ImproperlyConfigured(
            f"PGSCHED has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("RETENTION", "JOB_CONNECTION_MAX_AGE") and value is None:
            values[key] = None
        elif key == "HTTP":
            build_http_settings(value)  # raises ImproperlyConfigured naming the key
            values[key] = value
        elif key == "CLAIMS":
            build_claims_settings(value)  # raises ImproperlyConfigured naming the key
            values[key] = value
        elif key in _DURATION_KEYS:
            values[key] = _duration(key, value)
        elif key in _POSITIVE_INT_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ImproperlyConfigured(
                    f"PGSCHED[{key!r}]: expected a positive integer, got {value!r}"
                )
            values[key] = value
        else:
            values[key] = value
    result = Settings(**values)
    _check_values(result)
    return result


def _check_values(s: Settings) -> None:
    if s.DEFAULT_MISFIRE_POLICY not in MISFIRE_POLICIES:
        raise ImproperlyConfigured(
            f"PGSCHED['DEFAULT_MISFIRE_POLICY']: {s.DEFAULT_MISFIRE_POLICY!r} is not one of "
            f"{', '.join(MISFIRE_POLICIES)}"
        )
    if (
        not isinstance(s.DEFAULT_MAX_ATTEMPTS, int)
        or not 1 <= s.DEFAULT_MAX_ATTEMPTS <= MAX_ATTEMPTS
    ):
        raise ImproperlyConfigured(
            f"PGSCHED['DEFAULT_MAX_ATTEMPTS']: must be an integer from 1 to {MAX_ATTEMPTS}, "
            f"got {s.DEFAULT_MAX_ATTEMPTS!r}"
        )
    if (
        not isinstance(s.DEFAULT_CATCH_UP_LIMIT, int)
        or not 1 <= s.DEFAULT_CATCH_UP_LIMIT <= MAX_CATCH_UP_LIMIT
    ):
        raise ImproperlyConfigured(
            "PGSCHED['DEFAULT_CATCH_UP_LIMIT']: must be an integer from 1 to "
            f"{MAX_CATCH_UP_LIMIT}, "
            f"got {s.DEFAULT_CATCH_UP_LIMIT!r}"
        )
    # the database's CHECKs bound every payload (migrations/sql/domains.sql): a setting above them
    # would let clean() pass what the database then refuses
    if s.BACKFILL_LIMIT > MAX_BACKFILL:
        raise ImproperlyConfigured(
            f"PGSCHED['BACKFILL_LIMIT']: at most {MAX_BACKFILL}, got {s.BACKFILL_LIMIT}"
        )
    if s.MAX_PAYLOAD_DEPTH > 100:
        raise ImproperlyConfigured(
            f"PGSCHED['MAX_PAYLOAD_DEPTH']: must be at most 100 (the database's bound), "
            f"got {s.MAX_PAYLOAD_DEPTH!r}"
        )
    if s.MAX_PAYLOAD_BYTES > 1_048_576:
        raise ImproperlyConfigured(
            f"PGSCHED['MAX_PAYLOAD_BYTES']: must be at most 1048576 (the database's bound), "
            f"got {s.MAX_PAYLOAD_BYTES!r}"
        )
    if not isinstance(s.LEASE_FACTOR, (int, float)) or isinstance(s.LEASE_FACTOR, bool):
        raise ImproperlyConfigured(
            f"PGSCHED['LEASE_FACTOR']: expected a number, got {s.LEASE_FACTOR!r}"
        )
    if s.PARTITIONS_AHEAD > 120:
        raise ImproperlyConfigured(
            f"PGSCHED['PARTITIONS_AHEAD']: at most 120 months, got {s.PARTITIONS_AHEAD!r}"
        )
    if not isinstance(s.RETENTION_KEEP_DETACHED, bool):
        raise ImproperlyConfigured(
            f"PGSCHED['RETENTION_KEEP_DETACHED']: expected True or False, "
            f"got {s.RETENTION_KEEP_DETACHED!r}"
        )
    if not isinstance(s.DEFAULT_QUEUE, str) or not s.DEFAULT_QUEUE:
        raise ImproperlyConfigured(
            f"PGSCHED['DEFAULT_QUEUE']: expected a non-empty string, got {s.DEFAULT_QUEUE!r}"
        )
    if not isinstance(s.DATABASE_ALIAS, str):
        raise ImproperlyConfigured(
            f"PGSCHED['DATABASE_ALIAS']: expected a string, got {s.DATABASE_ALIAS!r}"
        )
    for key in ("LISTEN", "PREPARED_STATEMENTS", "METRICS_TENANT_LABEL"):
        if not isinstance(getattr(s, key), bool):
            raise ImproperlyConfigured(
                f"PGSCHED[{key!r}]: expected True or False, got {getattr(s, key)!r}"
            )
    if s.TENANT_RESOLVER is not None and (
        not isinstance(s.TENANT_RESOLVER, str) or "." not in s.TENANT_RESOLVER.strip(".")
    ):
        raise ImproperlyConfigured(
            "PGSCHED['TENANT_RESOLVER']: expected a dotted path to resolver(request) -> str, "
            f"got {s.TENANT_RESOLVER!r}"
        )
    if not isinstance(s.SCHEDULES, Mapping):
        raise ImproperlyConfigured(
            "PGSCHED['SCHEDULES']: expected a dict of name -> options, "
            f"got {type(s.SCHEDULES).__name__}"
        )


@cache
def get_settings() -> Settings:
    """The validated settings, cached until ``PGSCHED`` changes (``override_settings``)."""
    return build_settings(getattr(django_settings, "PGSCHED", {}))


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting == "PGSCHED":
        get_settings.cache_clear()
