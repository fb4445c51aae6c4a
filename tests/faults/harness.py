"""The fault harness: replicas, a supervisor, a TCP fault proxy, witnesses and scrapes.

Replicas are real ``manage.py runscheduler`` processes, each in its own process
group (so ``kill -9`` of the group leaves nothing behind), each with its own log
file, failpoints (``PGSCHED_FAILPOINTS``) and failpoint witness log, a metrics
port, and optional test-only shims (``shim/sitecustomize.py``: wall-clock skew,
fencing disabled). Every incarnation gets a distinct ``--worker-id`` (``a``,
``a.2``, ...), and the fleet remembers which OS pid ran which worker id: the
invariant checker uses that to attribute every database write (I5).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.pgcluster import free_port
from tests.processes import tied_to_this_process

from .cluster import ROOT

SHIM = Path(__file__).resolve().parent / "shim"

# Timing profile of the fault suite: faults heal within seconds, not minutes.
FAST: dict[str, Any] = {
    "PLANNER_INTERVAL": 0.5,
    "PLANNER_LOOKAHEAD": 1,
    "EXECUTOR_POLL_INTERVAL": 1.0,
    "REAPER_INTERVAL": 0.5,
    "SHUTDOWN_GRACE": 5,
    "LEASE_TRUST_MARGIN": 0.3,
    "RETRY_BACKOFF_BASE": 0.2,
    "RETRY_BACKOFF_MAX": 1,
    "DEFAULT_TIMEOUT": 2,
    "LOCK_TIMEOUT": 1,
    "STATEMENT_TIMEOUT": 10,
    "IDLE_IN_TRANSACTION_TIMEOUT": 2,
    "RETENTION": None,
}


def wait_until(
    condition: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.1,
    diagnose: Callable[[], str] | None = None,
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


def child_env(database_url: str) -> dict[str, str]:
    """The environment of a process the suite starts on ``database_url``: this one's, without
    its pgsched and pytest variables, with the replicas' settings module."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PGSCHED_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env["DJANGO_SETTINGS_MODULE"] = "tests.faults.replica_settings"
    env["DATABASE_URL"] = database_url
    return env


class Replica:
    """One ``runscheduler`` incarnation."""

    def __init__(
        self,
        worker_id: str,
        *,
        database_url: str,
        log_dir: Path,
        concurrency: int = 4,
        overrides: dict[str, Any] | None = None,
        failpoints: str = "",
        skew: float | None = None,
        nofence: bool = False,
        args: Iterable[str] = (),
        metrics: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.log_path = log_dir / f"{worker_id}.log"
        self.failpoint_log = log_dir / f"{worker_id}.failpoints"
        self.metrics_port = free_port() if metrics else None
        self.spec = {
            "concurrency": concurrency,
            "overrides": overrides,
            "failpoints": failpoints,
            "skew": skew,
            "nofence": nofence,
            "args": list(args),
            "metrics": metrics,
            "env": env,
            "database_url": database_url,
        }
        run_env = child_env(database_url)
        run_env.update(
            {
                "PGSCHED_TEST_OVERRIDES": json.dumps({**FAST, **(overrides or {})}),
                "PYTHONUNBUFFERED": "1",
                "PGSCHED_LOG_LEVEL": "INFO",
                "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT)]),
                "PGSCHED_FAILPOINT_LOG": str(self.failpoint_log),
            }
        )
        if failpoints:
            run_env["PGSCHED_FAILPOINTS"] = failpoints
        if skew is not None:
            run_env["PGSCHED_FAULT_SKEW"] = str(skew)
        if nofence:
            run_env["PGSCHED_FAULT_NOFENCE"] = "1"
        run_env.update(env or {})
        command = [
            sys.executable, "-m", "django", "runscheduler", "--worker-id", worker_id,
            "--concurrency", str(concurrency), *args,
        ]  # fmt: skip
        if self.metrics_port:
            command += ["--metrics-port", str(self.metrics_port)]
        self._log = self.log_path.open("ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=run_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=tied_to_this_process(),
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def failpoint_hits(self) -> list[str]:
        """Lines the engine's failpoints wrote before acting (``time pid point action``)."""
        if not self.failpoint_log.exists():
            return []
        return self.failpoint_log.read_text().splitlines()

    def wait_ready(self, timeout: float = 60.0) -> Replica:
        self.wait_for_log("running loops", timeout)
        return self

    def wait_for_log(self, text: str | re.Pattern[str], timeout: float = 30.0) -> None:
        def seen() -> bool:
            log = self.log()
            found = text.search(log) if isinstance(text, re.Pattern) else text in log
            if not found and not self.alive:
                raise AssertionError(
                    f"{self.worker_id} exited {self.proc.returncode} before logging "
                    f"{text!r}:\n{log[-3000:]}"
                )
            return bool(found)

        wait_until(seen, timeout, f"{self.worker_id} to log {text!r}", interval=0.05)

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.worker_id} still running after {timeout}s:\n{self.log()[-3000:]}"
            ) from None

    def signal(self, sig: int) -> None:
        if self.alive:
            os.kill(self.pid, sig)

    def kill9(self) -> int:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        return self.proc.wait(10)

    def stopped_state(self) -> str:
        """The process state letter from /proc (``T`` while SIGSTOPped)."""
        text = Path(f"/proc/{self.pid}/stat").read_text()
        return text.rsplit(")", 1)[1].split()[0]

    def scrape(self) -> dict[str, float]:
        """The replica's Prometheus samples: ``{"name{labels}": value}``."""
        assert self.metrics_port, "started without a metrics port"
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
        samples: dict[str, float] = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples

    def close(self) -> None:
        if self.alive:
            self.kill9()
        self._log.close()


