"""Which IP addresses a delivery may connect to.

A table of its own, not ``ipaddress``'s ``is_global``/``is_private`` flags:
those tables were wrong before Python 3.11.10/3.12.4 (CVE-2024-4032), and
they do not look inside the IPv6 forms that carry an IPv4 address. The ranges
below follow the IANA special-purpose address registries; an address is
refused if it lies in one of them, or (for IPv6) outside global unicast
``2000::/3``. IPv6 forms that embed an IPv4 address (IPv4-mapped,
IPv4-compatible, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the
IPv4 address inside. Cloud metadata addresses are refused even when a
project's ``ALLOW_NETWORKS`` covers them.

Addresses are written with :func:`address_text`, never ``str()``: Python 3.13
writes an IPv4-mapped address as ``::ffff:8.8.8.8`` where 3.11 and 3.12 write
``::ffff:808:808``, and the text goes into the ``Host`` header, messages and
an attempt's evidence, which must not depend on which Python a replica runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*rows: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), why) for cidr, why in rows)


REFUSED_V4 = _nets(
    ("0.0.0.0/8", "unspecified ('this network')"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT (shared address space)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.31.196.0/24", "AS112"),
    ("192.52.193.0/24", "AMT"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("192.175.48.0/24", "AS112"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)

REFUSED_V6 = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignments (Teredo, ORCHID, ...)"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6)"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)

GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")

#: Instance metadata services: refused whatever ALLOW_NETWORKS says.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.123",  # AWS time sync
        "168.63.129.16",  # Azure wire server (a public address)
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS DNS over IPv6
    )
)


@dataclass(frozen=True)
class Verdict:
    """Whether ``address`` may be connected to, and if not, why."""

    address: IPAddress
    allowed: bool
    reason: str = ""  # why it was refused ("loopback", ...), or "allowed by ALLOW_NETWORKS"

    def __str__(self) -> str:
        text = address_text(self.address)
        return f"{text} ({self.reason})" if self.reason else text


def address_text(address: IPAddress) -> str:
    """The canonical text of ``address``, the same on every Python version.

    RFC 5952's compressed form, with an IPv4-mapped address in its mixed
    notation (``::ffff:192.0.2.1``, section 5), as Python 3.13 writes it.
    """
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        scope = f"%{address.scope_id}" if address.scope_id else ""
        return f"::ffff:{address.ipv4_mapped}{scope}"
    return address.compressed


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse CIDRs (``"10.1.0.0/16"``, ``"fd12::/48"``); a ValueError names a bad one."""
    networks = []
    for value in values:
        if not isinstance(value, str):
            raise ValueError(f"expected a CIDR string, got {value!r}")
        try:
            networks.append(ipaddress.ip_network(value, strict=True))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a network in CIDR form ({exc})") from None
    return tuple(networks)


def _refusal(address: IPAddress) -> str:
    """Why ``address`` is not a public address ("" if it is)."""
    if isinstance(address, ipaddress.IPv4Address):
        for network, why in REFUSED_V4:
            if address in network:
                return why
        return ""
    for network, why in REFUSED_V6:
        if address in network:
            return why
    if address in IPV4_COMPATIBLE:
        return "deprecated IPv4-compatible form"
    inner = embedded_ipv4(address)
    if inner is not None:
        why = _refusal(inner)
        return f"embeds {inner}: {why}" if why else ""
    if address not in GLOBAL_UNICAST_V6:
        return "not global unicast"
    return ""


def judge(address: IPAddress, allow: Sequence[IPNetwork] = ()) -> Verdict:
    """May a delivery connect to ``address``? ``allow``: the project's ALLOW_NETWORKS."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        return Verdict(address, False, "scoped (zone) address")
    inner = embedded_ipv4(address)
    for candidate in (address, inner):
        if candidate is not None and candidate in METADATA:
            return Verdict(address, False, "cloud metadata service")
    why = _refusal(address)
    if not why:
        return Verdict(address, True)
    for candidate in (address, inner):
        if candidate is not None and any(
            candidate.version == net.version and candidate in net for net in allow
        ):
            return Verdict(address, True, "allowed by ALLOW_NETWORKS")
    return Verdict(address, False, why)
