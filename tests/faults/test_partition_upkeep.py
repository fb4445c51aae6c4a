"""kill -9 in the middle of partition upkeep and retention: the next replica repairs it.

Three places a replica can die with a month half done, each witnessed (the
victim exited -9, and the catalog shows the half-done state), then repaired by
another replica's next pass:

- between creating a month's table and attaching it (failpoint
  ``partitions.before_attach``): a standalone, empty table is left; the next
  upkeep makes it anew and attaches it;
- between detaching a month's runs and its attempts (``partitions.after_detach``):
  the next retention pass reads the detached runs again, detaches the attempts
  and drops both;
- inside ``DETACH PARTITION ... CONCURRENTLY`` itself, while it waits for an older
  transaction: the month is left "detach pending"; the next upkeep finishes it
  (``FINALIZE``) and retention drops it.

The victims are one-shot processes on the test database (``tests.settings``),
not whole replicas: only the maintenance step under test runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from django_pgsched.models import Attempt, JobRun
from django_pgsched.partitions import layout
from django_pgsched.partitions.months import add_months, month_start
from django_pgsched.partitions.upkeep import Upkeep
from tests.conftest import dsn
from tests.integration.test_executor import now_db
from tests.integration.test_partitions import (
    insert_month,
    months_restored,
    retire_due_months,
    with_settings,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120), pytest.mark.django_db(transaction=True)]

__all__ = ["months_restored"]

ROOT = Path(__file__).resolve().parents[2]

VICTIM = """
import dataclasses, django
django.setup()
from django_pgsched.conf import get_settings
from django_pgsched.engine.maintenance import Retention
from django_pgsched.partitions.upkeep import Upkeep
settings = dataclasses.replace(
    get_settings(), PARTITIONS_AHEAD={ahead}, RETENTION={retention!r}
)
{step}(settings=settings).run_once()
"""


def victim(
    step: str, failpoint: str | None, log: Path, retention: timedelta, ahead: int = 3
) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PGSCHED_TEST_DB_NAME": connection.settings_dict["NAME"],
        "PGSCHED_FAILPOINT_LOG": str(log),
    }
    if failpoint:
        env["PGSCHED_FAILPOINTS"] = f"{failpoint}=kill"
    code = VICTIM.format(step=step, retention=retention, ahead=ahead)
    code = code.replace(
        "RETENTION=datetime.timedelta", "RETENTION=__import__('datetime').timedelta"
    )
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)


def until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def state() -> layout.Layout:
    return layout.read(connection)


@pytest.mark.usefixtures("months_restored")
def test_upkeep_killed_between_create_and_attach_is_repaired_by_the_next_replica(tmp_path):
    ahead = state().months_ahead(now_db()) + 2  # other tests may have made some already
    fourth = add_months(month_start(now_db()), ahead - 1)
    log = tmp_path / "failpoints.log"
    proc = victim("Upkeep", "partitions.before_attach", log, timedelta(days=30), ahead)
    assert proc.wait(60) == -9
    assert "partitions.before_attach" in log.read_text()
    left = state()
    assert fourth in left.standalone["pgsched_job_run"], left  # made, never attached
    assert fourth not in left.attached["pgsched_job_run"]
    # the next replica (this process): its locks were the dead session's, released with it
    result = Upkeep(settings=with_settings(PARTITIONS_AHEAD=ahead)).run_once()
    assert result.ahead == ahead and result.busy == 0, result
    assert not state().standalone["pgsched_job_run"]


@pytest.mark.usefixtures("months_restored")
def test_retention_killed_between_the_runs_and_the_attempts_is_finished_by_the_next(tmp_path):
    old = add_months(month_start(now_db()), -3)
    retire_due_months(with_settings(RETENTION=timedelta(days=20)))  # what other tests left
    ids = insert_month(old, 20)
    log = tmp_path / "failpoints.log"
    proc = victim("Retention", "partitions.after_detach", log, timedelta(days=20))
    assert proc.wait(60) == -9
    assert "partitions.after_detach" in log.read_text()
    left = state()
    assert old in left.standalone["pgsched_job_run"] and old in left.attached["pgsched_attempt"]
    assert not JobRun.objects.filter(pk__in=ids).exists()  # detached: out of sight already
    runs, _ = retire_due_months(with_settings(RETENTION=timedelta(days=20)))
    assert runs == 20
    done = state()
    for table in ("pgsched_job_run", "pgsched_attempt"):
        assert old not in done.attached[table] | done.standalone[table]
    assert not Attempt.objects.filter(job_run_id__in=ids).exists()


@pytest.mark.usefixtures("months_restored")
def test_a_replica_killed_inside_detach_concurrently_leaves_a_pending_detach_the_next_finishes(
    tmp_path,
):
    old = add_months(month_start(now_db()), -3)
    retire_due_months(with_settings(RETENTION=timedelta(days=20)))  # what other tests left
    ids = insert_month(old, 5)
    # an older transaction that has read the runs: DETACH ... CONCURRENTLY waits for it
    reader = psycopg.connect(**dsn())
    try:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        reader.execute("SELECT count(*) FROM pgsched_job_run").fetchone()
        proc = victim("Retention", None, tmp_path / "log", timedelta(days=20))
        until(lambda: old in state().pending["pgsched_job_run"] or proc.poll() is not None)
        assert proc.poll() is None, (proc.returncode, state())
        proc.kill()
        assert proc.wait(10) == -9
        # the server would finish the statement of a dead client once the reader is done:
        # its session ends with it (a server restart, a network cut, the session's timeout)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE '%%DETACH PARTITION%%CONCURRENTLY%%' AND pid <> pg_backend_pid()"
            )
            assert cursor.fetchall() == [(True,)]
    finally:
        reader.rollback()
        reader.close()
    assert old in state().pending["pgsched_job_run"]  # half detached
    # the next replica's upkeep (once the dead session's month lock is gone with it)
    until(lambda: Upkeep(settings=with_settings(PARTITIONS_AHEAD=3)).run_once().repaired == 1)
    assert old in state().standalone["pgsched_job_run"]
    runs, _ = retire_due_months(with_settings(RETENTION=timedelta(days=20)))
    assert runs == 5
    assert not JobRun.objects.filter(pk__in=ids).exists()
    assert old not in state().standalone["pgsched_job_run"]
