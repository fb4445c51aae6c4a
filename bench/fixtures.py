"""Set-based SQL that fills and resets the scheduler's tables for a benchmark.

Rows are written straight into the migrated tables (``generate_series``), as
the engine itself would leave them: the same columns, defaults and CHECKs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg

# pgsched_skipped_range (the ledger) references the schedules, so it goes with them
TABLES = "pgsched_attempt, pgsched_job_run, pgsched_skipped_range, pgsched_schedule"


def reset(conn: psycopg.Connection[Any], *, schedules: bool = True) -> None:
    """Empty the run history (and the schedules); statistics and free space are fresh."""
    tables = TABLES if schedules else "pgsched_attempt, pgsched_job_run"
    conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")


def settle(conn: psycopg.Connection[Any], *tables: str) -> None:
    """VACUUM ANALYZE the tables and CHECKPOINT: every cell starts from the same state."""
    for table in tables or ("pgsched_schedule", "pgsched_job_run", "pgsched_attempt"):
        conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("CHECKPOINT")


def db_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


def ensure_months(conn: psycopg.Connection[Any], back: timedelta, ahead: timedelta) -> None:
    """The partitions of the run history's months from ``now - back`` to ``now + ahead``.

    Plain INSERTs do not make a missing month (the library's inserts do:
    ``pgsched_ensure_months``); a schema before monthly partitions has nothing to make.
    """
    exists = conn.execute("SELECT to_regproc('pgsched_ensure_months') IS NOT NULL").fetchone()
    if exists and exists[0]:
        conn.execute(
            "SELECT pgsched_ensure_months(array(SELECT generate_series("
            "date_trunc('month', now() - %(back)s), now() + %(ahead)s, interval '1 month')))",
            {"back": back, "ahead": ahead},
        )


def add_pending_runs(conn: psycopg.Connection[Any], count: int, job: str = "tests.noop") -> None:
    """``count`` one-off runs of ``job``, all due (fire_after in the past, in id order)."""
    ensure_months(conn, timedelta(hours=1), timedelta(0))
    conn.execute(
        """
        INSERT INTO pgsched_job_run
               (scheduled_for, idempotency_key, job, kwargs, queue, status, fire_after,
                attempts, max_attempts, timeout, note)
        SELECT date_trunc('second', now()) - interval '1 hour',
               'bench:' || g, %(job)s, '{}', 'default', 'pending',
               now() - interval '1 hour' + g * interval '1 microsecond',
               0, 3, interval '5 minutes', ''
          FROM generate_series(1, %(count)s::int) g
        """,
        {"job": job, "count": count},
    )


def add_deferred_runs(
    conn: psycopg.Connection[Any], count: int, *, priority: int, job: str = "tests.noop"
) -> None:
    """``count`` one-off runs of ``job`` at ``priority``, claimable but due only in a day."""
    ensure_months(conn, timedelta(0), timedelta(days=1))
    conn.execute(
        """
        INSERT INTO pgsched_job_run
               (scheduled_for, idempotency_key, job, kwargs, queue, status, fire_after,
                attempts, max_attempts, timeout, note, priority)
        SELECT date_trunc('second', now()) + interval '1 day',
               'bench:deferred:' || g, %(job)s, '{}', 'default', 'pending',
               now() + interval '1 day' + g * interval '1 microsecond',
               0, 3, interval '5 minutes', '', %(priority)s
          FROM generate_series(1, %(count)s::int) g
        """,
        {"job": job, "count": count, "priority": priority},
    )


@contextmanager
def _setup(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A transaction whose writes fire no triggers (``session_replication_role = replica``).

    Schedules a cell inserts are its set-up, not what it measures: through the
    schedule triggers (the audit trail, the planners' NOTIFY) 100,000 of them took
    5 s on the loaded machine (14 s while the audit trigger was quadratic), long
    enough to commit after the boundary a burst cell had picked for them, whose
    lateness then counted the insert. The private cluster's user is a superuser.
    """
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        yield


def add_cron_schedules(
    conn: psycopg.Connection[Any],
    count: int,
    *,
    cron: str,
    next_fire_at: datetime | str,
    job: str = "tests.noop",
    prefix: str = "bench",
    jitter_s: float = 0,
) -> None:
    """``count`` active cron schedules of ``job`` whose next occurrence is ``next_fire_at``.

    Inserted without triggers (:func:`_setup`).
    """
    with _setup(conn):
        _add_cron_schedules(conn, count, cron, next_fire_at, job, prefix, jitter_s)


