"""A private PostgreSQL cluster for the fault scenarios: ours to restart, slow down or re-clock.

The machine's shared server is never touched (``tests/pgcluster.py``: a
temporary directory, a free port of 127.0.0.1, a private Unix socket). Each
scenario gets a fresh database cloned from a migrated template, so sabotage (a
dropped index, an audit trigger) never leaks into the next scenario.

The server's wall clock can be shifted with libfaketime (``FAKETIME_TIMESTAMP_FILE``):
the file holds an offset such as ``+0`` or ``-600`` and is re-read every second,
so the database's ``now()`` jumps while the replicas' clocks do not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg

from tests import pgcluster

ROOT = Path(__file__).resolve().parents[2]
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SERVER_OPTIONS = {
    "max_connections": "300",
    # fsync off: a crashed or restarted server keeps the OS buffers (synchronous_commit stays on)
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "log_line_prefix": "%m [%p] %a ",
    "log_min_messages": "warning",
    "log_connections": "off",
}


class Cluster(pgcluster.PrivateCluster):
    """One throwaway PostgreSQL server. ``start()``, ``restart()``, ``stop()``."""

    def __init__(self, base: Path, *, faketime: bool = False) -> None:
        bindir = pgcluster.find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
        super().__init__(base, bindir)
        self.clock_file = base / "faketime"
        self.faketime = faketime and Path(FAKETIME_LIB).exists()

    # -- process control ---------------------------------------------------------

    def _server_env(self) -> dict[str, str]:
        if not self.faketime:
            return {}
        return {
            "LD_PRELOAD": FAKETIME_LIB,
            "FAKETIME_TIMESTAMP_FILE": str(self.clock_file),
            "FAKETIME_CACHE_DURATION": "1",
            "DONT_FAKE_MONOTONIC": "1",
        }

    def init(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.clock_file.write_text("+0\n")
        self.clock_file.chmod(0o644)
        self.initdb("--no-sync")
        self.configure(SERVER_OPTIONS, by="tests/faults/cluster.py")

    def start(self, env: Mapping[str, str] | None = None) -> None:
        super().start({**self._server_env(), **(env or {})})

    def restart(self, mode: str = "immediate") -> None:
        """Crash-restart (``immediate``: no shutdown checkpoint, like a power cut of the server)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.start()

    def set_clock_offset(self, seconds: float) -> None:
        """Shift the server's wall clock (libfaketime reads the file within about a second)."""
        if not self.faketime:
            raise RuntimeError("this cluster runs without libfaketime")
        self.clock_file.write_text(f"{seconds:+.0f}\n")

    # -- connections -------------------------------------------------------------

    def postmaster_start_time(self, dbname: str = "postgres") -> Any:
        return self.sql(dbname, "SELECT pg_postmaster_start_time()")[0][0]

    # -- databases ---------------------------------------------------------------

    def migrate_template(self, name: str = "pgsched_tpl") -> str:
        """Create and migrate the template database every scenario clones."""
        self.sql("postgres", f'DROP DATABASE IF EXISTS "{name}"')
        self.sql("postgres", f'CREATE DATABASE "{name}"')
        env = {
            **os.environ,
            "DATABASE_URL": self.url(name),
            "DJANGO_SETTINGS_MODULE": "tests.faults.replica_settings",
        }
        for key in ("PGSCHED_TEST_DB_NAME", "PGSCHED_FAILPOINTS", "PGSCHED_TEST_OVERRIDES"):
            env.pop(key, None)
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        return name

    def clone(self, name: str, template: str = "pgsched_tpl") -> str:
        self.sql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.sql("postgres", f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error):
            self.sql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def private_cluster(*, faketime: bool = False) -> Iterator[Cluster]:
    """Start a migrated private cluster; stop and delete it afterwards."""
    base = Path(tempfile.mkdtemp(prefix="pgsched-faults-"))
    cluster = Cluster(base, faketime=faketime)
    try:
        cluster.init()
        cluster.start()
        cluster.migrate_template()
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def wait_for_server(cluster: Cluster, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            cluster.sql("postgres", "SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
