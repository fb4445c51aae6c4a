"""What every benchmark gets: the private cluster, the profile, logs, peers' venvs, probes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from . import machine
from .cluster import Cluster
from .procs import ROOT, Proc, django_env
from .profiles import Profile

DB = "bench"
TEMPLATE = "bench_tpl"


@dataclass
class Context:
    cluster: Cluster
    profile: Profile
    logs: Path
    venvs: Path
    _seq: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def dsn(self) -> str:
        return self.cluster.url(DB)

    def connect(self, db: str = DB) -> psycopg.Connection[Any]:
        return self.cluster.connect(db)

    def log(self, name: str) -> Path:
        self._seq += 1
        return self.logs / f"{self._seq:03d}-{name}.log"

    def say(self, message: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        print(f"[{stamp} load {machine.load()[0]:.2f}] {message}", file=sys.stderr, flush=True)

    def fresh_database(self) -> None:
        """The benchmark database, cloned from the migrated template."""
        self.cluster.create_database(DB, template=TEMPLATE)
        with self.connect() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def migrate_template(self) -> None:
        self.cluster.create_database(TEMPLATE)
        proc = Proc(
            [sys.executable, "-m", "django", "migrate", "-v", "0"],
            env=django_env(self.cluster.url(TEMPLATE)),
            log=self.log("migrate"),
        )
        if proc.popen.wait() != 0:
            raise RuntimeError(f"migrate failed; see {proc.log}")
        proc.stop()
        with self.connect(TEMPLATE) as conn:
            conn.execute("VACUUM ANALYZE")  # nothing left for autovacuum to do in the copies

    def peer_python(self, venv: str) -> str:
        return str(self.venvs / venv / "bin" / "python")

    def peer_run(self, venv: str, module: str, *args: str, db: str) -> None:
        """Run a peer driver to completion (setup, fill)."""
        proc = self.peer_proc(venv, module, *args, db=db)
        if proc.popen.wait() != 0:
            raise RuntimeError(f"{module} {' '.join(args)} failed; see {proc.log}")
        proc.stop()

    def peer_proc(self, venv: str, module: str, *args: str, db: str, stdout: bool = False) -> Proc:
        argv = [
            self.peer_python(venv),
            "-m",
            f"bench.peers.{module}",
            args[0],
            self.cluster.url(db),
        ]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        return Proc([*argv, *args[1:]], env=env, log=self.log(module), stdout=stdout)


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def wal_lsn(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def wait_until(
    check: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = ""
) -> float:
    """Poll ``check`` until true; return the seconds waited (TimeoutError after ``timeout``)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or check}")
        time.sleep(interval)
    return time.monotonic() - started


def server_cpu_seconds(cluster: Cluster) -> float:
    """CPU used so far by the cluster's processes (postmaster's children), in seconds."""
    from .procs import CLOCK_TICKS

    try:
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster or stat.parent.name == str(postmaster):
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS
