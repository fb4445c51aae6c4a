"""``PGSCHED["HTTP"]``: the delivery settings, typed and validated.

:mod:`django_pgsched.conf` reads ``PGSCHED`` and hands the ``HTTP`` mapping to
:func:`build_http_settings`; nothing else reads it. Every key has a default
(``docs/reference/settings.md`` documents each one); an unknown key or a bad
value is an ``ImproperlyConfigured`` naming the key.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .addresses import IPNetwork, parse_networks

SECRET_PREFIX = "whsec_"  # noqa: S105  (a prefix, not a secret)
SECRET_NAME_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,100}$")


@dataclass(frozen=True, kw_only=True)
class HttpSettings:
    """Typed view of ``PGSCHED["HTTP"]``; the attributes are the defaults."""

    #: Networks (CIDR) that deliveries may reach although they are not public.
    ALLOW_NETWORKS: tuple[IPNetwork, ...] = ()
    #: Ports a URL may name; ``None`` allows every port.
    ALLOW_PORTS: frozenset[int] | None = frozenset({80, 443, 8080, 8443})
    SCHEMES: tuple[str, ...] = ("https", "http")
    #: Host names refused before any lookup (``*`` matches one or more labels).
    DENY_HOSTS: tuple[str, ...] = (
        "localhost",
        "*.localhost",
        "*.local",
        "*.localdomain",
        "*.internal",
        "*.home.arpa",
    )
    #: name -> Standard Webhooks secrets (``whsec_<base64>``), newest first.
    SIGNING_SECRETS: Mapping[str, tuple[bytes, ...]] = field(default_factory=dict)
    #: name -> the tenants whose runs may sign with it (absent: any tenant), from a secret
    #: given as ``{"key": ..., "tenants": [...]}``.
    SECRET_TENANTS: Mapping[str, frozenset[str]] = field(
        default_factory=dict, metadata={"derived": "SIGNING_SECRETS"}
    )

    def secret_for(self, name: str, tenant: str) -> tuple[bytes, ...] | None:
        """The keys of secret ``name`` for a run of ``tenant``; ``None`` when there is no
        such secret or it is limited to other tenants (the two are not told apart)."""
        keys = self.SIGNING_SECRETS.get(name)
        if keys is None:
            return None
        allowed = self.SECRET_TENANTS.get(name)
        if allowed is not None and tenant not in allowed:
            return None
        return keys

    TIMEOUT: timedelta = timedelta(seconds=30)
    CONNECT_TIMEOUT: timedelta = timedelta(seconds=10)
    RESOLVE_TIMEOUT: timedelta = timedelta(seconds=5)
    MAX_REDIRECTS: int = 0
    RESPONSE_EXCERPT_BYTES: int = 4096
    RESPONSE_HEADERS: tuple[str, ...] = (
        "content-type",
        "content-length",
        "retry-after",
        "location",
        "date",
        "server",
        "x-request-id",
    )
    RETRY_AFTER_MAX: timedelta = timedelta(hours=1)
    #: Dotted path of ``resolve(host, port) -> list[str]`` (tests); default: the system's.
    RESOLVER: str | None = None
    USER_AGENT: str = "django-pgsched"
    BREAKER_THRESHOLD: int = 5
    BREAKER_COOLDOWN: timedelta = timedelta(seconds=30)
    BREAKER_COOLDOWN_MAX: timedelta = timedelta(minutes=10)


_DURATIONS = {f.name for f in dataclasses.fields(HttpSettings) if "timedelta" in str(f.type)}


def _fail(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"PGSCHED['HTTP'][{key!r}]: {message}")


def _duration(key: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        result = timedelta(seconds=value)
    else:
        raise _fail(key, f"expected a timedelta or a number of seconds, got {value!r}")
    if result <= timedelta(0) or result > timedelta(days=7):
        raise _fail(key, f"must be more than 0 and at most 7 days, got {value!r}")
    return result


def _int(key: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _fail(key, f"expected an integer from {low} to {high}, got {value!r}")
    return value


def _strings(key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise _fail(key, f"expected a list of strings, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise _fail(key, f"expected a list of non-empty strings, got {value!r}")
    return tuple(value)


def decode_secret(name: str, value: object) -> bytes:
    """The HMAC key of one ``whsec_<base64>`` secret (the error never shows the secret)."""
    where = f"SIGNING_SECRETS[{name!r}]"
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        raise _fail(where, "expected a string 'whsec_<base64>' (the value is not shown)")
    encoded = value[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _fail(where, "not valid base64 after 'whsec_' (the value is not shown)") from None
    if not 24 <= len(key) <= 64:
        raise _fail(where, f"the key must be 24 to 64 bytes (Standard Webhooks), got {len(key)}")
    return key


def _secrets(value: object) -> tuple[dict[str, tuple[bytes, ...]], dict[str, frozenset[str]]]:
    """The keys of each secret, and the tenants of each one limited to some."""
    if not isinstance(value, Mapping):
        raise _fail("SIGNING_SECRETS", "expected a dict of name -> secret (the value is not shown)")
    secrets: dict[str, tuple[bytes, ...]] = {}
    tenants: dict[str, frozenset[str]] = {}
    for name, secret in value.items():
        if not isinstance(name, str) or not SECRET_NAME_RE.match(name):
            raise _fail("SIGNING_SECRETS", f"{name!r} is not a valid secret name")
        if isinstance(secret, Mapping):
            # {"key": "whsec_..." (or a list), "tenants": ["a", ...]}: for those tenants only
            extra = sorted(map(str, set(secret) - {"key", "tenants"}))
            if extra or "key" not in secret or "tenants" not in secret:
                raise _fail(
                    f"SIGNING_SECRETS[{name!r}]",
                    "expected {'key': 'whsec_...', 'tenants': [...]}"
                    + (f"; unknown {', '.join(map(repr, extra))}" if extra else ""),
                )
            given = secret["tenants"]
            if (
                isinstance(given, str)
                or not isinstance(given, (list, tuple))
                or not all(isinstance(t, str) for t in given)
            ):
                raise _fail(
                    f"SIGNING_SECRETS[{name!r}]['tenants']", "expected a list of tenant keys"
                )
            tenants[name] = frozenset(given)
            secret = secret["key"]
        # a list signs with each (rotation): receivers accept any one signature
        values = [secret] if isinstance(secret, str) else secret
        if not isinstance(values, (list, tuple)) or not values or len(values) > 4:
            raise _fail(
                f"SIGNING_SECRETS[{name!r}]", "expected a secret or a list of 1 to 4 secrets"
            )
        secrets[name] = tuple(decode_secret(name, v) for v in values)
    return secrets, tenants


def build_http_settings(raw: object) -> HttpSettings:
    """Validate ``PGSCHED["HTTP"]`` and return the typed settings."""
    if raw is None:
        return HttpSettings()
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"PGSCHED['HTTP']: expected a dict, got {raw!r}")
    known = {f.name for f in dataclasses.fields(HttpSettings) if not f.metadata.get("derived")}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ImproperlyConfigured(
            f"PGSCHED['HTTP'] has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _DURATIONS:
            values[key] = _duration(key, value)
        elif key == "ALLOW_NETWORKS":
            try:
                values[key] = parse_networks(_strings(key, value) if value else ())
            except ValueError as exc:
                raise _fail(key, str(exc)) from None
        elif key == "ALLOW_PORTS":
            if value is None:
                values[key] = None
            elif isinstance(value, (list, tuple, set, frozenset)) and value:
                values[key] = frozenset(_int(key, p, 1, 65535) for p in value)
            else:
                raise _fail(key, f"expected a list of ports, or None for any, got {value!r}")
        elif key == "SCHEMES":
            schemes = tuple(s.lower() for s in _strings(key, value))
            if not schemes or set(schemes) - {"http", "https"}:
                raise _fail(key, f"only 'http' and 'https' can be allowed, got {value!r}")
            values[key] = schemes
        elif key == "DENY_HOSTS":
            values[key] = tuple(h.lower().rstrip(".") for h in _strings(key, value or []))
        elif key == "RESPONSE_HEADERS":
            names = _strings(key, value or [])
            bad = [n for n in names if not HEADER_NAME_RE.match(n)]
            if bad:
                raise _fail(key, f"not header names: {bad!r}")
            values[key] = tuple(n.lower() for n in names)
        elif key == "SIGNING_SECRETS":
            values[key], values["SECRET_TENANTS"] = _secrets(value)
        elif key == "MAX_REDIRECTS":
            values[key] = _int(key, value, 0, 10)
        elif key == "RESPONSE_EXCERPT_BYTES":
            values[key] = _int(key, value, 0, 1024 * 1024)
        elif key == "BREAKER_THRESHOLD":
            values[key] = _int(key, value, 0, 1000)
        elif key in ("RESOLVER", "USER_AGENT"):
            if not (value is None and key == "RESOLVER") and not (
                isinstance(value, str) and value and "\r" not in value and "\n" not in value
            ):
                raise _fail(key, f"expected a string, got {value!r}")
            values[key] = value
    result = HttpSettings(**values)
    if result.RETRY_AFTER_MAX > timedelta(hours=12):
        # a deferred run must not wait as long as the runs a breaker holds back (a day)
        raise _fail("RETRY_AFTER_MAX", "must be at most 12 hours")
    if result.BREAKER_COOLDOWN_MAX < result.BREAKER_COOLDOWN:
        raise _fail("BREAKER_COOLDOWN_MAX", "must not be shorter than BREAKER_COOLDOWN")
    return result
