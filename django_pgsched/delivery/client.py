"""The HTTP client: the one module that uses urllib3.

One request per connection, pinned to an address that :mod:`.vetting` has
checked: the socket is opened to that IP by this module (urllib3 never looks
the name up), while the ``Host`` header, TLS SNI and certificate check use
the host name of the URL. Nothing here follows redirects.

Time is bounded as a whole, not per read: a watchdog thread shuts the socket
down at the deadline, so a server that drips its headers or body one byte at
a time cannot hold an attempt past it. The same shutdown serves
cancellation: when the run's lease is lost, the connection is closed under
the request in flight. The response body is read only up to the excerpt
size, and the connection is then closed (a 50 MB answer costs 4 KiB).
"""

from __future__ import annotations

import heapq
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import HTTPError as Urllib3Error

from .addresses import IPAddress, address_text


class Aborted(Exception):
    """The exchange was cut short on purpose: the deadline passed, or it was cancelled."""


@dataclass
class Exchange:
    """What happened on the wire: the evidence of one attempt."""

    address: str = ""  # the vetted address connected to ("ip:port")
    status: int | None = None
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    excerpt: bytes = b""
    complete: bool = False  # the body ended (or the excerpt was full) before the deadline
    truncated: bool = False  # more body followed the excerpt; it was not read
    connect: float | None = None  # seconds: TCP connect and TLS handshake
    first_byte: float | None = None  # seconds from sending to the response's headers
    total: float = 0.0
    error: str = ""  # class of failure: connect_timeout, read_timeout, reset, tls, ...
    message: str = ""


@dataclass(frozen=True)
class Outgoing:
    """One request, ready to send (to one vetted destination)."""

    scheme: str
    host: str  # for Host, SNI and the certificate check
    host_header: str
    port: int
    method: str
    path: str
    headers: Sequence[tuple[str, str]]
    body: bytes


class _NotSent(Exception):
    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Watchdog:
    """Calls ``abort`` for each registered exchange whose deadline passes; one thread for all."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, abort: Callable[[], None]) -> int:
        with self._cond:
            key = next(self._seq)
            heapq.heappush(self._heap, (deadline, key, abort))
            self._live.add(key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="pgsched-http-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()
            return key

    def forget(self, key: int) -> None:
        with self._cond:
            self._live.discard(key)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait(30)
                    continue
                deadline, key, abort = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._live.discard(key)
            try:
                abort()
            except Exception:  # noqa: S110  (a socket that is already gone)
                pass


_watchdog = _Watchdog()


class _Pin:
    """The socket of one exchange, and how to cut it."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.why = ""
        self._lock = threading.Lock()

    def abort(self, why: str) -> None:
        with self._lock:
            if self.why:
                return
            self.why = why
            sock = self.sock
        if sock is not None:
            try:
                # the plain socket's shutdown, also under TLS: a blocked read returns at once
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


def _pinned(base: type[HTTPConnection]) -> type[HTTPConnection]:
    class Pinned(base):  # type: ignore[valid-type,misc]
        """Connects to the vetted address itself: no name lookup, ever."""

        pin: _Pin
        tcp_seconds: float | None = None

        def _new_conn(self) -> socket.socket:
            address = self._pgsched_address
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            self.pin.sock = sock
            if self.pin.why:
                sock.close()
                raise Aborted(self.pin.why)
            started = time.monotonic()
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.timeout)
                sock.connect((str(address), self.port))
            except BaseException:
                sock.close()
                raise
            self.tcp_seconds = time.monotonic() - started
            return sock

        def connect(self) -> None:
            super().connect()
            self.pin.sock = self.sock  # the TLS socket, once wrapped

    return Pinned


_PinnedHTTP = _pinned(HTTPConnection)
_PinnedHTTPS = _pinned(HTTPSConnection)

_tls: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """The verifying TLS context (the system's trust store), built once."""
    global _tls
    if _tls is None:
        context = ssl.create_default_context()
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _tls = context
    return _tls


def set_tls_context(context: ssl.SSLContext | None) -> None:
    """Use another trust store (tests trust their own CA so); ``None`` restores the default."""
    global _tls
    _tls = context


