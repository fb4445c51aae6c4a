"""The raw-SQL limit: the same work as the engine, in minimal psycopg loops.

Same tables, indexes and triggers as the engine (the migrated schema), same
statement shapes, none of the engine's Python:

- **planner**: one statement per batch claims up to ``batch`` due schedules
  ``FOR NO KEY UPDATE SKIP LOCKED`` (the engine's claim), inserts their runs
  ``ON CONFLICT DO NOTHING`` and advances ``next_fire_at`` by the hour in SQL
  (no cron maths), with one NOTIFY. ``conns`` connections race, as replicas do.
- **executor**: one statement per pass records the previous batch as
  succeeded (run row + attempt row, fenced on the lease token) and claims the
  next ``batch`` due runs (``MATERIALIZED`` candidate + ``UPDATE``, fresh token),
  prepared, on one connection: the engine's ``executor_pass`` minus its
  bookkeeping. Runs until killed or ``--seconds`` pass.

``python -m bench.raw planner DSN --conns 2`` prints one JSON line when done;
``python -m bench.raw executor DSN --batch 10`` runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

PLAN = """
WITH due AS MATERIALIZED (
    SELECT id, name, job, kwargs, next_fire_at
      FROM pgsched_schedule
     WHERE status = 'active'
       AND coalesce(next_fire_at, '-infinity'::timestamptz)
           <= statement_timestamp() + interval '5 s'
     ORDER BY coalesce(next_fire_at, '-infinity'::timestamptz)
     LIMIT %(batch)s
       FOR NO KEY UPDATE SKIP LOCKED
),
inserted AS (
    INSERT INTO pgsched_job_run
           (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
            status, fire_after, attempts, max_attempts, timeout, note)
    SELECT id, name, next_fire_at,
           'pgsched:' || id || ':'
               || to_char(next_fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           job, kwargs, 'default', 'pending', next_fire_at, 0, 3, interval '5 minutes', ''
      FROM due
        ON CONFLICT DO NOTHING
    RETURNING id
),
advanced AS (
    UPDATE pgsched_schedule s
       SET next_fire_at = d.next_fire_at + interval '1 hour', last_fire_at = d.next_fire_at
      FROM due d
     WHERE s.id = d.id
    RETURNING s.id
)
SELECT (SELECT count(*) FROM advanced),
       (SELECT pg_notify('pgsched_wait', left(string_agg(id::text, ','), 7000)) FROM inserted
         HAVING count(*) > 0)
"""

EXCHANGE = """
WITH clock AS (SELECT clock_timestamp() AS now),
finished AS (
    UPDATE pgsched_job_run r
       SET status = 'succeeded', finished_at = clock.now, claimed_by = NULL,
           claim_expires_at = NULL
      FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS o(id, token), clock
     WHERE r.id = o.id AND r.claimed_by = o.token AND r.status = 'running'
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error)
    SELECT f.id, f.scheduled_for, f.attempts, 'succeeded', f.started_at, clock.now, 'raw', ''
      FROM finished f, clock
),
candidate AS MATERIALIZED (
    SELECT r.id, r.scheduled_for  -- with its month, as the executor's claim (one partition)
      FROM pgsched_job_run r
     WHERE r.status IN ('pending', 'retrying')
       AND r.fire_after <= (SELECT now FROM clock)
       AND (r.claim_expires_at IS NULL OR r.claim_expires_at < (SELECT now FROM clock))
       AND r.attempts < r.max_attempts
     ORDER BY r.fire_after
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE pgsched_job_run r
   SET status = 'running', attempts = r.attempts + 1, claimed_by = gen_random_uuid(),
       worker = 'raw', claim_expires_at = clock.now + r.timeout * 2, started_at = clock.now
  FROM candidate c, clock
 WHERE r.id = c.id AND r.scheduled_for = c.scheduled_for
RETURNING r.id, r.claimed_by
"""


def plan(dsn: str, conns: int, batch: int, gate: Callable[[], None]) -> dict[str, Any]:
    """Materialise every due schedule with ``conns`` racing connections, once ``gate()`` returns."""
    counts: list[int] = []
    passes: list[int] = []
    connections = [psycopg.connect(dsn, autocommit=True) for _ in range(conns)]
    gate()

    def loop(conn: psycopg.Connection[Any]) -> None:
        n = 0
        while True:
            row = conn.execute(PLAN, {"batch": batch}, prepare=True).fetchone()
            n += 1
            if not row or not row[0]:
                break
            counts.append(int(row[0]))
        passes.append(n)

    threads = [threading.Thread(target=loop, args=(c,)) for c in connections]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    for conn in connections:
        conn.close()
    return {"schedules": sum(counts), "seconds": elapsed, "passes": sum(passes)}


def execute(dsn: str, batch: int, seconds: float) -> dict[str, Any]:
    """Claim and complete no-op runs, ``batch`` at a time, until stopped."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    done = 0
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids: list[int] = []
        tokens: list[Any] = []
        while not stop.is_set() and time.monotonic() < deadline:
            rows = conn.execute(
                EXCHANGE, {"ids": ids, "tokens": tokens, "limit": batch}, prepare=True
            ).fetchall()
            done += len(ids)
            ids = [r[0] for r in rows]
            tokens = [r[1] for r in rows]
            if not rows:
                time.sleep(0.01)
        conn.execute(EXCHANGE, {"ids": ids, "tokens": tokens, "limit": 0})
        done += len(ids)
    return {"completed": done}


def wait_for_go() -> None:
    """Tell the harness we are connected; start when it writes a line (all replicas at once)."""
    print("ready", flush=True)
    sys.stdin.readline()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.raw")
    parser.add_argument("what", choices=("planner", "executor"))
    parser.add_argument("dsn")
    parser.add_argument("--conns", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.what == "planner":
        result = plan(args.dsn, args.conns, args.batch, wait_for_go)
    else:
        result = execute(args.dsn, args.batch, args.seconds)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
