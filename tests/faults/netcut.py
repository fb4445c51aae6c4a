"""A network path between one replica and PostgreSQL that the test can cut: a namespace of its own.

The test makes a network namespace and a veth pair (``10.213.N.1`` on this
side, ``10.213.N.2`` inside). A replica given :meth:`NetCut.url` connects to
``10.213.N.2``, where :mod:`tests.faults.forward` (run inside the namespace)
passes the bytes back over the veth to ``10.213.N.1``, where a
:class:`~tests.faults.harness.FaultProxy` forwards them to the server on
loopback. Every byte of that replica's database traffic crosses the veth twice,
and nothing else does: its NATS, HTTP and metrics traffic stays on loopback.

:meth:`NetCut.cut` sets the namespace's end of the veth down. The kernel then
drops every packet of the path, both ways, silently: no RST, no error, TCP
retransmits into nothing, new connections time out. :meth:`NetCut.heal` sets it
up again. :meth:`NetCut.dropped` reads the kernel's drop counter of this side
(the witness that packets were sent into the cut).

Needs root (``ip netns``, ``ip link``); :func:`available` says whether it works here.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from .cluster import ROOT
from .harness import FaultProxy


def _ip(
    *args: str, netns: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=10)


def available() -> bool:
    """Whether this process can make network namespaces and veth pairs."""
    if os.geteuid() != 0:
        return False
    name = f"pgsched-probe-{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (OSError, subprocess.SubprocessError):
        return False
    try:
        probe = f"pgp{os.getpid() % 100000}"
        ok = _ip("link", "add", probe, "type", "veth", "peer", "name", probe + "x", check=False)
        if ok.returncode == 0:
            _ip("link", "del", probe, check=False)
        return ok.returncode == 0
    finally:
        _ip("netns", "del", name, check=False)


class NetCut:
    def __init__(self, pg_port: int, log: Path) -> None:
        n = random.randrange(1, 250)
        tag = f"{os.getpid() % 10000}{n}"
        self.netns = f"pgsched-cut-{tag}"
        self.outer, self.inner = f"pgc{tag}", f"pgc{tag}i"
        self.outer_ip, self.inner_ip = f"10.213.{n}.1", f"10.213.{n}.2"
        self.is_cut = False
        self._forwarder: subprocess.Popen[str] | None = None
        self._proxy: FaultProxy | None = None
        try:
            _ip("netns", "add", self.netns)
            _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            _ip("link", "set", self.inner, "netns", self.netns)
            _ip("addr", "add", f"{self.outer_ip}/30", "dev", self.outer)
            _ip("link", "set", self.outer, "up")
            _ip("addr", "add", f"{self.inner_ip}/30", "dev", self.inner, netns=self.netns)
            _ip("link", "set", self.inner, "up", netns=self.netns)
            _ip("link", "set", "lo", "up", netns=self.netns)
            self._proxy = FaultProxy(pg_port, listen=self.outer_ip)
            self.port = 15432
            with log.open("ab") as errors:
                self._forwarder = subprocess.Popen(
                    ["ip", "netns", "exec", self.netns, sys.executable, "-m",
                     "tests.faults.forward", self.inner_ip, str(self.port), self.outer_ip,
                     str(self._proxy.port)],
                    cwd=ROOT, stdout=subprocess.PIPE, stderr=errors, text=True,
                    start_new_session=True,
                )  # fmt: skip
            assert self._forwarder.stdout is not None
            line = self._forwarder.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"the forwarder in {self.netns} did not start: {line!r}")
        except BaseException:
            self.close()
            raise

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@{self.inner_ip}:{self.port}/{dbname}"

    def cut(self) -> None:
        _ip("link", "set", self.inner, "down", netns=self.netns)
        self.is_cut = True

    def heal(self) -> None:
        _ip("link", "set", self.inner, "up", netns=self.netns)
        self.is_cut = False

    def dropped(self) -> int:
        """Packets this side's veth dropped (sent while the other end was down)."""
        stats = Path(f"/sys/class/net/{self.outer}/statistics/tx_dropped")
        return int(stats.read_text()) if stats.exists() else 0

    def connections(self) -> int:
        """Connections that crossed the path so far (the proxy on this side counts them)."""
        return self._proxy.connections if self._proxy else 0

    def close(self) -> None:
        if self._forwarder is not None and self._forwarder.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._forwarder.pid, signal.SIGKILL)
            self._forwarder.wait(10)
        if self._forwarder is not None and self._forwarder.stdout is not None:
            self._forwarder.stdout.close()
        if self._proxy is not None:
            self._proxy.close()
        _ip("link", "del", self.outer, check=False)
        _ip("netns", "del", self.netns, check=False)