def _classify(exc: BaseException, pin: _Pin, connected: bool) -> tuple[str, str]:
    if pin.why:
        return ("deadline" if pin.why == "deadline" else "cancelled"), pin.why
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (TimeoutError, socket.timeout, urllib3.exceptions.TimeoutError)):
        return ("read_timeout" if connected else "connect_timeout"), text
    if isinstance(exc, (ssl.SSLError, ssl.CertificateError)):
        return "tls", text
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused", text
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "reset", text
    if isinstance(exc, (HTTPException, Urllib3Error)):
        return "protocol", text
    if isinstance(exc, OSError):
        return ("network" if not connected else "reset"), text
    return "error", text


def exchange(
    request: Outgoing,
    addresses: Sequence[IPAddress],
    *,
    deadline: float,
    connect_timeout: float,
    excerpt_bytes: int,
    before_send: Callable[[], None] = lambda: None,
    on_abort: Callable[[Callable[[str], None]], Callable[[], None]] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Exchange:
    """Send ``request`` to the first of ``addresses`` that accepts a connection.

    ``deadline`` is a ``time.monotonic()`` value: the whole exchange ends by
    then. ``before_send`` runs once connected, just before the first byte of
    the request leaves (the lease check; an exception there sends nothing and
    propagates). ``on_abort(cut)`` lets the caller cut the exchange from
    another thread (``cut(reason)``); it returns an unregister function.
    Failures on the wire are reported in the result, never raised.
    """
    result = Exchange()
    started = clock()
    pin = _Pin()
    watch = _watchdog.watch(deadline, lambda: pin.abort("deadline"))
    unregister = on_abort(pin.abort) if on_abort is not None else None
    conn: Any = None
    connected = False
    try:
        for index, address in enumerate(addresses):
            remaining = deadline - clock()
            if remaining <= 0 or pin.why:
                raise Aborted(pin.why or "deadline")
            cls = _PinnedHTTPS if request.scheme == "https" else _PinnedHTTP
            options: dict[str, Any] = {"timeout": min(connect_timeout, remaining)}
            if request.scheme == "https":
                options.update(server_hostname=request.host, ssl_context=tls_context())
            conn = cls(request.host, request.port, **options)
            conn.pin = pin
            conn._pgsched_address = address
            text = address_text(address)
            result.address = (
                f"[{text}]:{request.port}" if address.version == 6 else f"{text}:{request.port}"
            )
            try:
                conn.connect()
                connected = True
                break
            except (OSError, Urllib3Error) as exc:
                conn.close()
                if index == len(addresses) - 1 or pin.why:
                    raise
                result.message += f"{result.address}: {type(exc).__name__}: {exc}; "
        result.connect = clock() - started
        try:
            before_send()
        except Exception as exc:
            raise _NotSent(exc) from exc
        sent = clock()
        conn.timeout = max(0.001, deadline - clock())
        headers = {"Host": request.host_header, **dict(request.headers)}
        conn.request(
            request.method,
            request.path,
            body=request.body if request.body or request.method not in ("GET", "HEAD") else None,
            headers=headers,
            preload_content=False,
            decode_content=False,
        )
        conn.timeout = max(0.001, deadline - clock())
        response = conn.getresponse()
        result.first_byte = clock() - sent
        result.status = response.status
        result.reason = response.reason or ""
        result.headers = [(k.lower(), v) for k, v in response.headers.items()]
        body = bytearray()
        while len(body) <= excerpt_bytes:
            chunk = response.read1(excerpt_bytes + 1 - len(body))
            if not chunk:
                break
            body += chunk
        result.truncated = len(body) > excerpt_bytes
        result.excerpt = bytes(body[:excerpt_bytes])
        result.complete = not pin.why
        if pin.why:
            raise Aborted(pin.why)
    except _NotSent as wrapped:
        raise wrapped.cause from None  # e.g. the lease was lost: nothing was sent
    except Aborted as exc:
        result.error = "deadline" if str(exc) == "deadline" else "cancelled"
        result.message += str(exc)
    except Exception as exc:
        error, message = _classify(exc, pin, connected)
        result.error, result.message = error, result.message + message
    finally:
        _watchdog.forget(watch)
        if unregister is not None:
            unregister()
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: S110
                pass
        result.total = clock() - started
    return result