def metric_sum(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


@dataclass
class Fleet:
    """The replicas of one scenario, their incarnations, and an optional supervisor."""

    database_url: str
    log_dir: Path
    replicas: list[Replica] = field(default_factory=list)
    workers_by_pid: dict[int, str] = field(default_factory=dict)
    concurrency_by_worker: dict[str, int] = field(default_factory=dict)
    exits: list[tuple[str, int]] = field(default_factory=list)  # (worker id, return code)
    _counts: dict[str, int] = field(default_factory=dict)
    _supervisors: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self, name: str, **options: Any) -> Replica:
        """Start a replica; a second incarnation of ``name`` is called ``name.2``, and so on."""
        n = self._counts[name] = self._counts.get(name, 0) + 1
        worker_id = name if n == 1 else f"{name}.{n}"
        options.setdefault("database_url", self.database_url)
        replica = Replica(worker_id, log_dir=self.log_dir, **options)
        self.replicas.append(replica)
        self.workers_by_pid[replica.pid] = worker_id
        self.concurrency_by_worker[worker_id] = options.get("concurrency", 4)
        return replica

    def restart(self, replica: Replica, **changes: Any) -> Replica:
        """A new incarnation with the same options (``changes`` override some)."""
        spec = {**replica.spec, **changes}
        return self.start(replica.worker_id.split(".")[0], **spec)

    def supervise(
        self,
        replica: Replica,
        *,
        max_restarts: int = 20,
        on_restart: Callable[[Replica, int], dict[str, Any]] | None = None,
    ) -> None:
        """Restart ``replica`` (and its successors) whenever it dies, like a pod's restartPolicy."""

        def loop() -> None:
            current, restarts = replica, 0
            while not self._stop.is_set() and restarts < max_restarts:
                code = current.proc.poll()
                if code is None:
                    self._stop.wait(0.05)
                    continue
                restarts += 1
                changes = on_restart(current, restarts) if on_restart else {}
                dead, current = current, self.restart(current, **changes)
                # recorded after the successor exists: a test that waits for n exits may
                # then take ``replicas[-1]`` as the incarnation that replaced the n-th
                self.exits.append((dead.worker_id, code))

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self._supervisors.append(thread)

    def stop_supervising(self) -> None:
        self._stop.set()
        for thread in self._supervisors:
            thread.join(5)

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def stop_all(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM every live replica, wait for each; return their exit codes."""
        self.stop_supervising()
        live = self.live()
        for replica in live:
            replica.signal(signal.SIGTERM)
        return [replica.wait_exit(timeout) for replica in live]

    def close(self) -> None:
        self.stop_supervising()
        for replica in self.replicas:
            replica.close()

    def logs(self) -> str:
        return "\n".join(f"===== {r.worker_id}\n{r.log()[-4000:]}" for r in self.replicas)


# -- a TCP fault proxy ---------------------------------------------------------------


class FaultProxy:
    """A TCP proxy between replicas and PostgreSQL that can pass, delay, blackhole or reset.

    ``blackhole`` keeps every socket open and forwards nothing in either direction
    (bytes are held, as TCP retransmission would hold them, and delivered after
    ``heal()``); ``reset()`` aborts every proxied connection (RST to both sides).
    Runs its own event loop on a daemon thread.
    """

    def __init__(
        self, upstream_port: int, upstream_host: str = "127.0.0.1", *, listen: str = "127.0.0.1"
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.listen = listen
        self.port = 0  # the serving thread sets it before it reports ready
        self.mode = "pass"
        self.delay = 0.0
        self.held = 0  # bytes held back while blackholed
        self.connections = 0
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> None:
            self._server = await asyncio.start_server(self._accept, self.listen, 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()
            async with self._server:
                await self._server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            self._loop.run_until_complete(main())
        # closed: abort what is still connected, let cancelled tasks finish, close the loop
        for a, b in list(self._pairs):
            a.transport.abort()
            b.transport.abort()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_w.close()
            return
        self.connections += 1
        pair = (client_w, up_w)
        self._pairs.add(pair)
        try:
            await asyncio.gather(
                self._pipe(client_r, up_w), self._pipe(up_r, client_w), return_exceptions=True
            )
        finally:
            self._pairs.discard(pair)
            for writer in pair:
                with contextlib.suppress(Exception):
                    writer.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            counted = False
            while self.mode == "blackhole":
                if not counted:
                    self.held += len(data)
                    counted = True
                await asyncio.sleep(0.02)
            if self.delay:
                await asyncio.sleep(self.delay)
            writer.write(data)
            await writer.drain()
        writer.close()

    def url(self, dbname: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@{self.listen}:{self.port}/{dbname}"

    def blackhole(self) -> None:
        self.mode = "blackhole"

    def heal(self) -> None:
        self.mode = "pass"
        self.delay = 0.0

    def reset(self) -> int:
        """Abort every proxied connection; returns how many were cut."""
        pairs = list(self._pairs)

        def abort() -> None:
            for a, b in pairs:
                a.transport.abort()
                b.transport.abort()

        self._loop.call_soon_threadsafe(abort)
        return len(pairs)

    def close(self) -> None:
        self.heal()

        def shutdown() -> None:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()

        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(shutdown)
        self._thread.join(10)
        self._thread.join(5)
