"""Processes of a benchmark: replicas, workers and their CPU and memory from ``/proc``.

A replica is a real ``manage.py runscheduler`` (``python -m django runscheduler``
with ``bench.settings``); peers run with their own venv's Python. Every child
gets its own process group and is stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


STARTED: list[Proc] = []


def stop_all() -> int:
    """Stop every child still running; return how many there were."""
    alive = [p for p in STARTED if p.alive()]
    for proc in alive:
        proc.stop(grace=10.0)
    return len(alive)


def django_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PGSCHED_BENCH_DSN": dsn,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    }
    for key in ("DATABASE_URL", "PGSCHED_TEST_OVERRIDES", "PGSCHED_FAILPOINTS"):
        env.pop(key, None)
    env.update(extra)
    return env


class Proc:
    """A child process with its log file; ``stop()`` ends it (and only it).

    Every Proc is remembered in ``STARTED`` so that the bench can stop whatever
    a failed benchmark left running (:func:`stop_all`).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        log: Path,
        stdin: bool = False,
        stdout: bool = False,
        worker_id: str | None = None,
    ) -> None:
        self.argv = list(argv)
        self.worker_id = worker_id
        self.log = log
        self._log: IO[str] = log.open("a")
        self.popen = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else self._log,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        STARTED.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def readline(self) -> str:
        assert self.popen.stdout is not None
        return self.popen.stdout.readline().strip()

    def writeline(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = 30.0) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()
        return int(self.popen.returncode)

    def cpu_seconds(self) -> float:
        """User + system CPU of the process (all threads) so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


_replicas = 0


def replica(
    dsn: str,
    log: Path,
    *,
    loops: str = "planner,executor,maintenance",
    concurrency: int = 8,
    worker_id: str | None = None,
    overrides: str | None = None,
    environ: dict[str, str] | None = None,
) -> Proc:
    """Start ``manage.py runscheduler`` with ``bench.settings`` (``environ``: more variables)."""
    global _replicas
    _replicas += 1
    worker_id = worker_id or f"bench-{os.getpid()}-{_replicas}"
    argv = [
        sys.executable, "-m", "django", "runscheduler", "--no-sync",
        "--loops", loops, "--concurrency", str(concurrency),
    ]  # fmt: skip
    argv += ["--worker-id", worker_id]
    extra = {"PGSCHED_BENCH_OVERRIDES": overrides} if overrides else {}
    env = django_env(dsn, **extra, **(environ or {}))
    return Proc(argv, env=env, log=log, worker_id=worker_id)


def wait_ready(
    conn: psycopg.Connection[Any],
    procs: Sequence[Proc],
    roles: Sequence[str],
    timeout: float = 60.0,
) -> None:
    """Until each process has a session for each role (its ``application_name``).

    Sessions are named ``pgsched <role> <worker id>`` (the ``--worker-id``, or
    ``host:pid`` in engines that name them after the process).
    """
    deadline = time.monotonic() + timeout
    wanted = {(p, role) for p in procs for role in roles}

    def named(name: str, p: Proc, role: str) -> bool:
        if not name.startswith(f"pgsched {role} "):
            return False
        return name.endswith(f":{p.pid}") or bool(p.worker_id and name.endswith(p.worker_id))

    while True:
        names = [r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")]
        found = {(p, role) for p, role in wanted for name in names if named(name, p, role)}
        if found == wanted:
            return
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{' '.join(p.argv)} exited; see {p.log}")
        if time.monotonic() > deadline:
            missing = sorted(f"{p.worker_id or p.pid}: {role}" for p, role in wanted - found)
            raise RuntimeError(f"replicas not ready after {timeout}s: missing {missing}")
        time.sleep(0.05)
