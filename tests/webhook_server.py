"""A real HTTP(S) server on loopback for the delivery tests, with its own log.

Every connection it accepts is logged (``server.connections``) before a byte
is read, and every request it parses (``server.requests``), so a test can
assert that nothing reached it, from the server's side. Behaviour is chosen
by path:

- ``/ok`` → 200; ``/status/<code>`` → that code (``?retry_after=...`` adds the
  header); ``/slow?s=3`` sleeps before answering; ``/hang-after-headers``
  sends the headers of a 100-byte body, then nothing; ``/huge?mb=50`` sends
  that many MB; ``/drip?n=30`` sends a body one byte a second;
  ``/redirect?to=URL`` answers 302; ``/reset`` closes the socket at once.
- ``server.script(path, [(status, headers, body), ...])`` makes ``path`` answer
  with each response in turn, then repeat the last.
- ``server.hold(path)`` makes requests to ``path`` wait until the returned event
  is set (``/hold`` and ``/held`` then answer 200).

With ``tls=True`` it serves HTTPS with a certificate for ``localhost``,
``hooks.test`` and 127.0.0.1 from a test CA (``trustme``); ``server.ca`` can
configure a client to trust it. ``WebhookServer(host="127.0.0.2")`` listens on
another loopback address: one the test settings do not allow, so that a test
can show from this server's log that nothing reached a refused address (``port``
may then be the allowed server's: a request that went to the wrong address of
an allowed port would land here).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str
    at: float = field(default_factory=time.monotonic)


Response = tuple[int, dict[str, str], bytes]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: WebhookServer

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        self.owner._connected(addr)
        return sock, addr


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _handle(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        owner._received(
            Received(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                body,
                f"{self.client_address[0]}:{self.client_address[1]}",
            )
        )
        owner._wait_if_held(parts.path)
        path = parts.path
        scripted = owner._next_scripted(path)
        if scripted is not None:
            self._send(*scripted)
        elif path in ("/ok", "/hold", "/held"):
            self._send(200, {}, b"ok")
        elif path.startswith("/status/"):
            code = int(path.rsplit("/", 1)[1])
            extra = {"Retry-After": query["retry_after"]} if "retry_after" in query else {}
            self._send(code, extra, b"status %d" % code)
        elif path == "/slow":
            owner._stopped.wait(float(query.get("s", "3")))
            self._send(200, {}, b"slow ok")
        elif path == "/hang-after-headers":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            owner._stopped.wait(60)
        elif path == "/huge":
            size = int(float(query.get("mb", "50")) * 1024 * 1024)
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < size and not owner._stopped.is_set():
                    self.wfile.write(chunk[: size - sent])
                    sent += min(len(chunk), size - sent)
            except OSError:
                pass
            owner.huge_bytes_sent.append(sent)
        elif path == "/drip":
            n = int(query.get("n", "30"))
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            try:
                for _ in range(n):
                    self.wfile.write(b".")
                    self.wfile.flush()
                    if owner._stopped.wait(1.0):
                        break
            except OSError:
                pass
        elif path == "/redirect":
            self._send(302, {"Location": query["to"]}, b"")
        elif path == "/reset":
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.close_connection = True
            return
        else:
            self._send(404, {}, b"no such path")

    def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass
        self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle


class WebhookServer:
    """A threaded HTTP(S) server on ``host`` and a free port; ``stop()`` ends it."""

    def __init__(self, *, tls: bool = False, host: str = "127.0.0.1", port: int = 0) -> None:
        self.tls = tls
        self.host = host
        self.connections: list[tuple[str, float]] = []
        self.requests: list[Received] = []
        self.huge_bytes_sent: list[int] = []
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Response]] = {}
        self._held: dict[str, threading.Event] = {}
        self._stopped = threading.Event()
        self.ca: Any = None
        self._server = _Server((host, port), _Handler)
        self._server.owner = self
        if tls:
            import trustme

            self.ca = trustme.CA()
            cert = self.ca.issue_cert("localhost", "hooks.test", "127.0.0.1")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            cert.configure_cert(context)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # -- what tests call -----------------------------------------------------------

    def url(self, path: str, host: str | None = None) -> str:
        return f"{'https' if self.tls else 'http'}://{host or self.host}:{self.port}{path}"

    def script(self, path: str, responses: list[Response]) -> None:
        with self._lock:
            self._scripts[path] = list(responses)

    def hold(self, path: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._held[path] = event
        return event

    def requests_to(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if urlsplit(r.path).path == path]

    def client_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts this server's CA."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context

    def stop(self) -> None:
        self._stopped.set()
        for event in self._held.values():
            event.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    # -- the handler's side --------------------------------------------------------

    def _connected(self, addr: Any) -> None:
        with self._lock:
            self.connections.append((f"{addr[0]}:{addr[1]}", time.monotonic()))

    def _received(self, request: Received) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_scripted(self, path: str) -> Response | None:
        with self._lock:
            queue = self._scripts.get(path)
            if not queue:
                return None
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def _wait_if_held(self, path: str) -> None:
        with self._lock:
            event = self._held.get(path)
        if event is not None:
            event.wait(60)


@contextmanager
def running(*, tls: bool = False) -> Iterator[WebhookServer]:
    server = WebhookServer(tls=tls)
    try:
        yield server
    finally:
        server.stop()
