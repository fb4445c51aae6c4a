"""The two profiles: ``quick`` (about 20 minutes) and ``full`` (about an hour)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    reps: int  # repetitions of each throughput cell (planner, executor)

    # planner: N schedules due at once, batch 500 (the default)
    planner_schedules: int = 100_000
    planner_replicas: tuple[int, ...] = (1, 2)
    raw_planner_conns: tuple[int, ...] = (2,)

    # executor: no-op runs; warm-up after the first completion, then a window
    exec_concurrency: tuple[int, ...] = (1, 8, 32)
    raw_batches: tuple[int, ...] = (1, 8, 32, 100)
    pgqueuer_batches: tuple[int, ...] = (10, 100)
    procrastinate_concurrency: int = 8
    exec_warm: float = 1.0
    exec_window: float = 5.0

    # start lateness
    lateness_reps: int = 1
    sparse_seconds: float = 30.0
    sparse_schedules: int = 200
    sparse_concurrency: int = 8
    due_now_samples: int = 30
    burst_reps: int = 1
    burst_schedules: int = 100_000
    burst_concurrency: int = 32

    # idle cost: 100k schedules not yet due
    idle_schedules: int = 100_000
    idle_seconds: float = 30.0

    # memory soak at steady load
    soak_seconds: float = 120.0
    soak_schedules: int = 200

    # the history API: one tenant's day, one month of runs against 24 (bench/b_history.py)
    history_month_rows: int = 200_000
    history_months: int = 24
    history_tenants: int = 1000
    history_requests: int = 200

    # admin run list
    admin_rows: int = 1_000_000
    admin_small_rows: int = 1_000
    admin_requests: int = 10

    # open transaction: baseline, held, after (seconds each)
    opentx_phase: float = 20.0
    opentx_concurrency: int = 8

    # django.tasks: enqueue + execute through PgschedBackend vs django-tasks-db's db_worker
    tasks_concurrency: tuple[int, ...] = (1, 4)
    tasks_count: int = 5000
    tasks_producer_threads: int = 8
    tasks_reps: int = 2
    tasks_startup: float = 3.0  # seconds for the workers to come up before the producer starts
    tasks_deferred: int = 100_000  # deferred higher-priority runs in the claim cost cell

    # side by side with celery beat: N every-minute schedules, M boundaries observed
    beat_sizes: tuple[int, ...] = (1_000, 10_000)
    beat_minutes: int = 2
    beat_replicas: tuple[int, ...] = (1, 2)
    beat_loglevel: str = "INFO"  # as django-celery-beat's documentation starts it
    # HTTP delivery (pgsched.http): throughput at concurrency 32 beside a urllib3 loop,
    # an RSS soak at a steady rate, and the writes a dead destination costs
    delivery_soak_seconds: float = 120.0
    delivery_soak_rate: int = 50  # deliveries a second (interval schedules of 1 s)
    breaker_runs: int = 500
    breaker_cooldown: float = 2.0
    breaker_seconds: float = 30.0

    fsync_test: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


QUICK = Profile(name="quick", reps=3)
FULL = replace(
    QUICK,
    name="full",
    reps=5,
    raw_planner_conns=(1, 2),
    exec_concurrency=(1, 8, 32, 100),
    exec_warm=2.0,
    exec_window=10.0,
    lateness_reps=3,
    sparse_seconds=60.0,
    due_now_samples=50,
    burst_reps=3,
    idle_seconds=60.0,
    soak_seconds=600.0,
    delivery_soak_seconds=600.0,
    breaker_seconds=60.0,
    admin_rows=5_000_000,
    opentx_phase=60.0,
    beat_sizes=(1_000, 10_000, 50_000, 100_000),
    beat_minutes=3,
    fsync_test=True,
    tasks_concurrency=(1, 4, 8),
    tasks_count=20000,
    tasks_reps=3,
)
PROFILES = {"quick": QUICK, "full": FULL}
