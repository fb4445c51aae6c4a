"""A private PostgreSQL cluster for the fault scenarios: ours to restart, slow down or re-clock.

The machine's shared server is never touched. The cluster lives in a temporary
directory, listens on 127.0.0.1 on a free port (and a private Unix socket), and
runs Debian's binaries as the ``postgres`` OS user when the tests run as root
(``initdb`` and ``pg_ctl`` refuse to run as root). Each scenario gets a fresh
database cloned from a migrated template, so sabotage (a dropped index, an
audit trigger) never leaks into the next scenario.

The server's wall clock can be shifted with libfaketime (``FAKETIME_TIMESTAMP_FILE``):
the file holds an offset such as ``+0`` or ``-600`` and is re-read every second,
so the database's ``now()`` jumps while the replicas' clocks do not.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

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


def find_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    """One throwaway PostgreSQL server. ``start()``, ``restart()``, ``stop()``."""

    def __init__(self, base: Path, *, faketime: bool = False) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql/*/bin")
        self.bindir = bindir
        self.base = base
        self.data = base / "data"
        self.sockets = base / "sock"
        self.log = base / "server.log"
        self.clock_file = base / "faketime"
        self.port = free_port()
        self.faketime = faketime and Path(FAKETIME_LIB).exists()
        self._as_postgres = os.geteuid() == 0

    # -- process control ---------------------------------------------------------

    def _run(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            # runuser resets the environment: pass what the server needs explicitly
            extra = [f"{k}={v}" for k, v in (env or {}).items()]
            cmd = ["runuser", "-u", "postgres", "--", "env", *extra, *cmd]
        result = subprocess.run(
            cmd, capture_output=True, text=True, check=False, cwd=self.base, env=None
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout + result.stderr

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
        self.sockets.mkdir(exist_ok=True)
        self.clock_file.write_text("+0\n")
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            for path in (self.base, self.sockets):
                os.chown(path, pw.pw_uid, pw.pw_gid)
            os.chmod(self.clock_file, 0o644)
            self.base.chmod(0o755)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--no-sync", "--locale=C.UTF-8",
        )  # fmt: skip

    def start(self) -> None:
        options = " ".join(f"-c {k}={v!r}" if " " in v else f"-c {k}={v}" for k, v in {
            **SERVER_OPTIONS,
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockets),
        }.items())  # fmt: skip
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60",
            "start", env=self._server_env(),
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

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

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.url(dbname), **kwargs)

    def sql(self, dbname: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

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
