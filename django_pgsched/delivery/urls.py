"""A delivery URL, checked before anything is looked up.

:func:`parse_url` turns the text of a URL into a :class:`Target` or raises
:class:`Refused` with a message that names what is wrong. It refuses what can
be refused without the network: other schemes, credentials in the URL, IP
literals in any but the canonical form (``2130706433``, ``0x7f.1``,
``0177.0.0.1`` and ``127.1`` all mean 127.0.0.1 to the C library), zone IDs,
literal addresses that are not public, host names on the deny list, ports
not allowed, fragments, control characters and over-long URLs. Whether a
host *name* is safe is decided at each attempt, from the addresses it
resolves to (:mod:`.vetting`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from .addresses import IPAddress, address_text, judge
from .settings import HttpSettings

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMERIC_PART = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_CANONICAL_V4 = re.compile(rf"^{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}$")


class Refused(Exception):
    """The URL (or where it leads) may not be called; ``str()`` says why.

    ``public``: what the run's tenant may read, when ``str()`` tells more than the
    tenant's own URL does (what a name resolves to): the attempt's error says that,
    its admin-only ``detail`` the whole reason.
    """

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public if public is not None else message


@dataclass(frozen=True)
class Target:
    """Where a request goes: the parts of a checked URL."""

    scheme: str  # "http" or "https"
    host: str  # lower-case ASCII (IDNA) name, or the canonical text of an IP literal
    port: int
    path: str  # path and query, at least "/"
    literal: IPAddress | None  # the address, when the URL names one

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == DEFAULT_PORTS[self.scheme]:
            return host
        return f"{host}:{self.port}"

    @property
    def origin(self) -> str:
        """``scheme://host:port``: the destination a circuit breaker guards."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.path}"


def _host(raw: str, settings: HttpSettings) -> tuple[str, IPAddress | None]:
    """The normalised host and its address if it is an IP literal."""
    if raw.startswith("["):
        inner = raw[1:-1] if raw.endswith("]") else raw[1:]
        if "%" in inner:
            raise Refused("url: IPv6 zone IDs are not allowed")
        try:
            address: IPAddress = ipaddress.IPv6Address(inner)
        except ValueError:
            raise Refused(f"url: {raw!r} is not a valid IPv6 address") from None
        return address_text(address), address
    host = raw.lower()
    if host.endswith("."):
        host = host[:-1]  # an absolute name: the same host
    if not host:
        raise Refused("url: a host is required")
    parts = host.split(".")
    if all(_NUMERIC_PART.match(p) for p in parts):
        if not _CANONICAL_V4.match(host):
            raise Refused(
                f"url: {raw!r} is an IP address in a non-canonical form; "
                "write it as four decimal numbers (a.b.c.d)"
            )
        return host, ipaddress.IPv4Address(host)
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise Refused(f"url: {raw!r} is not a valid host name") from None
    labels = ascii_host.split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise Refused(f"url: {raw!r} is not a valid host name")
    if labels[-1].isdigit():
        raise Refused(f"url: {raw!r} is not a valid host name (numeric top-level label)")
    for pattern in settings.DENY_HOSTS:
        if fnmatch.fnmatchcase(ascii_host, pattern):
            raise Refused(f"url: host {ascii_host!r} is not allowed (it matches {pattern!r})")
    return ascii_host, None


def parse_url(url: object, settings: HttpSettings) -> Target:
    """Check ``url`` without the network; raise :class:`Refused` naming what is wrong."""
    if not isinstance(url, str) or not url:
        raise Refused(f"url: a URL string is required, got {url!r}")
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"url: {len(url)} characters is too long (at most {MAX_URL_LENGTH})")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url) or "\\" in url:
        raise Refused("url: control characters, spaces and backslashes are not allowed")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"url: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in settings.SCHEMES:
        allowed = " or ".join(settings.SCHEMES)
        raise Refused(f"url: scheme must be {allowed}, got {parts.scheme or '(none)'!r}")
    if "@" in parts.netloc:
        raise Refused("url: credentials in URLs are not allowed; send them in a header")
    if parts.fragment or url.endswith("#"):
        raise Refused("url: fragments (#...) are not sent to servers; remove it")
    netloc = parts.netloc
    raw_host = netloc.rsplit(":", 1)[0] if not netloc.endswith("]") else netloc
    if netloc.startswith("[") and "]:" in netloc:
        raw_host = netloc[: netloc.index("]:") + 1]
    host, literal = _host(raw_host, settings)
    port = port if port is not None else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise Refused(f"url: port {port} is out of range")
    if settings.ALLOW_PORTS is not None and port not in settings.ALLOW_PORTS:
        allowed = ", ".join(str(p) for p in sorted(settings.ALLOW_PORTS))
        raise Refused(f"url: port {port} is not allowed (allowed: {allowed})")
    if literal is not None:
        verdict = judge(literal, settings.ALLOW_NETWORKS)
        if not verdict.allowed:
            raise Refused(
                f"url: destination {address_text(literal)} is not a public address "
                f"({verdict.reason})"
            )
    path = quote(parts.path or "/", safe="!$%&'()*+,/:;=@~")
    if parts.query:
        query = quote(parts.query, safe="!$%&'()*+,/:;=?@~")
        path = f"{path}?{query}"
    return Target(scheme, host, port, path, literal)
