"""Resolve a target's host once and vet every address it gave.

One lookup per attempt: the client connects to the addresses returned here
and never asks the resolver again, so a name that answers with a public
address for the check and a private one for the connection (DNS rebinding)
gets nowhere. If any address the name resolves to is refused, the whole
target is refused (an attacker's DNS may mix them); a lookup that fails or
takes too long is a failed attempt (retried), never a pass.

``PGSCHED["HTTP"]["RESOLVER"]`` may name a function ``resolve(host, port)
-> list[str]`` to use instead of the system's resolver (the test suite uses
one so that no test asks real DNS).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import cache

from django.utils.module_loading import import_string

from .addresses import IPAddress, address_text, judge
from .settings import HttpSettings
from .urls import Refused, Target

Resolver = Callable[[str, int], list[str]]

# Lookups run here so that a resolver that hangs cannot hold an attempt past its
# deadline (getaddrinfo has no timeout of its own). A lookup that outlives its
# attempt keeps its thread until the resolver gives up.
LOOKUP_THREADS = 8
#: Lookups of one tenant at once in this process: a tenant whose names hang (its own
#: slow DNS) holds at most this many of the LOOKUP_THREADS, never all of them.
LOOKUPS_PER_TENANT = 2
_lookups = ThreadPoolExecutor(max_workers=LOOKUP_THREADS, thread_name_prefix="pgsched-resolve")
_tenant_slots: dict[str, threading.BoundedSemaphore] = {}
_tenant_slots_lock = threading.Lock()


def _slot(tenant: str) -> threading.BoundedSemaphore:
    with _tenant_slots_lock:
        slot = _tenant_slots.get(tenant)
        if slot is None:
            slot = _tenant_slots[tenant] = threading.BoundedSemaphore(LOOKUPS_PER_TENANT)
        return slot


class ResolveError(Exception):
    """The host could not be resolved (in time): a failed attempt, retried.

    ``public``: what the run's tenant may read (never the resolver's own words, nor
    whether the name exists); ``str()`` is the whole reason, for the admin-only detail.
    """

    def __init__(self, message: str, *, public: str, waited: bool = False) -> None:
        super().__init__(message)
        self.public = public
        #: the lookup never started (it waited for a lookup thread or the tenant's share
        #: of them): the time is this process's, not the destination's failure
        self.waited = waited


def _not_public(host: str) -> str:
    """One answer for a name that does not resolve and one that resolves to an address
    not allowed: a tenant learns neither what an internal name resolves to nor whether
    it exists."""
    return f"{host} has no public address to deliver to (the reason is kept for operators)"


@dataclass(frozen=True)
class Vetted:
    """A target and the addresses the client may connect to, in the resolver's order."""

    target: Target
    addresses: tuple[IPAddress, ...]
    notes: tuple[str, ...] = ()  # e.g. "127.0.0.1 allowed by ALLOW_NETWORKS"


def system_resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


@cache
def _custom(path: str) -> Resolver:
    resolver: Resolver = import_string(path)
    return resolver


def resolver_for(settings: HttpSettings) -> Resolver:
    return _custom(settings.RESOLVER) if settings.RESOLVER else system_resolve


def _lookup(resolve: Resolver, host: str, port: int, timeout: float, tenant: str = "") -> list[str]:
    deadline = time.monotonic() + max(0.001, timeout)
    slot = _slot(tenant)
    if not slot.acquire(timeout=max(0.001, timeout)):
        message = f"resolving {host} waited {timeout:.3g}s for its tenant's share of lookups"
        raise ResolveError(message, public=message, waited=True)
    started = threading.Event()

    def run() -> list[str]:
        started.set()
        return resolve(host, port)

    try:
        future = _lookups.submit(run)
    except BaseException:
        slot.release()
        raise
    future.add_done_callback(lambda _: slot.release())
    try:
        return future.result(timeout=max(0.001, deadline - time.monotonic()))
    except FutureTimeout:
        if future.cancel() or not started.is_set():
            # it never ran: it waited for a lookup thread (other tenants' lookups)
            message = f"resolving {host} waited {timeout:.3g}s for a lookup thread"
            raise ResolveError(message, public=message, waited=True) from None
        raise ResolveError(
            f"resolving {host} took longer than {timeout:.3g}s",
            public=f"resolving {host} took longer than {timeout:.3g}s",
        ) from None
    except (OSError, UnicodeError) as exc:
        raise ResolveError(f"could not resolve {host}: {exc}", public=_not_public(host)) from None


def vet(
    target: Target, settings: HttpSettings, *, timeout: float | None = None, tenant: str = ""
) -> Vetted:
    """Resolve ``target`` once and check every address; raise Refused or ResolveError."""
    if target.literal is not None:
        verdict = judge(target.literal, settings.ALLOW_NETWORKS)
        if not verdict.allowed:
            raise Refused(
                f"destination {address_text(target.literal)} is not a public address "
                f"({verdict.reason})"
            )
        return Vetted(target, (target.literal,), (str(verdict),) if verdict.reason else ())
    limit = settings.RESOLVE_TIMEOUT.total_seconds()
    answers = _lookup(
        resolver_for(settings), target.host, target.port, min(limit, timeout or limit), tenant
    )
    addresses: list[IPAddress] = []
    notes: list[str] = []
    for text in answers:
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            raise ResolveError(
                f"{target.host} resolved to {text!r}, not an address",
                public=_not_public(target.host),
            ) from None
        if "%" in text:
            raise Refused(
                f"{target.host} resolves to {text} (a scoped address)",
                public=_not_public(target.host),
            )
        verdict = judge(address, settings.ALLOW_NETWORKS)
        if not verdict.allowed:
            raise Refused(
                f"{target.host} resolves to {address_text(address)} ({verdict.reason})",
                public=_not_public(target.host),
            )
        if verdict.reason:
            notes.append(f"{address_text(address)} {verdict.reason}")
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ResolveError(f"{target.host} resolved to no address", public=_not_public(target.host))
    return Vetted(target, tuple(addresses), tuple(notes))
