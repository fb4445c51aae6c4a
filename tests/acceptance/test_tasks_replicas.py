"""django.tasks through PgschedBackend with real replicas: enqueued from a view, a replica killed.

The test process serves the test URLconf (``live_server``); eight client
threads call a view that runs ``witness.enqueue()``; two ``runscheduler``
replicas execute the tasks, and one of them is killed with SIGKILL while it
holds running tasks. Afterwards the database and the result view must show
every task run at least once to its end, each run with exactly one succeeded
attempt, and every result readable.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_pgsched.models import Attempt, JobRun
from tests.testapp.models import Witness

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.timeout(240),
    pytest.mark.skipif(settings.TASKS_FRAMEWORK is None, reason="no task framework installed"),
]

TASKS = 240
CLIENTS = 8
WORK_SECONDS = 0.2  # each task sleeps this long, so runs are in flight when the kill comes


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        body: dict[str, Any] = json.loads(response.read())
    return body


def test_tasks_enqueued_from_a_view_under_load_survive_a_killed_replica(
    replicas: Any, live_server: Any
) -> None:
    # short timeouts (2 s, so a dead replica's leases expire within 4 s) for the runs
    # the view enqueues; the replicas only execute what they find
    short = {
        **settings.TASKS,
        "default": {**settings.TASKS["default"], "OPTIONS": {"TIMEOUT": 2, "MAX_ATTEMPTS": 8}},
    }
    victim = replicas("victim", "--concurrency", "4")
    survivor = replicas("survivor", "--concurrency", "4")
    victim.wait_for_log("running loops")
    survivor.wait_for_log("running loops")

    with override_settings(TASKS=short), ThreadPoolExecutor(CLIENTS) as clients:
        url = f"{live_server.url}/tasks/enqueue/?seconds={WORK_SECONDS}&label="
        futures = [clients.submit(get, f"{url}t{i}") for i in range(TASKS)]
        wait_until(
            lambda: JobRun.objects.filter(status="running", worker="victim").exists(),
            30,
            "the victim to hold a running task",
        )
        victim.kill9()
        enqueued = [f.result() for f in futures]
    ids = [e["id"] for e in enqueued]
    assert len(set(ids)) == TASKS and all(e["status"] == "READY" for e in enqueued)

    wait_until(
        lambda: JobRun.objects.filter(pk__in=ids, status="succeeded").count() == TASKS,
        120,
        "every task to succeed",
    )
    # counted per run from the attempts (a run's primary key is (id, scheduled_for) on the
    # monthly partitions, so an aggregate grouped by JobRun's pk alone is refused)
    attempts = Attempt.objects.filter(job_run_id__in=[int(i) for i in ids])
    succeeded = Counter(attempts.filter(status="succeeded").values_list("job_run_id", flat=True))
    assert all(succeeded[int(i)] == 1 for i in ids), [
        (i, succeeded[int(i)]) for i in ids if succeeded[int(i)] != 1
    ]
    # the kill hit work in flight: leases of the victim expired and the survivor retried them
    assert attempts.filter(status="lost").exists()
    assert not Attempt.objects.filter(job_run_id__in=ids, status="failed").exists()
    # every task ran to its end at least once (at-least-once: a killed attempt may have too)
    witnessed = set(Witness.objects.filter(run_id__in=ids).values_list("run_id", flat=True))
    assert witnessed == {int(i) for i in ids}
    # and every result is readable through the framework's API, from a view
    for i, run_id in enumerate(ids):
        result = get(f"{live_server.url}/tasks/{run_id}/")
        assert result["status"] == "SUCCESSFUL", result
        assert result["return_value"] == f"t{i}"
    survivor.stop()