def _add_cron_schedules(
    conn: psycopg.Connection[Any],
    count: int,
    cron: str,
    next_fire_at: datetime | str,
    job: str,
    prefix: str,
    jitter_s: float,
) -> None:
    conn.execute(
        """
        INSERT INTO pgsched_schedule
               (name, job, kwargs, cron, status, next_fire_at, misfire_policy, catch_up_limit,
                skipped_occurrences, source, last_error, updated_at, jitter)
        SELECT %(prefix)s || '-' || g, %(job)s, '{}', %(cron)s, 'active', %(next)s::timestamptz,
               'latest', 10, 0, 'database', '', now(), make_interval(secs => %(jitter)s)
          FROM generate_series(1, %(count)s::int) g
        """,
        {
            "prefix": prefix,
            "job": job,
            "cron": cron,
            "next": next_fire_at,
            "count": count,
            "jitter": jitter_s,
        },
    )


def add_interval_schedules(
    conn: psycopg.Connection[Any],
    count: int,
    *,
    every_s: int,
    anchor: datetime,
    job: str = "tests.noop",
    stagger_s: int = 0,
) -> None:
    """``count`` interval schedules; schedule i is anchored ``i mod stagger_s`` seconds later.

    Occurrences are whole seconds (a CHECK), so a 1 s interval cannot be
    staggered within the second: every such schedule fires on each second.
    Inserted without triggers (:func:`_setup`).
    """
    with _setup(conn):
        _add_interval_schedules(conn, count, every_s, anchor, job, stagger_s)


def _add_interval_schedules(
    conn: psycopg.Connection[Any],
    count: int,
    every_s: int,
    anchor: datetime,
    job: str,
    stagger_s: int,
) -> None:
    conn.execute(
        """
        INSERT INTO pgsched_schedule
               (name, job, kwargs, "interval", anchor, status, next_fire_at, misfire_policy,
                catch_up_limit, skipped_occurrences, source, last_error, updated_at)
        SELECT 'sparse-' || g, %(job)s, '{}', make_interval(secs => %(every)s),
               a, 'active', a, 'latest', 10, 0, 'database', '', now()
          FROM generate_series(1, %(count)s::int) g,
               LATERAL (SELECT %(anchor)s::timestamptz
                               + make_interval(secs => CASE WHEN %(stagger)s > 0
                                                            THEN g %% %(stagger)s ELSE 0 END)
                        AS a) t
        """,
        {"job": job, "count": count, "every": every_s, "anchor": anchor, "stagger": stagger_s},
    )


def add_history(
    conn: psycopg.Connection[Any], count: int, *, offset: int = 0, batch: int = 500_000
) -> None:
    """``count`` finished runs spread over the past year (the admin's run list), in batches.

    Run ``offset + i`` is 6·(offset + i) seconds old (modulo a year), so a second
    call with ``offset`` continues the first.
    """
    ensure_months(conn, timedelta(days=366), timedelta(0))
    done = 0
    while done < count:
        n = min(batch, count - done)
        # without the run table's row triggers (the idempotency key's check across months:
        # a PL/pgSQL call per row made 5M runs take over 20 minutes; these keys are unique)
        with _setup(conn):
            _add_history_batch(conn, offset + done + 1, offset + done + n)
        done += n


def _add_history_batch(conn: psycopg.Connection[Any], lo: int, hi: int) -> None:
    conn.execute(
        """
            INSERT INTO pgsched_job_run
                   (schedule_name, scheduled_for, idempotency_key, job, kwargs, queue, status,
                    fire_after, attempts, max_attempts, timeout, started_at, finished_at, note)
            SELECT 'history-' || (g %% 500), t, 'history:' || g, 'tests.noop', '{}',
                   CASE WHEN g %% 10 = 0 THEN 'reports' ELSE 'default' END,
                   CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'succeeded' END,
                   t, 1, 3, interval '5 minutes', t, t + interval '20 milliseconds', ''
              FROM generate_series(%(lo)s::int, %(hi)s::int) g,
                   LATERAL (SELECT date_trunc('second', now())
                                   - make_interval(secs => (g * 6) %% 31536000) AS t) s
            """,
        {"lo": lo, "hi": hi},
    )
