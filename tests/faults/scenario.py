"""One fault scenario: a fresh database on the private cluster, a fleet, and the checker.

Scenarios build their workload with SQL (every schedule gets an explicit
``next_fire_at``, which is where its accounting starts), start replicas, inject
faults, heal, wait for liveness (I8), and assert that :meth:`Scenario.check`
finds nothing. Negative controls assert that it finds exactly what they broke.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from django_pgsched.timing import timetable

from . import invariants
from .cluster import Cluster
from .harness import FAST, Fleet, Replica, wait_until
from .invariants import Baseline, Violation

_ids = itertools.count(1)
LOCKS = "SELECT pid, mode, granted FROM pg_locks WHERE relation = 'pgsched_job_run'::regclass"
ACTIVITY = (
    "SELECT application_name, state, left(query, 60) FROM pg_stat_activity "
    "WHERE datname = current_database()"
)


class Scenario:
    def __init__(self, cluster: Cluster, log_dir: Path, *, audit: bool = True) -> None:
        self.cluster = cluster
        self.dbname = cluster.clone(f"fault_{next(_ids)}_{int(time.time())}")
        self.url = cluster.url(self.dbname)
        self.log_dir = log_dir
        self.conn = cluster.connect(self.dbname)
        self._check_server_clock()
        self.fleet = Fleet(self.url, log_dir)
        self.baselines: dict[int, Baseline] = {}
        self.audit = audit
        if audit:
            invariants.install_audit(self.conn)

    def clock_offset(self) -> float:
        """Seconds the server's clock is ahead of this host's, as a fresh backend sees it."""
        with self.cluster.connect(self.dbname) as fresh:
            row = fresh.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
        assert row is not None
        return float(row[0]) - time.time()

    def _check_server_clock(self, timeout: float = 5.0) -> None:
        """Fail early if a fresh backend's clock is off ours (left over from a clock test)."""
        deadline = time.monotonic() + timeout
        while abs(offset := self.clock_offset()) >= 5 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert abs(offset) < 5, f"the private server's clock is {offset:+.0f}s off this host's"

    # -- database ---------------------------------------------------------------

    def sql(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def one(self, query: str, params: Any = None) -> Any:
        rows = self.sql(query, params)
        return rows[0][0] if rows else None

    def db_now(self) -> datetime:
        now: datetime = self.one("SELECT clock_timestamp()")
        return now.astimezone(UTC)

    def add_schedules(
        self,
        n: int,
        *,
        prefix: str = "s",
        job: str = "faults.work",
        cron: str | None = None,
        interval: int | None = None,
        kwargs: dict[str, Any] | None = None,
        policy: str = "skip",
        catch_up_limit: int = 10,
        grace: float | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        first: datetime | None = None,
        overlap: str = "allow",
        start_deadline: float | None = None,
        tenant: str = "",
        zone: tuple[str, str, str] = ("UTC", "shift", "first"),
    ) -> list[int]:
        """Insert ``n`` schedules by SQL, each with an explicit first ``next_fire_at``.

        ``zone`` is a cron schedule's (timezone, dst_gap, dst_fold).
        """
        assert (cron is None) != (interval is None)
        now = self.db_now()
        anchor = now.replace(microsecond=0) if interval else None
        table = (
            invariants.grid(cron, None, None, zone)
            if cron
            else timetable.interval(timedelta(seconds=interval or 0), anchor)  # type: ignore[arg-type]
        )
        nfa = first or table.next_after(now)
        rows = self.sql(
            """
            INSERT INTO pgsched_schedule (name, job, kwargs, cron, "interval", anchor, next_fire_at,
                   misfire_policy, catch_up_limit, misfire_grace, max_attempts, timeout, updated_at,
                   overlap, start_deadline, tenant, timezone, dst_gap, dst_fold)
            SELECT %(prefix)s || '-' || g, %(job)s, %(kwargs)s::jsonb, %(cron)s,
                   make_interval(secs => %(interval)s), %(anchor)s, %(nfa)s, %(policy)s,
                   %(limit)s, make_interval(secs => %(grace)s), %(attempts)s,
                   make_interval(secs => %(timeout)s), now(), %(overlap)s,
                   make_interval(secs => %(deadline)s), %(tenant)s, %(tz)s, %(gap)s, %(fold)s
              FROM generate_series(1, %(n)s) g
            RETURNING id
            """,
            {
                "prefix": prefix,
                "job": job,
                "kwargs": json.dumps(kwargs or {}),
                "cron": cron,
                "interval": interval,
                "anchor": anchor,
                "nfa": nfa,
                "policy": policy,
                "limit": catch_up_limit,
                "grace": grace,
                "attempts": max_attempts,
                "timeout": timeout,
                "n": n,
                "overlap": overlap,
                "deadline": start_deadline,
                "tenant": tenant,
                "tz": zone[0],
                "gap": zone[1],
                "fold": zone[2],
            },
        )
        return [r[0] for r in rows]

    def add_run(
        self,
        job: str = "faults.work",
        *,
        kwargs: dict[str, Any] | None = None,
        timeout: float = 2.0,
        max_attempts: int = 3,
        queue: str = "default",
    ) -> int:
        """A one-off run due now, inserted by SQL (what ``enqueue`` writes)."""
        run_id: int = self.one(
            """
            INSERT INTO pgsched_job_run (scheduled_for, idempotency_key, job, kwargs, queue,
                   fire_after, max_attempts, timeout)
            VALUES (date_trunc('second', clock_timestamp()), 'faults:' || gen_random_uuid(), %s,
                    %s::jsonb, %s, clock_timestamp(), %s, make_interval(secs => %s))
            RETURNING id
            """,
            [job, json.dumps(kwargs or {}), queue, max_attempts, timeout],
        )
        self.sql("SELECT pg_notify('pgsched_wait', %s)", [str(run_id)])
        return run_id

    def run_state(self, run_id: int) -> tuple[str, int, str | None]:
        """(status, attempts, worker) of a run."""
        row = self.sql(
            "SELECT status, attempts, worker FROM pgsched_job_run WHERE id = %s", [run_id]
        )
        return row[0]  # type: ignore[return-value]

    def ledger(self, run_id: int) -> list[tuple[int, str, str]]:
        """(attempt, worker, phase) rows the job wrote for ``run_id``, in order."""
        return self.sql(  # type: ignore[return-value]
            "SELECT attempt, worker, phase FROM testapp_ledger WHERE run_id = %s ORDER BY id",
            [run_id],
        )

    def describe(self, run_id: int) -> str:
        """A run's row, attempts, ledger and the fleet's logs (for failure messages)."""
        row = self.sql(
            "SELECT status, attempts, worker, claim_expires_at - clock_timestamp(), fire_after "
            "- clock_timestamp() FROM pgsched_job_run WHERE id = %s",
            [run_id],
        )
        return (
            f"run {run_id}: {row}\nattempts {self.attempts(run_id)}\nledger {self.ledger(run_id)}"
            f"\nlocks {self.sql(LOCKS)}\nactivity {self.sql(ACTIVITY)}"
            f"\n{self.fleet.logs()}"
        )

    def snapshot_baseline(self) -> None:
        self.baselines = invariants.baseline(self.conn)

    def track(self, ids: Sequence[int]) -> None:
        """Start the accounting of schedules added later."""
        current = invariants.baseline(self.conn)
        self.baselines.update({sid: current[sid] for sid in ids})

    def reconnect(self) -> None:
        """A new checker connection (after a server restart)."""
        self.conn = self.cluster.connect(self.dbname)

    @property
    def hostname(self) -> str:
        return socket.gethostname()

    # -- replicas -----------------------------------------------------------------

    def start(self, name: str, *, ready: bool = True, **options: Any) -> Replica:
        replica = self.fleet.start(name, **options)
        if ready:
            replica.wait_ready()
        return replica

    # -- checking -------------------------------------------------------------------

    def settle(
        self, timeout: float = 60.0, *, lookahead: float | None = None, grace: float = 60.0
    ) -> None:
        """Wait until I8 (liveness) holds; fail with what still does not."""
        look = FAST["PLANNER_LOOKAHEAD"] if lookahead is None else lookahead
        last: list[Violation] = []

        def live() -> bool:
            nonlocal last
            last = invariants.check_liveness(self.conn, lookahead=look, grace=grace)
            return not last

        try:
            wait_until(live, timeout, "liveness (I8)", interval=0.25)
        except AssertionError:
            raise AssertionError(
                "I8 did not hold after healing:\n"
                + "\n".join(map(str, last[:20]))
                + "\n"
                + self.fleet.logs()
            ) from None

    def check(self, **options: Any) -> list[Violation]:
        options.setdefault("planner_batch", 500)
        return invariants.check(
            self.conn,
            baselines=self.baselines,
            workers_by_pid=self.fleet.workers_by_pid,
            concurrency_by_worker=self.fleet.concurrency_by_worker,
            **options,
        )

    def assert_clean(self, **options: Any) -> None:
        violations = self.check(**options)
        assert not violations, "\n".join(map(str, violations[:30])) + "\n" + self.fleet.logs()

    def attempts(self, run_id: int) -> list[str]:
        return [
            r[0]
            for r in self.sql(
                "SELECT status FROM pgsched_attempt WHERE job_run_id = %s ORDER BY number",
                [run_id],
            )
        ]

    def reaped(self) -> int:
        return int(self.one("SELECT count(*) FROM pgsched_attempt WHERE status = 'lost'"))

    def close(self) -> None:
        self.fleet.close()
        self.conn.close()
        self.cluster.drop(self.dbname)


def psycopg_error_text(exc: psycopg.Error) -> str:
    return f"{type(exc).__name__}: {exc}"


def sum_skipped(scenario: Scenario, ids: Sequence[int]) -> int:
    return int(
        scenario.one(
            "SELECT coalesce(sum(skipped_occurrences), 0) FROM pgsched_schedule WHERE id = ANY(%s)",
            [list(ids)],
        )
    )
