"""Real ``runscheduler`` subprocesses on the test database, for kill -9 and race tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.processes import tied_to_this_process

ROOT = Path(__file__).resolve().parents[2]

# short intervals so faults heal within a test's time
FAST = {
    "PLANNER_INTERVAL": 0.5,
    "EXECUTOR_POLL_INTERVAL": 1.0,
    "REAPER_INTERVAL": 0.5,
    "SHUTDOWN_GRACE": 10,
    "LEASE_TRUST_MARGIN": 0.5,
    "RETRY_BACKOFF_BASE": 0.2,
    "RETRY_BACKOFF_MAX": 1,
}


class Replica:
    """One ``manage.py runscheduler`` process in its own process group."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runscheduler", "--worker-id", name, *args],
            cwd=cwd,  # a released version's tree runs its own code (the rolling upgrade)
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=tied_to_this_process(),
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: {text!r} not logged within {timeout}s:\n{self.log()}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(
                f"{self.name} did not stop within {timeout}s:\n{self.log()}"
            ) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill9()
        self._log.close()


@pytest.fixture
def replicas(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., Replica]]:
    """Start replicas with ``start(name, *args, overrides={...})``; all are killed at the end."""
    started: list[Replica] = []
    base_env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PGSCHED_TEST_DB_NAME": connection.settings_dict["NAME"],
        "PYTHONUNBUFFERED": "1",
        "PGSCHED_LOG_LEVEL": "INFO",
    }

    def start(name: str, *args: str, overrides: dict[str, Any] | None = None) -> Replica:
        env = {**base_env, "PGSCHED_TEST_OVERRIDES": json.dumps({**FAST, **(overrides or {})})}
        replica = Replica(name, list(args), env, tmp_path)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.close()
    connection.close()
