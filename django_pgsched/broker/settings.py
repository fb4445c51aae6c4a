"""``PGSCHED["CLAIMS"]``: the claim transport, typed and validated.

:mod:`django_pgsched.conf` reads ``PGSCHED`` and hands the ``CLAIMS`` mapping
to :func:`build_claims_settings`; nothing else reads it. Every key has a
default (``docs/reference/settings.md`` documents each one); an unknown key or
a bad value is an ``ImproperlyConfigured`` naming the key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured

TRANSPORTS = ("postgres", "nats")
# a JetStream stream name: no whitespace, dots, wildcards or path separators
STREAM_RE = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
# a subject prefix: dot-separated tokens without wildcards or whitespace
PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")


@dataclass(frozen=True, kw_only=True)
class ClaimsSettings:
    """Typed view of ``PGSCHED["CLAIMS"]``; the attributes are the defaults."""

    #: ``"postgres"``: executors claim with ``SKIP LOCKED``; ``"nats"``: through JetStream.
    TRANSPORT: str = "postgres"
    #: The NATS server(s): one URL or a list (a cluster's seed servers).
    NATS_URL: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    #: The JetStream stream the run ids are published to (created if missing).
    STREAM: str = "PGSCHED_RUNS"
    #: Subjects are ``<SUBJECT_PREFIX>.<queue>.<tenant>``.
    SUBJECT_PREFIX: str = "pgsched.runs"
    #: The stream's replication factor when this replica creates it (3 on a cluster).
    STREAM_REPLICAS: int = 1
    #: How long the stream keeps a message nobody acknowledged.
    MAX_AGE: timedelta = timedelta(days=1)
    #: JetStream drops a repeated message id published within this window.
    DUPLICATE_WINDOW: timedelta = timedelta(minutes=2)
    #: The broker redelivers a message not acknowledged this long after delivery.
    ACK_WAIT: timedelta = timedelta(seconds=60)
    #: Longest an executor pass waits for a message when it has idle slots.
    FETCH_WAIT: timedelta = timedelta(milliseconds=100)
    #: Every this often an executor claims once with ``SKIP LOCKED`` anyway (the safety net).
    SWEEP_INTERVAL: timedelta = timedelta(seconds=10)
    #: Outbox rows one publisher pass takes.
    PUBLISH_BATCH: int = 500
    #: Longest a publisher sleeps between passes (NOTIFY wakes it sooner).
    PUBLISH_INTERVAL: timedelta = timedelta(seconds=1)
    #: Connecting, publishing and stream requests give up after this long.
    TIMEOUT: timedelta = timedelta(seconds=2)

    @property
    def nats(self) -> bool:
        return self.TRANSPORT == "nats"


_DURATIONS = {f.name for f in dataclasses.fields(ClaimsSettings) if "timedelta" in str(f.type)}
_POSITIVE_INTS = {"STREAM_REPLICAS", "PUBLISH_BATCH"}


def _fail(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"PGSCHED['CLAIMS'][{key!r}]: {message}")


def _duration(key: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        if value in (float("inf"), float("-inf")):
            raise _fail(key, f"{value!r} is not a finite duration")
        result = timedelta(seconds=value)
    else:
        raise _fail(key, f"expected a timedelta or a number of seconds, got {value!r}")
    if result <= timedelta(0):
        raise _fail(key, f"must be positive, got {value!r}")
    return result


def _urls(value: object) -> tuple[str, ...]:
    urls = (value,) if isinstance(value, str) else value
    if not isinstance(urls, (list, tuple)) or not urls:
        raise _fail("NATS_URL", f"expected a URL or a list of URLs, got {value!r}")
    for url in urls:
        if not isinstance(url, str) or not re.match(r"^(nats|tls|ws|wss)://\S+$", url):
            raise _fail("NATS_URL", f"{url!r} is not a nats://, tls://, ws:// or wss:// URL")
    return tuple(urls)


def build_claims_settings(raw: object) -> ClaimsSettings:
    """Validate ``raw`` (``PGSCHED["CLAIMS"]``) and return a :class:`ClaimsSettings`.

    A bare string is the transport: ``"CLAIMS": "nats"`` is ``{"TRANSPORT": "nats"}``.
    """
    if isinstance(raw, str):
        raw = {"TRANSPORT": raw}
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(
            f"PGSCHED['CLAIMS'] must be a dict (or a transport name), got {type(raw).__name__}"
        )
    known = {f.name for f in dataclasses.fields(ClaimsSettings)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ImproperlyConfigured(
            f"PGSCHED['CLAIMS'] has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _DURATIONS:
            values[key] = _duration(key, value)
        elif key in _POSITIVE_INTS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _fail(key, f"expected a positive integer, got {value!r}")
            values[key] = value
        elif key == "NATS_URL":
            values[key] = _urls(value)
        else:
            values[key] = value
    result = ClaimsSettings(**values)
    if result.TRANSPORT not in TRANSPORTS:
        raise _fail("TRANSPORT", f"{result.TRANSPORT!r} is not one of {', '.join(TRANSPORTS)}")
    if not isinstance(result.STREAM, str) or not STREAM_RE.match(result.STREAM):
        raise _fail("STREAM", f"{result.STREAM!r} is not a stream name (letters, digits, _ -)")
    if not isinstance(result.SUBJECT_PREFIX, str) or not PREFIX_RE.match(result.SUBJECT_PREFIX):
        raise _fail(
            "SUBJECT_PREFIX",
            f"{result.SUBJECT_PREFIX!r} is not a subject prefix (dot-separated tokens, "
            "no wildcards)",
        )
    if result.STREAM_REPLICAS > 5:
        raise _fail(
            "STREAM_REPLICAS", f"JetStream replicates at most 5 times, got {result.STREAM_REPLICAS}"
        )
    return result
