"""A small HTTP server for ``/metrics``, ``/healthz`` and ``/readyz`` that no client can stall.

One event-loop thread accepts connections and reads requests; only a complete
request reaches a worker thread (a small pool: handlers read the database).
So an idle or half-sent connection costs a socket, never a thread, and:

- each connection has ``REQUEST_TIMEOUT`` seconds to send its request line and
  headers, and as long again to take the response; then it is closed;
- at most ``MAX_CONNECTIONS`` connections are open at once. A new one beyond
  that closes the oldest connection still sending its request (a slow or idle
  client), so a flood of idle connections cannot lock a probe out; when every
  open connection is being answered, the new one gets ``503`` at once;
- a client that goes away (reset, timeout, garbage) is logged at DEBUG, one
  line, no traceback. A handler that raises answers ``500`` and is logged with
  its traceback (that is a bug of ours, not the client's).

Every response is ``HTTP/1.1`` with ``Connection: close``: one request per
connection, as Prometheus and the kubelet's probes use it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT = 10.0  # seconds to send the request, and again to read the response
MAX_CONNECTIONS = 64  # open at once
WORKERS = 4  # threads answering complete requests
LINE_LIMIT = 8192  # bytes in the request line or one header line
MAX_HEADERS = 100


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain"


App = Callable[[str], Response]  # path (without the query) -> response; runs on a worker thread


class BadRequest(Exception):
    """The client sent something that is not an HTTP request we serve."""


class ProbeServer:
    """``serve_forever()`` on a thread of its own; ``shutdown()`` and ``server_close()`` to stop.

    The socket is bound when the object is made, so a bad host or a taken port
    fails at once, in the caller; ``server_address`` is the bound address.
    """

    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
        workers: int = WORKERS,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.on_close = on_close
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, address = infos[0]
        self.socket = socket.socket(family, kind, proto)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pgsched-http")
        # connections still sending their request (oldest first) -> their writer
        self._reading: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._answering = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self.evicted = 0  # connections closed to make room for a newer one
        self.refused = 0  # connections answered 503: every slot was answering

    @property
    def open_connections(self) -> int:
        return len(self._reading) + self._answering

    # -- lifecycle ---------------------------------------------------------------------

    def serve_forever(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop serving and wait for ``serve_forever()`` to return."""
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop already closed
                pass
            self._stopped.wait(5)

    def server_close(self) -> None:
        self.socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stopping.is_set():
            return
        server = await asyncio.start_server(self._client, sock=self.socket, limit=LINE_LIMIT)
        async with server:
            await self._stop.wait()
            for writer in list(self._reading.values()):
                writer.transport.abort()

    # -- one connection ----------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        task = asyncio.current_task()
        assert task is not None
        if self.open_connections >= self.max_connections and not self._make_room():
            self.refused += 1
            logger.debug("metrics server: %d connections open; refused one", self.open_connections)
            await self._reply_and_close(reader, writer, HTTPStatus.SERVICE_UNAVAILABLE)
            return
        self._reading[task] = writer
        try:
            try:
                async with asyncio.timeout(self.request_timeout):
                    method, path = await self._read_request(reader)
            finally:
                self._reading.pop(task, None)
            self._answering += 1
            try:
                response = await self._answer(method, path)
                head = (
                    f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}\r\n"
                    f"Content-Type: {response.content_type}\r\n"
                    f"Content-Length: {len(response.body)}\r\n"
                    "Connection: close\r\n\r\n"
                ).encode("ascii")
                writer.write(head if method == "HEAD" else head + response.body)
                async with asyncio.timeout(self.request_timeout):
                    await writer.drain()
            finally:
                self._answering -= 1
            writer.close()
            return
        except BadRequest as exc:
            logger.debug("metrics server: bad request from %s: %s", peer, exc)
            await self._reply_and_close(reader, writer, HTTPStatus.BAD_REQUEST)
            return
        except TimeoutError:
            logger.debug("metrics server: %s timed out", peer)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            logger.debug("metrics server: %s went away (%s)", peer, type(exc).__name__)
        writer.transport.abort()

    def _make_room(self) -> bool:
        """Close the oldest connection still sending its request; False when there is none."""
        if not self._reading:
            return False
        writer = self._reading.pop(next(iter(self._reading)))
        writer.transport.abort()  # its reader sees the end of the stream
        self.evicted += 1
        logger.debug("metrics server: closed an idle connection to make room")
        return True

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        try:
            line = await reader.readline()
            if not line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(line, None)
            parts = line.decode("latin-1").split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                raise BadRequest(f"not a request line: {line[:80]!r}")
            for _ in range(MAX_HEADERS):
                header = await reader.readline()
                if not header.endswith(b"\n"):
                    raise asyncio.IncompleteReadError(header, None)
                if header in (b"\r\n", b"\n"):
                    return parts[0], parts[1]
            raise BadRequest("too many header lines")
        except (ValueError, asyncio.LimitOverrunError) as exc:  # a line over LINE_LIMIT
            raise BadRequest("a line too long") from exc

    async def _answer(self, method: str, path: str) -> Response:
        if method not in ("GET", "HEAD"):
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"GET or HEAD\n")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.pool, self._call, path.split("?", 1)[0])
        except RuntimeError:  # the pool shut down under us
            return Response(HTTPStatus.SERVICE_UNAVAILABLE, b"shutting down\n")

    def _call(self, path: str) -> Response:
        try:
            return self.app(path)
        except Exception:
            logger.exception("metrics server: %s failed", path)
            return Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n")
        finally:
            if self.on_close is not None:
                self.on_close()

    async def _reply_and_close(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: HTTPStatus
    ) -> None:
        """Answer without reading the request, then a lingering close: the answer is not lost
        to a reset for the request bytes left unread."""
        body = f"{status.phrase}\n".encode()
        writer.write(
            f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
            + body
        )
        try:
            async with asyncio.timeout(1.0):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                drained = 0
                while drained < 65536 and (chunk := await reader.read(4096)):
                    drained += len(chunk)
        except (TimeoutError, ConnectionError, OSError, ValueError):
            pass
        writer.transport.abort()
