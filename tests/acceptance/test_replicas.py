"""Real replicas on one database: races, kill -9, and drains.

These start ``manage.py runscheduler`` subprocesses and inspect only the
database afterwards, the way an operator would.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count

from django_pgsched.models import Attempt, JobRun, Schedule
from tests.testapp.models import Witness

pytestmark = [pytest.mark.acceptance, pytest.mark.timeout(240)]


def sql(query: str, params: list[object] | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params or [])
        return cursor.fetchall()


def wait_until(condition, timeout: float, interval: float = 0.2, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def assert_no_duplicate_runs() -> None:
    dupes = (
        JobRun.objects.exclude(schedule=None)
        .values("schedule_id", "scheduled_for")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert not dupes.exists(), list(dupes[:5])


def assert_no_gaps(step_seconds: int) -> None:
    """Per schedule, the occurrences form an unbroken grid from the first to the last."""
    rows = sql("""
        SELECT schedule_id, count(*), extract(epoch FROM max(scheduled_for) - min(scheduled_for))
          FROM pgsched_job_run WHERE schedule_id IS NOT NULL GROUP BY schedule_id""")
    assert rows
    for schedule_id, count, span in rows:
        assert count == span / step_seconds + 1, (schedule_id, count, span)


def lateness() -> list[float]:
    return [
        r[0]
        for r in sql("""
        SELECT extract(epoch FROM a.started_at - r.fire_after)
          FROM pgsched_attempt a JOIN pgsched_job_run r ON r.id = a.job_run_id
         WHERE a.number = 1""")
    ]


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def test_three_replicas_fire_each_occurrence_exactly_once_and_on_time(replicas):
    n_schedules = 300
    Schedule.objects.bulk_create(
        Schedule(name=f"race-{i}", job="tests.witness", cron="* * * * * *", misfire_policy="skip")
        for i in range(n_schedules)
    )  # bulk_create bypasses save(): next_fire_at NULL, the planner computes the first fire
    started = [replicas(name, "--concurrency", "8") for name in ("a", "b", "c")]
    for replica in started:
        replica.wait_for_log("running loops")
    time.sleep(15)
    codes = [replica.stop() for replica in started]
    assert codes == [0, 0, 0], [r.log()[-2000:] for r in started]

    assert_no_duplicate_runs()
    assert_no_gaps(step_seconds=1)
    assert sum(Schedule.objects.values_list("skipped_occurrences", flat=True)) == 0
    runs = JobRun.objects.count()
    assert runs >= n_schedules * 12, runs
    # after the drain nothing is left running; unstarted ones were released, not lost
    assert not JobRun.objects.filter(status__in=["running", "retrying", "failed"]).exists()
    # executed exactly once: one witness per succeeded run, one attempt each, never a repeat
    succeeded = JobRun.objects.filter(status="succeeded")
    assert (
        succeeded.count()
        == Witness.objects.count()
        == Witness.objects.values("run_id").distinct().count()
    )
    assert not Attempt.objects.exclude(number=1).exists()
    assert set(Witness.objects.values_list("worker", flat=True)) == {"a", "b", "c"}
    late = lateness()
    p50, p99 = percentile(late, 0.5), percentile(late, 0.99)
    print(
        f"\nrace: {runs} runs, {len(late)} started; lateness p50={p50 * 1000:.0f} ms "
        f"p99={p99 * 1000:.0f} ms max={max(late) * 1000:.0f} ms"
    )
    assert p99 < 1.0, f"replicas did not keep up: p99 start lateness {p99:.3f}s"


def test_kill_9_mid_flight_recovers_in_flight_runs_without_duplicates(replicas):
    # 1.5 s jobs every 2 s, 3 s timeout: the lease is 6 s
    Schedule.objects.bulk_create(
        Schedule(
            name=f"slow-{i}",
            job="tests.sleep",
            cron="*/2 * * * * *",
            kwargs={"seconds": 1.5, "label": "slow"},
            timeout=timedelta(seconds=3),
            max_attempts=5,
            misfire_policy="skip",
        )
        for i in range(6)
    )
    victim = replicas("victim", "--concurrency", "6")
    victim.wait_for_log("running loops")
    held: set[int] = set()

    def victim_busy() -> bool:
        held.update(
            JobRun.objects.filter(status="running", worker="victim").values_list("id", flat=True)
        )
        if len(held) >= 3:
            victim.kill9()  # at once, while they are in flight
            return True
        held.clear()
        return False

    wait_until(victim_busy, timeout=20, interval=0.05, what="the victim to hold running runs")
    still_running = set(
        JobRun.objects.filter(id__in=held, status="running").values_list("id", flat=True)
    )
    assert still_running, "the jobs finished before the kill landed"
    held = still_running
    survivor = replicas("survivor", "--concurrency", "6")
    survivor.wait_for_log("running loops")
    # recovered after lease expiry (6 s) by the survivor's reaper, then run again
    wait_until(
        lambda: (
            not JobRun.objects.filter(id__in=held, status="running", worker="victim").exists()
            and JobRun.objects.filter(id__in=held, status="succeeded").count() == len(held)
        ),
        timeout=40,
        what="the killed replica's runs to be recovered and succeed",
    )
    time.sleep(2)
    assert survivor.stop() == 0, survivor.log()[-3000:]

    assert_no_duplicate_runs()
    assert_no_gaps(step_seconds=2)
    for run_id in held:
        statuses = list(
            Attempt.objects.filter(job_run_id=run_id)
            .order_by("number")
            .values_list("status", flat=True)
        )
        assert statuses[0] == "lost" and statuses[-1] == "succeeded", (run_id, statuses)
        assert Witness.objects.filter(run_id=run_id).count() == 1  # the killed one never finished
    # nothing ran twice to completion, and no run is stuck
    assert Witness.objects.values("run_id").annotate(n=Count("id")).filter(n__gt=1).count() == 0
    assert not JobRun.objects.filter(status="running").exists()
    # attempts are contiguous 1..n for every run
    for run_id, numbers in _attempt_numbers().items():
        assert numbers == list(range(1, len(numbers) + 1)), (run_id, numbers)


def _attempt_numbers() -> dict[int, list[int]]:
    result: dict[int, list[int]] = {}
    for run_id, number in Attempt.objects.order_by("job_run_id", "number").values_list(
        "job_run_id", "number"
    ):
        result.setdefault(run_id, []).append(number)
    return result


def test_sigterm_drains_running_jobs_and_exits_zero(replicas):
    Schedule.objects.create(
        name="drain",
        job="tests.sleep",
        cron="* * * * * *",
        kwargs={"seconds": 2.0, "cooperative": False},
        misfire_policy="skip",
    )
    replica = replicas("drainer", "--concurrency", "4")
    replica.wait_for_log("running loops")
    wait_until(
        lambda: JobRun.objects.filter(status="running").count() >= 2,
        timeout=20,
        what="jobs in flight",
    )
    in_flight = set(JobRun.objects.filter(status="running").values_list("id", flat=True))
    began = time.monotonic()
    assert replica.stop(timeout=30) == 0, replica.log()[-3000:]
    assert time.monotonic() - began < 10  # finished its 2 s jobs, did not wait for the grace
    assert "stopping" in replica.log()
    assert set(JobRun.objects.filter(id__in=in_flight).values_list("status", flat=True)) == {
        "succeeded"
    }
    assert Witness.objects.filter(run_id__in=in_flight).count() == len(in_flight)
    assert not JobRun.objects.filter(status="running").exists()


def test_second_signal_exits_one_at_once(replicas):
    Schedule.objects.create(
        name="stubborn",
        job="tests.sleep",
        cron="* * * * * *",
        kwargs={"seconds": 30.0, "cooperative": False},
    )
    replica = replicas("stubborn", "--concurrency", "2")
    replica.wait_for_log("running loops")
    wait_until(
        lambda: JobRun.objects.filter(status="running").exists(), timeout=20, what="a job in flight"
    )
    replica.signal(signal.SIGTERM)
    replica.wait_for_log("stopping")
    began = time.monotonic()
    replica.signal(signal.SIGTERM)
    assert replica.proc.wait(10) == 1
    assert time.monotonic() - began < 5
    # its run is still leased; the lease expiry hands it to the reaper, as after a crash
    assert JobRun.objects.filter(status="running", worker="stubborn").exists()


def test_grace_period_exceeded_records_interrupted_attempts(replicas):
    Schedule.objects.create(
        name="overrun",
        job="tests.sleep",
        cron="* * * * * *",
        kwargs={"seconds": 30.0, "cooperative": False},
        timeout=timedelta(seconds=60),
        misfire_policy="skip",
    )
    replica = replicas("overrun", "--concurrency", "1", overrides={"SHUTDOWN_GRACE": 1})
    replica.wait_for_log("running loops")
    wait_until(
        lambda: JobRun.objects.filter(status="running").exists(), timeout=20, what="a job in flight"
    )
    (run_id,) = JobRun.objects.filter(status="running").values_list("id", flat=True)
    assert replica.stop(timeout=20) == 0, replica.log()[-3000:]
    run = JobRun.objects.get(id=run_id)
    assert run.status == "retrying" and run.claimed_by is None
    (attempt,) = Attempt.objects.filter(job_run_id=run_id)
    assert attempt.status == "failed" and "grace period" in attempt.error


def test_replicas_survive_their_database_sessions_being_terminated(replicas):
    Schedule.objects.bulk_create(
        Schedule(name=f"t-{i}", job="tests.witness", cron="* * * * * *", misfire_policy="skip")
        for i in range(20)
    )
    started = [replicas(name, "--concurrency", "4") for name in ("x", "y")]
    for replica in started:
        replica.wait_for_log("running loops")
    time.sleep(3)
    killed = sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name LIKE 'pgsched %%' AND pid <> pg_backend_pid() "
        "AND datname = current_database()"
    )[0][0]
    assert killed >= 6  # planner, executor, maintenance, listener of each replica
    cutoff = sql("SELECT statement_timestamp()")[0][0]
    wait_until(
        lambda: (
            Witness.objects.filter(scheduled_for__gt=cutoff + timedelta(seconds=2)).count() >= 40
        ),
        timeout=20,
        what="runs after the sessions were killed",
    )
    assert [replica.stop() for replica in started] == [0, 0]
    assert_no_duplicate_runs()
    assert_no_gaps(step_seconds=1)
    assert sum(Schedule.objects.values_list("skipped_occurrences", flat=True)) == 0
    assert not JobRun.objects.filter(status="running").exists()
    assert Witness.objects.values("run_id").annotate(n=Count("id")).filter(n__gt=1).count() == 0
    assert any(
        "retrying in" in replica.log() or "lost its connection" in replica.log()
        for replica in started
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_running_replica_serves_metrics_and_probes(replicas):
    import urllib.request

    Schedule.objects.create(name="m", job="tests.noop", cron="* * * * * *", misfire_policy="skip")
    port = free_port()
    replica = replicas("metered", "--metrics-port", str(port))
    replica.wait_for_log("running loops")
    wait_until(
        lambda: JobRun.objects.filter(status="succeeded").count() >= 3,
        timeout=20,
        what="a few runs",
    )

    def get(path: str) -> tuple[int, str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()

    status, body = get("/metrics")
    assert status == 200
    for name in (
        "pgsched_schedule_occurrences_total",
        "pgsched_schedule_skipped_occurrences_total",
        "pgsched_runs_due_backlog",
        "pgsched_clock_skew_seconds",
        "pgsched_runs_finished_total",
        "pgsched_run_duration_seconds_bucket",
        "pgsched_leases_lost_total",
        "pgsched_leases_reaped_total",
    ):
        assert name in body, name
    assert (
        'pgsched_runs_finished_total{job="tests.noop",queue="default",status="succeeded"}' in body
    )
    assert get("/healthz")[0] == 200 and get("/readyz")[0] == 200
    assert replica.stop() == 0
