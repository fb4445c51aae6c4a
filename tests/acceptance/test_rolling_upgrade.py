"""A rolling upgrade from the last release, with replicas running throughout.

Replicas of the released version (its tree, taken from the repository's history)
run on a database its migrations made; this version's migrations are applied
while they run; replicas of this version start; the old ones stop on SIGTERM.
Nothing may fire twice, nothing may be lost, and the old replicas may not log an
error on the new schema. A migration that the released replicas cannot run beside
fails this test: see docs/how-to/upgrading.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.acceptance.conftest import FAST, ROOT, Replica

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(300)]

# the release upgraded from, and the commit its distribution was built from
RELEASED = "0.1.0"
RELEASE_COMMIT = "4092599fc40dbca0ee401c75fab5dae4726d9832"

SCHEDULES = {
    f"upgrade-{i}": {"job": "tests.witness", "cron": "* * * * * *", "misfire_policy": "skip"}
    for i in range(40)
}


def _released_tree(into: Path) -> Path:
    """The released version's package and test project, from the repository's history."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the rolling upgrade needs the repository's history (git)")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", RELEASE_COMMIT, "django_pgsched", "tests"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    version = (into / "django_pgsched").exists()
    assert version, f"{RELEASE_COMMIT} holds no django_pgsched"
    return into


@pytest.fixture
def upgrade_db() -> Iterator[str]:
    """A database of the test's own, dropped afterwards (the released migrations make it)."""
    name = f"pgsched_upgrade_{os.getpid()}"
    params = {**connection.get_connection_params(), "dbname": "postgres", "autocommit": True}
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(**params) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _env(db: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PGSCHED_TEST_DB_NAME": db,
        "PYTHONUNBUFFERED": "1",
        "PGSCHED_LOG_LEVEL": "INFO",
        "PGSCHED_TEST_OVERRIDES": json.dumps({**FAST, "SCHEDULES": SCHEDULES}),
    }


def _migrate(tree: Path, db: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "-v", "1"],
        cwd=tree,
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _rows(db: str, query: str) -> list[tuple]:
    params = {**connection.get_connection_params(), "dbname": db}
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as conn:
        return conn.execute(query).fetchall()


def test_a_rolling_upgrade_from_the_last_release_fires_nothing_twice_and_loses_nothing(
    upgrade_db: str, tmp_path: Path
) -> None:
    old_tree = _released_tree(tmp_path / f"django-pgsched-{RELEASED}")
    _migrate(old_tree, upgrade_db)
    started: list[Replica] = []
    try:
        old = [
            Replica(name, ["--concurrency", "8"], _env(upgrade_db), tmp_path, cwd=old_tree)
            for name in ("old-a", "old-b")
        ]
        started += old
        for replica in old:
            replica.wait_for_log("running loops")
        time.sleep(6)

        applied = _migrate(ROOT, upgrade_db)  # this version's migrations, the old ones running
        time.sleep(3)
        new = [
            Replica(name, ["--concurrency", "8"], _env(upgrade_db), tmp_path)
            for name in ("new-c", "new-d")
        ]
        started += new
        for replica in new:
            replica.wait_for_log("running loops")
        time.sleep(4)
        codes = [replica.stop() for replica in old]
        assert codes == [0, 0], [r.log()[-3000:] for r in old]
        time.sleep(6)
        codes = [replica.stop() for replica in new]
        assert codes == [0, 0], [r.log()[-3000:] for r in new]
    finally:
        for replica in started:
            replica.close()

    for replica in old:  # the released replicas never erred on the new schema
        log = replica.log()
        assert "Traceback" not in log and " ERROR " not in log, log[-4000:]
    # one run per occurrence
    assert not _rows(
        upgrade_db,
        "SELECT schedule_id, scheduled_for FROM pgsched_job_run WHERE schedule_id IS NOT NULL"
        " GROUP BY 1, 2 HAVING count(*) > 1",
    )
    # every occurrence from a schedule's first to its last is a run or in its skipped count
    per_schedule = _rows(
        upgrade_db,
        "SELECT s.name, count(r.id), s.skipped_occurrences,"
        " extract(epoch FROM max(r.scheduled_for) - min(r.scheduled_for))::int"
        " FROM pgsched_schedule s JOIN pgsched_job_run r ON r.schedule_id = s.id"
        " GROUP BY s.id",
    )
    assert len(per_schedule) == len(SCHEDULES), per_schedule
    for name, runs, skipped, span in per_schedule:
        assert runs + skipped == span + 1, (name, runs, skipped, span)
        assert runs >= 15, (name, runs)  # both versions' replicas planned throughout
    # executed once each: a witness per succeeded run, never a repeat, nothing left running
    [(succeeded, witnessed, distinct, unfinished)] = _rows(
        upgrade_db,
        "SELECT (SELECT count(*) FROM pgsched_job_run WHERE status = 'succeeded'),"
        " (SELECT count(*) FROM testapp_witness),"
        " (SELECT count(DISTINCT run_id) FROM testapp_witness),"
        " (SELECT count(*) FROM pgsched_job_run"
        "   WHERE status IN ('running', 'retrying', 'failed', 'lost'))",
    )
    assert succeeded == witnessed == distinct, (succeeded, witnessed, distinct)
    assert unfinished == 0
    workers = {w for (w,) in _rows(upgrade_db, "SELECT DISTINCT worker FROM testapp_witness")}
    assert {"old-a", "old-b"} & workers and {"new-c", "new-d"} & workers, workers
    print(f"\nrolling upgrade from {RELEASED}: {succeeded} runs; migrate said:\n{applied}")
