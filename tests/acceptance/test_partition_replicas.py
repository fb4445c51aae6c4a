"""Real replicas keep the months: made ahead by racing replicas, and an old month detached
and dropped while they claim and finish the runs of now."""

from __future__ import annotations

import time

from django.db import connection

from django_pgsched.models import Attempt, JobRun, Schedule
from django_pgsched.partitions import layout
from django_pgsched.partitions.months import add_months, month_start
from tests.acceptance.test_replicas import assert_no_duplicate_runs
from tests.integration.test_executor import now_db
from tests.integration.test_partitions import insert_month, months_restored
from tests.testapp.models import Witness

__all__ = ["months_restored"]


def test_replicas_make_the_months_ahead_and_drop_an_old_month_while_they_run_jobs(
    replicas, months_restored
):
    old = add_months(month_start(now_db()), -3)
    gone = insert_month(old, 2000)
    ahead = layout.read(connection).months_ahead(now_db()) + 2  # beyond what exists: upkeep's

    Schedule.objects.bulk_create(
        Schedule(name=f"busy-{i}", job="tests.witness", cron="* * * * * *", misfire_policy="skip")
        for i in range(20)
    )
    overrides = {
        "PARTITIONS_AHEAD": ahead,
        "RETENTION": 20 * 86400,
        "RETENTION_INTERVAL": 0.5,
    }
    started = [replicas(name, "--concurrency", "4", overrides=overrides) for name in "ab"]
    for replica in started:
        replica.wait_for_log("running loops")
    deadline = time.monotonic() + 60
    while True:
        state = layout.read(connection)
        dropped = all(old not in state.attached[t] | state.standalone[t] for t in state.attached)
        if dropped and state.months_ahead(now_db()) >= ahead:
            break
        assert time.monotonic() < deadline, (state, [r.log()[-3000:] for r in started])
        time.sleep(0.2)
    time.sleep(3)  # and the jobs of now go on
    codes = [replica.stop() for replica in started]
    logs = [replica.log() for replica in started]
    assert codes == [0, 0], [log[-3000:] for log in logs]
    for log in logs:  # no error, and certainly no error loop
        assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert not JobRun.objects.filter(pk__in=gone).exists()
    assert not Attempt.objects.filter(job_run_id__in=gone).exists()
    assert_no_duplicate_runs()
    succeeded = JobRun.objects.filter(status="succeeded", schedule__name__startswith="busy-")
    assert succeeded.count() >= 20  # the jobs of now ran meanwhile (how many: the load says)
    assert succeeded.count() == Witness.objects.count()  # each ran once, none lost
    assert not JobRun.objects.filter(status__in=["running", "retrying", "failed"]).exists()
