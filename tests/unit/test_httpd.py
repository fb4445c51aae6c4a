"""The metrics server (ops/httpd.py) with real sockets: idle floods, timeouts, dropped clients."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from django_pgsched.ops.httpd import ProbeServer, Response


def ok_app(path: str) -> Response:
    return Response(200, b"ok\n") if path == "/healthz" else Response(404, b"not found\n")


@pytest.fixture
def serving() -> Iterator[object]:
    servers: list[tuple[ProbeServer, threading.Thread]] = []

    def start(app=ok_app, **options) -> ProbeServer:
        server = ProbeServer("127.0.0.1", 0, app, **options)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return server

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(5)


def get(server: ProbeServer, path: str = "/healthz", timeout: float = 5.0) -> tuple[int, bytes]:
    with socket.create_connection(server.server_address, timeout=timeout) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_answers_get_and_head_and_closes(serving):
    server = serving()
    assert get(server) == (200, b"ok\n")
    assert get(server, "/healthz?verbose=1") == (200, b"ok\n")
    assert get(server, "/nope")[0] == 404
    with socket.create_connection(server.server_address, timeout=5) as conn:
        conn.sendall(b"HEAD /healthz HTTP/1.0\r\n\r\n")
        data = conn.recv(65536)
    assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"\r\n\r\n")  # no body


def test_450_idle_connections_hold_no_threads_and_a_probe_still_gets_in(serving):
    server = serving(max_connections=64)
    assert get(server) == (200, b"ok\n")  # the worker pool exists from here on
    threads_before = threading.active_count()
    idle = [socket.create_connection(server.server_address, timeout=5) for _ in range(450)]
    try:
        half = idle[-1]
        half.sendall(b"GET /healthz HTTP/1.1\r\n")  # a half-sent request among them
        deadline = time.monotonic() + 5
        while server.evicted < 450 - 64 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threading.active_count() <= threads_before + 1  # at most the pool's growth
        assert server.open_connections <= 64
        assert server.evicted >= 450 - 64  # the oldest idle ones made room
        assert get(server) == (200, b"ok\n")  # a probe is answered at once
    finally:
        for conn in idle:
            conn.close()


def test_a_half_sent_request_is_closed_after_the_timeout(serving):
    server = serving(request_timeout=0.3)
    with socket.create_connection(server.server_address, timeout=5) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never end
        started = time.monotonic()
        assert conn.recv(100) == b""  # closed by the server
        assert time.monotonic() - started < 3
    assert get(server) == (200, b"ok\n")


def test_when_every_connection_is_being_answered_a_new_one_gets_503(serving):
    release = threading.Event()

    def slow(path: str) -> Response:
        release.wait(5)
        return Response(200, b"slow\n")

    server = serving(slow, max_connections=2, workers=2)
    results: list[tuple[int, bytes]] = []
    busy = [threading.Thread(target=lambda: results.append(get(server))) for _ in range(2)]
    for thread in busy:
        thread.start()
    deadline = time.monotonic() + 5
    while server.open_connections < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert get(server)[0] == 503
        assert server.refused == 1
    finally:
        release.set()
        for thread in busy:
            thread.join(5)
    assert results == [(200, b"slow\n")] * 2


def test_dropped_and_garbage_clients_leave_no_traceback(serving, caplog, capfd):
    def big(path: str) -> Response:
        return Response(200, b"x" * 4_000_000)

    server = serving(big)
    caplog.set_level(logging.DEBUG, logger="django_pgsched.ops.httpd")
    for _ in range(5):  # ask for a large body and reset the connection before reading it
        conn = socket.create_connection(server.server_address, timeout=5)
        conn.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()
    with socket.create_connection(server.server_address, timeout=5) as conn:
        conn.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")  # e.g. a TLS hello
        assert conn.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection(server.server_address, timeout=5) as conn:
        conn.sendall(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n")
        assert conn.recv(100).startswith(b"HTTP/1.1 400")
    assert get(server)[0] == 200
    time.sleep(0.2)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_a_failing_handler_answers_500(serving, caplog):
    def broken(path: str) -> Response:
        raise RuntimeError("boom")

    server = serving(broken)
    assert get(server)[0] == 500
    assert any("boom" in str(r.exc_info) for r in caplog.records)


def test_the_bind_address_is_the_one_asked_for():
    server = ProbeServer("127.0.0.1", 0, ok_app)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()
    with pytest.raises(OSError):
        ProbeServer("203.0.113.1", 0, ok_app)  # not an address of this machine
