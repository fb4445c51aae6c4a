"""Storage designs for live runs, prototyped in SQL and measured side by side in one run.

Issue 21's first step: before the run storage changes, each candidate is built
as tables and statements of the shape the engine would use, driven by the same
minimal psycopg loops (no engine Python), on one private cluster, alternated
within each repetition::

    python -m bench.storage --reps 2 --out bench/results/<stamp>-storage.json

The designs (``DESIGNS``):

- ``today``: the migrated ``pgsched_job_run`` and ``pgsched_attempt`` (14
  indexes, 19 CHECKs, the row triggers, monthly partitions), with the
  executor's claim predicates as shipped (overlap, start deadline, job and
  queue lists, live months) and the planner's insert columns: the baseline.
- ``slim``: design (c), the single partitioned table slimmed: the same
  columns, five indexes (primary key, occurrence, idempotency key, claim
  order, recent), one grouped CHECK, no triggers, a claim without the
  capabilities' predicates.
- ``narrow``: design (a), a narrow unpartitioned live-run table (what the
  claim needs: status, lease token and expiry, ``fire_after``, priority, job,
  queue, tenant, attempts, timeout; primary key and one claim index that no
  claim write touches, so the claim is a HOT update) beside the partitioned
  history row, written at plan (visible at once) and updated once at the end
  (its indexes name no column the end changes; fillfactor 80 for HOT room).
- ``current``: design (a) with the history row kept current, as
  ``pgsched_job_run`` is today: the claim updates the live row and the history
  row (status ``running``, attempts, start, worker), the end deletes the live
  row and updates the history row. The history's indexes (occurrence, key,
  recent, tenant) name no column the claim or the end writes, so both are HOT
  updates where the page has room (history fillfactor 70, live 50). The lease
  token lives on the live row only.
- ``current_row`` and ``current_stmt``: ``current`` with the live row made by a
  trigger on the history (a row trigger, or a statement trigger reading the
  inserted rows), so that every writer of the history gets one; the plan
  inserts only the history row. What the trigger costs the planner.
- ``synced``: ``current_stmt`` with the engine writing only the history, as it
  does today: a second statement trigger on the history (``AFTER UPDATE
  REFERENCING NEW TABLE``) copies each changed run's claim columns to its live
  row, and deletes the live row once the run's status is final. The claim takes
  its order from the live table and locks the history rows (``SKIP LOCKED``),
  so every writer locks a run's history row before its live row, the order of
  cancel, the reaper and the admin. The lease token stays on the history row.
- ``once``: design (b), the history row written once at the end: a live row
  carrying the payload, a narrow occurrence-key table (partitioned by month,
  kept as long as history) holding ``UNIQUE (schedule_id, scheduled_for)``,
  and the history row inserted from the live row's ``DELETE ... RETURNING``.
- ``raw``: the seed's raw-SQL tables of ``../shared/anchors/raw_schema.sql``
  (three narrow tables, four indexes), written out here: the floor.

Per design and phase (plan: 2 connections at batch 500 over ``--schedules``
schedules due at once; burst: the same runs claimed and completed at batch 32
over 2 connections, each statement recording the previous batch and claiming
the next, as ``executor_pass`` does): wall time and rate, the backends' CPU
(``/proc``) and the driver's, WAL bytes (``pg_current_wal_insert_lsn``) and
``pg_waldump``'s records by kind (heap inserts, updates, HOT updates, deletes,
index entries), all per run.

It starts its own private cluster (``bench/cluster.py``), never your server.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

# -- the designs ----------------------------------------------------------------------------

SCHEDULES = """
CREATE TABLE schedule (
    id bigint PRIMARY KEY, name text NOT NULL, job text NOT NULL,
    kwargs jsonb NOT NULL DEFAULT '{}', queue text, tenant text NOT NULL DEFAULT '',
    max_attempts smallint, timeout interval, status text NOT NULL DEFAULT 'active',
    next_fire_at timestamptz, last_fire_at timestamptz);
CREATE INDEX schedule_due ON schedule (next_fire_at) WHERE status = 'active';
INSERT INTO schedule (id, name, job, kwargs, next_fire_at)
SELECT id, name, job, kwargs, next_fire_at FROM public.pgsched_schedule;
"""

MONTHS = """
DO $$
DECLARE m date := date_trunc('month', now() - interval '2 months');
BEGIN
  FOR i IN 0..5 LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L) %s',
                   '{table}_' || to_char(m, 'YYYYMM'), '{table}', m, m + interval '1 month',
                   '{storage}');
    m := m + interval '1 month';
  END LOOP;
END $$;
"""


def months(table: str, storage: str = "") -> str:
    return MONTHS.replace("{table}", table).replace("{storage}", storage)


PLAN_DUE = """
WITH due AS MATERIALIZED (
    SELECT id, name, job, kwargs, queue, tenant, max_attempts, timeout, next_fire_at
      FROM schedule
     WHERE status = 'active' AND next_fire_at <= statement_timestamp() + interval '5 s'
     ORDER BY next_fire_at
     LIMIT %(batch)s
       FOR NO KEY UPDATE SKIP LOCKED
),
advanced AS (
    UPDATE schedule s
       SET next_fire_at = d.next_fire_at + interval '1 hour', last_fire_at = d.next_fire_at
      FROM due d
     WHERE s.id = d.id
    RETURNING s.id
),
"""

KEY = (
    "'pgsched:' || d.id || ':' || to_char(d.next_fire_at AT TIME ZONE 'UTC', "
    '\'YYYY-MM-DD"T"HH24:MI:SS"Z"\')'
)

OUTCOMES = """
WITH clock AS (SELECT clock_timestamp() AS now),
outcome AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS o(id, token)
),
"""


@dataclass(frozen=True)
class Design:
    name: str
    schema: str  # search path of its connections
    setup: str  # SQL run once, in the schema (after the migrations)
    plan: str  # one planner batch; returns one row (the count planned)
    exchange: str  # record %(ids)s/%(tokens)s as succeeded, claim %(limit)s: (id, token) rows
    tables: tuple[str, ...]  # its tables, for VACUUM ANALYZE and the size


TODAY = Design(
    "today",
    "public",
    """
    INSERT INTO pgsched_schedule
           (id, name, job, kwargs, "interval", anchor, status, next_fire_at, misfire_policy,
            catch_up_limit, skipped_occurrences, source, last_error, updated_at)
    SELECT g, 'storage-' || g, 'bench.noop', '{}', interval '1 hour',
           date_trunc('hour', now()), 'active', date_trunc('second', now()) - interval '1 s',
           'latest', 10, 0, 'database', '', now()
      FROM generate_series(1, %(schedules)s::int) g;
    """,
    """
    WITH due AS MATERIALIZED (
        SELECT id, name, job, kwargs, queue, tenant, max_attempts, timeout, next_fire_at,
               overlap, start_deadline
          FROM pgsched_schedule
         WHERE status = 'active'
           AND coalesce(next_fire_at, '-infinity'::timestamptz)
               <= statement_timestamp() + interval '5 s'
         ORDER BY coalesce(next_fire_at, '-infinity'::timestamptz)
         LIMIT %(batch)s
           FOR NO KEY UPDATE SKIP LOCKED
    ),
    advanced AS (
        UPDATE pgsched_schedule s
           SET next_fire_at = d.next_fire_at + interval '1 hour', last_fire_at = d.next_fire_at
          FROM due d
         WHERE s.id = d.id
        RETURNING s.id
    ),
    inserted AS (
        INSERT INTO pgsched_job_run
               (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
                status, fire_after, attempts, max_attempts, timeout, note, tenant, priority,
                overlap, start_by)
        SELECT d.id, d.name, d.next_fire_at, """
    + KEY
    + """, d.job, d.kwargs,
               coalesce(d.queue, 'default'), 'pending', d.next_fire_at, 0,
               coalesce(d.max_attempts, 3), coalesce(d.timeout, interval '5 minutes'), '',
               d.tenant, 0, nullif(d.overlap, 'allow'), d.next_fire_at + d.start_deadline
          FROM due d
         ORDER BY d.next_fire_at, d.id
            ON CONFLICT DO NOTHING
        RETURNING id
    )
    SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM advanced)
    """,
    OUTCOMES
    + """
    finished AS (
        UPDATE pgsched_job_run r
           SET status = 'succeeded', finished_at = clock.now, claimed_by = NULL,
               claim_expires_at = NULL, return_value = r.return_value
          FROM outcome o, clock
         WHERE r.id = o.id AND r.claimed_by = o.token
           AND r.scheduled_for >= date_trunc('month', now()) - interval '1 month'
        RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker
    ),
    recorded AS (
        INSERT INTO pgsched_attempt
               (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker,
                error, error_class)
        SELECT f.id, f.scheduled_for, f.attempts, 'succeeded', f.started_at, clock.now,
               coalesce(f.worker, ''), '', ''
          FROM finished f, clock
    ),
    claimable AS MATERIALIZED (
        SELECT r.id, r.scheduled_for
          FROM pgsched_job_run r
         WHERE r.status IN ('pending', 'retrying')
           AND r.scheduled_for >= date_trunc('month', now()) - interval '1 month'
           AND r.fire_after <= (SELECT now FROM clock)
           AND (r.claim_expires_at IS NULL OR r.claim_expires_at < (SELECT now FROM clock))
           AND r.attempts < r.max_attempts
           AND r.job = ANY('{bench.noop}'::text[])
           AND (NULL::text[] IS NULL OR r.queue = ANY(NULL::text[]))
           AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock)
                OR r.status = 'retrying')
           AND (r.overlap IS NULL
                OR NOT EXISTS (SELECT FROM pgsched_job_run e
                                WHERE e.schedule_id = r.schedule_id AND e.overlap IS NOT NULL
                                  AND e.finished_at IS NULL AND e.id < r.id))
         ORDER BY r.priority * -1, r.fire_after, r.id
         LIMIT %(limit)s
           FOR NO KEY UPDATE OF r SKIP LOCKED
    )
    UPDATE pgsched_job_run r
       SET status = 'running', attempts = r.attempts + 1, claimed_by = gen_random_uuid(),
           worker = 'storage', started_at = clock.now,
           claim_expires_at = clock.now
               + least(greatest(r.timeout, interval '1 second'), interval '7 days') * 2
      FROM claimable c, clock
     WHERE r.id = c.id AND r.scheduled_for = c.scheduled_for
    RETURNING r.id, r.claimed_by, r.job, r.kwargs::text, r.attempts, r.timeout
    """,
    ("pgsched_schedule", "pgsched_job_run", "pgsched_attempt"),
)

# the history row: today's columns
RUN_COLUMNS = """
    id bigint NOT NULL, schedule_id bigint, schedule_name text, scheduled_for timestamptz NOT NULL,
    idempotency_key text NOT NULL, job text NOT NULL, kwargs jsonb NOT NULL DEFAULT '{}',
    queue text NOT NULL, status text NOT NULL, fire_after timestamptz NOT NULL,
    attempts smallint NOT NULL DEFAULT 0, max_attempts smallint NOT NULL,
    timeout interval NOT NULL, claimed_by uuid, worker text, claim_expires_at timestamptz,
    started_at timestamptz, finished_at timestamptz, note text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    tenant text NOT NULL DEFAULT '', priority smallint NOT NULL DEFAULT 0,
    return_value jsonb, task_call jsonb, is_backfill boolean NOT NULL DEFAULT false,
    overlap text, start_by timestamptz
"""
ATTEMPT = """
CREATE TABLE attempt (
    id bigint GENERATED BY DEFAULT AS IDENTITY, job_run_id bigint NOT NULL,
    run_scheduled_for timestamptz NOT NULL, number smallint NOT NULL, status text NOT NULL,
    started_at timestamptz, finished_at timestamptz, worker text NOT NULL DEFAULT '',
    error text NOT NULL DEFAULT '', error_class text NOT NULL DEFAULT '', detail jsonb,
    PRIMARY KEY (id, run_scheduled_for),
    UNIQUE (job_run_id, number, run_scheduled_for)
) PARTITION BY RANGE (run_scheduled_for);
""" + months("attempt")

SLIM = Design(
    "slim",
    "proto_slim",
    SCHEDULES
    + f"""
CREATE SEQUENCE run_id;
CREATE TABLE run ({RUN_COLUMNS},
    PRIMARY KEY (id, scheduled_for),
    CONSTRAINT run_valid CHECK (
        attempts BETWEEN 0 AND 8 AND max_attempts BETWEEN 1 AND 8 AND attempts <= max_attempts
        AND status IN ('pending', 'running', 'retrying', 'succeeded', 'failed', 'cancelled',
                       'missed')
        AND (status = 'running') = (claimed_by IS NOT NULL AND claim_expires_at IS NOT NULL)
        AND timeout BETWEEN interval '1 second' AND interval '7 days'
        AND priority BETWEEN -100 AND 100
        AND jsonb_typeof(kwargs) = 'object')
) PARTITION BY RANGE (scheduled_for);
CREATE UNIQUE INDEX run_occurrence ON run (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
CREATE UNIQUE INDEX run_key ON run (idempotency_key, scheduled_for);
CREATE INDEX run_claim ON run (priority, fire_after, id) WHERE status IN ('pending', 'retrying');
CREATE INDEX run_recent ON run (scheduled_for, id);
"""
    + months("run")
    + ATTEMPT,
    PLAN_DUE
    + """
inserted AS (
    INSERT INTO run
           (id, schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
            status, fire_after, attempts, max_attempts, timeout, tenant)
    SELECT nextval('run_id'), d.id, d.name, d.next_fire_at, """
    + KEY
    + """, d.job, d.kwargs,
           coalesce(d.queue, 'default'), 'pending', d.next_fire_at, 0,
           coalesce(d.max_attempts, 3), coalesce(d.timeout, interval '5 minutes'), d.tenant
      FROM due d
        ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM advanced)
""",
    OUTCOMES
    + """
finished AS (
    UPDATE run r
       SET status = 'succeeded', finished_at = clock.now, claimed_by = NULL,
           claim_expires_at = NULL
      FROM outcome o, clock
     WHERE r.id = o.id AND r.claimed_by = o.token
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker
),
recorded AS (
    INSERT INTO attempt (job_run_id, run_scheduled_for, number, status, started_at,
                         finished_at, worker)
    SELECT f.id, f.scheduled_for, f.attempts, 'succeeded', f.started_at, clock.now, f.worker
      FROM finished f, clock
),
claimable AS MATERIALIZED (
    SELECT r.id, r.scheduled_for
      FROM run r
     WHERE r.status IN ('pending', 'retrying')
       AND r.fire_after <= (SELECT now FROM clock)
     ORDER BY r.priority, r.fire_after, r.id
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE run r
   SET status = 'running', attempts = r.attempts + 1, claimed_by = gen_random_uuid(),
       worker = 'storage', started_at = clock.now, claim_expires_at = clock.now + r.timeout * 2
  FROM claimable c, clock
 WHERE r.id = c.id AND r.scheduled_for = c.scheduled_for
RETURNING r.id, r.claimed_by, r.job, r.kwargs::text, r.attempts, r.timeout
""",
    ("schedule", "run", "attempt"),
)

# the narrow live row: what the claim reads and writes
LIVE_COLUMNS = """
    id bigint PRIMARY KEY, scheduled_for timestamptz NOT NULL, status "char" NOT NULL,
    fire_after timestamptz NOT NULL, priority smallint NOT NULL DEFAULT 0, job text NOT NULL,
    queue text NOT NULL, tenant text NOT NULL DEFAULT '', attempts smallint NOT NULL DEFAULT 0,
    max_attempts smallint NOT NULL, timeout interval NOT NULL, claimed_by uuid,
    claim_expires_at timestamptz, started_at timestamptz, worker text
"""


def live_table(fillfactor: int, payload: str = "") -> str:
    """The live table of (a) and (b): the claim's columns (and ``payload``), one claim index."""
    return f"""
CREATE TABLE live ({LIVE_COLUMNS},{payload}
    CONSTRAINT live_valid CHECK (
        attempts BETWEEN 0 AND 8 AND attempts <= max_attempts
        AND (claimed_by IS NULL) = (claim_expires_at IS NULL))
) WITH (fillfactor = {fillfactor});
CREATE INDEX live_claim ON live (priority, fire_after, id);
"""


# (a): the live rows of the recorded outcomes ended, fenced on their lease tokens
LIVE_ENDED = """
ended AS (
    DELETE FROM live l
     USING outcome o
     WHERE l.id = o.id AND l.claimed_by = o.token
    RETURNING l.id, l.scheduled_for, l.attempts, l.started_at, l.worker
),
"""

HISTORY_INDEXES = """
CREATE UNIQUE INDEX run_occurrence ON run (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
CREATE UNIQUE INDEX run_key ON run (idempotency_key, scheduled_for);
CREATE INDEX run_recent ON run (scheduled_for, id);
"""

# (a) and (b): the attempt of each ended live row, and the claim on the live table (a HOT
# update: no index names a column it writes)
LIVE_RECORD = """
recorded AS (
    INSERT INTO attempt (job_run_id, run_scheduled_for, number, status, started_at,
                         finished_at, worker)
    SELECT e.id, e.scheduled_for, e.attempts, 'succeeded', e.started_at, clock.now, e.worker
      FROM ended e, clock
),
claimable AS MATERIALIZED (
    SELECT l.id
      FROM live l
     WHERE l.fire_after <= (SELECT now FROM clock)
       AND (l.claimed_by IS NULL OR l.claim_expires_at < (SELECT now FROM clock))
     ORDER BY l.priority, l.fire_after, l.id
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF l SKIP LOCKED
)"""
LIVE_RECORD_AND_CLAIM = (
    LIVE_RECORD
    + """
UPDATE live l
   SET status = 'r', attempts = l.attempts + 1, claimed_by = gen_random_uuid(),
       worker = 'storage', started_at = clock.now, claim_expires_at = clock.now + l.timeout * 2
  FROM claimable c, clock
 WHERE l.id = c.id
"""
)

NARROW = Design(
    "narrow",
    "proto_narrow",
    SCHEDULES
    + f"""
CREATE SEQUENCE run_id;
CREATE TABLE run ({RUN_COLUMNS}, PRIMARY KEY (id, scheduled_for))
    PARTITION BY RANGE (scheduled_for);
"""
    + HISTORY_INDEXES
    + months("run", "WITH (fillfactor = 80)")
    + ATTEMPT
    + live_table(70),
    PLAN_DUE
    + """
inserted AS (
    INSERT INTO run
           (id, schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
            status, fire_after, attempts, max_attempts, timeout, tenant)
    SELECT nextval('run_id'), d.id, d.name, d.next_fire_at, """
    + KEY
    + """, d.job, d.kwargs,
           coalesce(d.queue, 'default'), 'pending', d.next_fire_at, 0,
           coalesce(d.max_attempts, 3), coalesce(d.timeout, interval '5 minutes'), d.tenant
      FROM due d
        ON CONFLICT DO NOTHING
    RETURNING id, scheduled_for, fire_after, job, queue, tenant, max_attempts, timeout
),
live AS (
    INSERT INTO live (id, scheduled_for, status, fire_after, job, queue, tenant, max_attempts,
                      timeout)
    SELECT id, scheduled_for, 'p', fire_after, job, queue, tenant, max_attempts, timeout
      FROM inserted
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM advanced)
""",
    OUTCOMES
    + LIVE_ENDED
    + """
finished AS (
    UPDATE run r
       SET status = 'succeeded', attempts = e.attempts, started_at = e.started_at,
           finished_at = clock.now, worker = e.worker
      FROM ended e, clock
     WHERE r.id = e.id AND r.scheduled_for = e.scheduled_for
    RETURNING r.id
),
"""
    + LIVE_RECORD_AND_CLAIM
    + """RETURNING l.id, l.claimed_by, l.job,
          (SELECT r.kwargs::text FROM run r
            WHERE r.id = l.id AND r.scheduled_for = l.scheduled_for),
          l.attempts, l.timeout
""",
    ("schedule", "run", "attempt", "live"),
)

ONCE = Design(
    "once",
    "proto_once",
    SCHEDULES
    + f"""
CREATE SEQUENCE run_id;
CREATE TABLE run ({RUN_COLUMNS}, PRIMARY KEY (id, scheduled_for))
    PARTITION BY RANGE (scheduled_for);
"""
    + HISTORY_INDEXES
    + months("run")
    + ATTEMPT
    + """
CREATE TABLE occurrence (schedule_id bigint NOT NULL, scheduled_for timestamptz NOT NULL,
                         PRIMARY KEY (schedule_id, scheduled_for))
    PARTITION BY RANGE (scheduled_for);
"""
    + months("occurrence")
    + live_table(
        70,
        """
    schedule_id bigint, schedule_name text, idempotency_key text NOT NULL,
    kwargs jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now(),""",
    ),
    PLAN_DUE
    + """
keyed AS (
    INSERT INTO occurrence (schedule_id, scheduled_for)
    SELECT d.id, d.next_fire_at FROM due d
        ON CONFLICT DO NOTHING
    RETURNING schedule_id, scheduled_for
),
inserted AS (
    INSERT INTO live (id, schedule_id, schedule_name, scheduled_for, idempotency_key, status,
                      fire_after, job, kwargs, queue, tenant, max_attempts, timeout)
    SELECT nextval('run_id'), d.id, d.name, d.next_fire_at, """
    + KEY
    + """, 'p',
           d.next_fire_at, d.job, d.kwargs, coalesce(d.queue, 'default'), d.tenant,
           coalesce(d.max_attempts, 3), coalesce(d.timeout, interval '5 minutes')
      FROM due d
      JOIN keyed k ON k.schedule_id = d.id AND k.scheduled_for = d.next_fire_at
    RETURNING id
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM advanced)
""",
    OUTCOMES
    + """
ended AS (
    DELETE FROM live l
     USING outcome o
     WHERE l.id = o.id AND l.claimed_by = o.token
    RETURNING l.*
),
finished AS (
    INSERT INTO run
           (id, schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
            status, fire_after, attempts, max_attempts, timeout, tenant, worker, started_at,
            finished_at, created_at)
    SELECT e.id, e.schedule_id, e.schedule_name, e.scheduled_for, e.idempotency_key, e.job,
           e.kwargs, e.queue, 'succeeded', e.fire_after, e.attempts, e.max_attempts,
           e.timeout, e.tenant, e.worker, e.started_at, clock.now, e.created_at
      FROM ended e, clock
),
"""
    + LIVE_RECORD_AND_CLAIM
    + """RETURNING l.id, l.claimed_by, l.job, l.kwargs::text, l.attempts, l.timeout
""",
    ("schedule", "run", "attempt", "occurrence", "live"),
)

# (a) with the history row current: the claim and the end each update it too, and both
# are HOT updates (no index of the history names a column either writes). The history keeps
# the occurrence guard and every status from the plan on, as pgsched_job_run does today.
CURRENT_HISTORY_INDEXES = (
    HISTORY_INDEXES
    + """
CREATE INDEX run_tenant ON run (tenant, scheduled_for, id) WHERE tenant <> '';
"""
)

CURRENT = Design(
    "current",
    "proto_current",
    SCHEDULES
    + f"""
CREATE SEQUENCE run_id;
CREATE TABLE run ({RUN_COLUMNS}, PRIMARY KEY (id, scheduled_for))
    PARTITION BY RANGE (scheduled_for);
"""
    + CURRENT_HISTORY_INDEXES
    + months("run", "WITH (fillfactor = 70)")
    + ATTEMPT
    + live_table(50),
    NARROW.plan,
    OUTCOMES
    + LIVE_ENDED
    + """
finished AS (
    UPDATE run r
       SET status = 'succeeded', finished_at = clock.now
      FROM ended e, clock
     WHERE r.id = e.id AND r.scheduled_for = e.scheduled_for
    RETURNING r.id
),
"""
    + LIVE_RECORD
    + """,
claimed AS (
    UPDATE live l
       SET status = 'r', attempts = l.attempts + 1, claimed_by = gen_random_uuid(),
           worker = 'storage', started_at = clock.now,
           claim_expires_at = clock.now + l.timeout * 2
      FROM claimable c, clock
     WHERE l.id = c.id
    RETURNING l.id, l.scheduled_for, l.claimed_by, l.job, l.attempts, l.timeout, l.started_at,
              l.worker
),
shown AS (
    UPDATE run r
       SET status = 'running', attempts = c.attempts, started_at = c.started_at,
           worker = c.worker
      FROM claimed c
     WHERE r.id = c.id AND r.scheduled_for = c.scheduled_for
    RETURNING r.id, r.kwargs::text AS kwargs
)
SELECT c.id, c.claimed_by, c.job, s.kwargs, c.attempts, c.timeout
  FROM claimed c JOIN shown s ON s.id = c.id
""",
    ("schedule", "run", "attempt", "live"),
)

# `current` with its live rows made by a trigger on the history (so that every writer of
# pgsched_job_run, the admin and enqueue() included, gets one): the plan inserts only the
# history row. By a row trigger, or by a statement trigger reading the inserted rows.
HISTORY_ONLY_PLAN = NARROW.plan.replace(
    """),
live AS (
    INSERT INTO live (id, scheduled_for, status, fire_after, job, queue, tenant, max_attempts,
                      timeout)
    SELECT id, scheduled_for, 'p', fire_after, job, queue, tenant, max_attempts, timeout
      FROM inserted
)
""",
    ")\n",
)
assert HISTORY_ONLY_PLAN != NARROW.plan

LIVE_BY_ROW_TRIGGER = """
CREATE FUNCTION live_from_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO live (id, scheduled_for, status, fire_after, job, queue, tenant, max_attempts,
                      timeout)
    VALUES (NEW.id, NEW.scheduled_for, 'p', NEW.fire_after, NEW.job, NEW.queue, NEW.tenant,
            NEW.max_attempts, NEW.timeout);
    RETURN NULL;
END $$;
CREATE TRIGGER live_from_run AFTER INSERT ON run FOR EACH ROW
    WHEN (NEW.status IN ('pending', 'retrying')) EXECUTE FUNCTION live_from_run();
"""

LIVE_BY_STATEMENT_TRIGGER = """
CREATE FUNCTION live_from_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO live (id, scheduled_for, status, fire_after, job, queue, tenant, max_attempts,
                      timeout)
    SELECT id, scheduled_for, 'p', fire_after, job, queue, tenant, max_attempts, timeout
      FROM new_runs
     WHERE status IN ('pending', 'retrying');
    RETURN NULL;
END $$;
CREATE TRIGGER live_from_runs AFTER INSERT ON run REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION live_from_runs();
"""

CURRENT_ROW = Design(
    "current_row",
    "proto_current_row",
    CURRENT.setup + LIVE_BY_ROW_TRIGGER,
    HISTORY_ONLY_PLAN,
    CURRENT.exchange,
    CURRENT.tables,
)

CURRENT_STATEMENT = Design(
    "current_stmt",
    "proto_current_stmt",
    CURRENT.setup + LIVE_BY_STATEMENT_TRIGGER,
    HISTORY_ONLY_PLAN,
    CURRENT.exchange,
    CURRENT.tables,
)

# `current` with the engine writing only the history, as it does today: the live table
# is kept by statement triggers on the history (inserted rows, updated rows), so that no
# statement but the claim's read changes. The lease token is on both rows. The claim takes
# its order from the live table and locks the history rows (SKIP LOCKED), so that every
# writer locks a run's history row before its live row (its trigger's write): the lock
# order of every other writer of the history (cancel, the reaper, the admin).
LIVE_SYNCED_BY_TRIGGERS = (
    LIVE_BY_STATEMENT_TRIGGER
    + """
CREATE FUNCTION live_follows_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM live l USING changed_runs n
     WHERE l.id = n.id AND n.status NOT IN ('pending', 'running', 'retrying');
    UPDATE live l
       SET status = CASE n.status WHEN 'running' THEN 'r' WHEN 'retrying' THEN 't' ELSE 'p' END,
           fire_after = n.fire_after, attempts = n.attempts, claimed_by = n.claimed_by,
           claim_expires_at = n.claim_expires_at, started_at = n.started_at, worker = n.worker
      FROM changed_runs n
     WHERE l.id = n.id AND n.status IN ('pending', 'running', 'retrying');
    RETURN NULL;
END $$;
CREATE TRIGGER live_follows_runs AFTER UPDATE ON run REFERENCING NEW TABLE AS changed_runs
    FOR EACH STATEMENT EXECUTE FUNCTION live_follows_runs();
"""
)

SYNCED = Design(
    "synced",
    "proto_synced",
    CURRENT.setup + LIVE_SYNCED_BY_TRIGGERS,
    HISTORY_ONLY_PLAN,
    OUTCOMES
    + """
finished AS (
    UPDATE run r
       SET status = 'succeeded', finished_at = clock.now, claimed_by = NULL,
           claim_expires_at = NULL
      FROM outcome o, clock
     WHERE r.id = o.id AND r.claimed_by = o.token
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker
),
recorded AS (
    INSERT INTO attempt (job_run_id, run_scheduled_for, number, status, started_at,
                         finished_at, worker)
    SELECT f.id, f.scheduled_for, f.attempts, 'succeeded', f.started_at, clock.now, f.worker
      FROM finished f, clock
),
claimable AS MATERIALIZED (
    SELECT r.id, r.scheduled_for
      FROM live l
      JOIN run r ON r.id = l.id AND r.scheduled_for = l.scheduled_for
     WHERE l.fire_after <= (SELECT now FROM clock)
       AND l.status IN ('p', 't')
       AND r.status IN ('pending', 'retrying')
     ORDER BY l.priority, l.fire_after, l.id
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF r SKIP LOCKED
)
UPDATE run r
   SET status = 'running', attempts = r.attempts + 1, claimed_by = gen_random_uuid(),
       worker = 'storage', started_at = clock.now, claim_expires_at = clock.now + r.timeout * 2
  FROM claimable c, clock
 WHERE r.id = c.id AND r.scheduled_for = c.scheduled_for
RETURNING r.id, r.claimed_by, r.job, r.kwargs::text, r.attempts, r.timeout
""",
    CURRENT.tables,
)

RAW = Design(
    "raw",
    "proto_raw",
    """
CREATE TABLE schedule(
  id bigint primary key, name text not null, status text not null default 'active',
  interval_s int not null default 3600, next_fire_at timestamptz not null,
  last_fire_at timestamptz);
CREATE INDEX schedule_due ON schedule(next_fire_at) WHERE status='active';
CREATE TABLE job_run(
  id bigserial primary key, schedule_id bigint references schedule(id),
  scheduled_for timestamptz not null, status text not null default 'pending',
  fire_after timestamptz not null, attempts int not null default 0, claimed_by text,
  claim_expires_at timestamptz, finished_at timestamptz);
CREATE UNIQUE INDEX job_run_occ ON job_run(schedule_id, scheduled_for)
  WHERE schedule_id IS NOT NULL;
CREATE INDEX job_run_claim ON job_run(fire_after) WHERE status IN ('pending','retrying');
CREATE TABLE attempt(id bigserial primary key, job_run_id bigint not null references job_run(id),
  n int not null, status text not null, started_at timestamptz, finished_at timestamptz);
CREATE INDEX attempt_run ON attempt(job_run_id);
INSERT INTO schedule (id, name, next_fire_at)
SELECT id, name, next_fire_at FROM public.pgsched_schedule;
""",
    """
WITH due AS (
    SELECT id, next_fire_at FROM schedule
     WHERE status = 'active' AND next_fire_at <= now() + interval '5 s'
     ORDER BY next_fire_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
),
inserted AS (
    INSERT INTO job_run (schedule_id, scheduled_for, fire_after)
    SELECT id, next_fire_at, next_fire_at FROM due ON CONFLICT DO NOTHING RETURNING id
),
advanced AS (
    UPDATE schedule s SET next_fire_at = s.next_fire_at + make_interval(secs => s.interval_s),
           last_fire_at = s.next_fire_at
      FROM due WHERE s.id = due.id RETURNING s.id
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM advanced)
""",
    OUTCOMES
    + """
finished AS (
    UPDATE job_run j SET status = 'succeeded', finished_at = clock.now, claim_expires_at = NULL
      FROM outcome o, clock
     WHERE j.id = o.id AND j.claimed_by = o.token::text
    RETURNING j.id, j.attempts
),
recorded AS (
    INSERT INTO attempt (job_run_id, n, status, started_at, finished_at)
    SELECT f.id, f.attempts, 'succeeded', clock.now, clock.now FROM finished f, clock
),
candidate AS MATERIALIZED (
    SELECT id FROM job_run
     WHERE status IN ('pending', 'retrying') AND fire_after <= (SELECT now FROM clock)
       AND (claim_expires_at IS NULL OR claim_expires_at < (SELECT now FROM clock))
     ORDER BY fire_after LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE job_run j
   SET status = 'running', claimed_by = gen_random_uuid()::text,
       claim_expires_at = clock.now + interval '60 s', attempts = attempts + 1
  FROM candidate c, clock
 WHERE j.id = c.id
RETURNING j.id, j.claimed_by::uuid, NULL::text, NULL::text, j.attempts, NULL::interval
""",
    ("schedule", "job_run", "attempt"),
)

DESIGNS = {
    d.name: d
    for d in (TODAY, SLIM, NARROW, CURRENT, CURRENT_ROW, CURRENT_STATEMENT, SYNCED, ONCE, RAW)
}


# -- the driver -------------------------------------------------------------------------------


def _backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms


class Phase:
    """Counts a phase: wall, the backends' CPU, the driver's CPU, WAL bytes and records."""

    def __init__(self, cluster: Any, conn: psycopg.Connection[Any]) -> None:
        self.cluster, self.conn = cluster, conn

    def __enter__(self) -> Phase:
        self.pids: list[int] = []
        self.lsn0 = self._lsn()
        self.client0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def add_backend(self, pid: int) -> None:
        self.pids.append(pid)
        setattr(self, f"cpu0_{pid}", _backend_cpu(pid))

    def backend_done(self, pid: int) -> None:
        setattr(self, f"cpu1_{pid}", _backend_cpu(pid))

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        self.client = time.process_time() - self.client0
        self.lsn1 = self._lsn()
        self.server = sum(
            getattr(self, f"cpu1_{p}") - getattr(self, f"cpu0_{p}") for p in self.pids
        )

    def _lsn(self) -> str:
        row = self.conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])

    def result(self, runs: int) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (self.lsn1, self.lsn0)
        ).fetchone()
        assert row is not None
        records = Counter[str]()
        for key, (count, _size) in self.cluster.wal_records(self.lsn0, self.lsn1).items():
            rmgr_kind = key.split(" ")[0]
            records[rmgr_kind] += count
        per = max(runs, 1)
        kinds = {
            "heap_inserts": ("Heap/INSERT", "Heap/INSERT+INIT", "Heap2/MULTI_INSERT",
                             "Heap2/MULTI_INSERT+INIT"),
            "heap_updates": ("Heap/UPDATE", "Heap/UPDATE+INIT"),
            "hot_updates": ("Heap/HOT_UPDATE", "Heap/HOT_UPDATE+INIT"),
            "heap_deletes": ("Heap/DELETE",),
            "heap_locks": ("Heap/LOCK",),
            "index_entries": ("Btree/INSERT_LEAF", "Btree/INSERT_UPPER", "Btree/SPLIT_L",
                              "Btree/SPLIT_R", "Btree/INSERT_POST", "Btree/NEWROOT"),
        }  # fmt: skip
        return {
            "runs": runs,
            "wall_s": round(self.wall, 3),
            "rate": round(runs / self.wall) if self.wall else None,
            "server_us_per_run": round(self.server / per * 1e6, 1),
            "client_us_per_run": round(self.client / per * 1e6, 1),
            "wal_bytes_per_run": round(float(row[0]) / per, 1),
            **{k: round(sum(records[n] for n in names) / per, 2) for k, names in kinds.items()},
            "wal_records": dict(records.most_common(20)),
        }


def _connect(dsn: str, design: Design) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    conn.execute(f"SET search_path = {design.schema}, public")
    return conn


def _pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def _race(dsn: str, design: Design, phase: Phase, work: Any) -> int:
    """Two connections run ``work(conn) -> runs`` at once; the total."""
    conns = [_connect(dsn, design) for _ in range(2)]
    totals: list[int] = []
    try:
        for conn in conns:
            phase.add_backend(_pid(conn))
        threads = [threading.Thread(target=lambda c=c: totals.append(work(c))) for c in conns]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for conn in conns:
            phase.backend_done(_pid(conn))
    finally:
        for conn in conns:
            conn.close()
    return sum(totals)


def plan(design: Design, batch: int) -> Any:
    def work(conn: psycopg.Connection[Any]) -> int:
        total = 0
        while True:
            row = conn.execute(design.plan, {"batch": batch}).fetchone()
            assert row is not None
            if not row[1]:
                return total
            total += int(row[0])

    return work


def burst(design: Design, batch: int) -> Any:
    def work(conn: psycopg.Connection[Any]) -> int:
        done = 0
        ids: list[int] = []
        tokens: list[Any] = []
        while True:
            rows = conn.execute(
                design.exchange, {"ids": ids, "tokens": tokens, "limit": batch}
            ).fetchall()
            done += len(ids)
            if not rows:
                return done
            # what a replica decodes per claim: the payload as JSON
            for row in rows:
                json.loads(row[3] or "{}")
            ids = [r[0] for r in rows]
            tokens = [r[1] for r in rows]

    return work


def run_design(cluster: Any, dsn: str, design: Design, schedules: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in design.tables:
            conn.execute(f"VACUUM ANALYZE {design.schema}.{table}")
        conn.execute("CHECKPOINT")
        with Phase(cluster, conn) as p:
            planned = _race(dsn, design, p, plan(design, 500))
        planned_result = p.result(planned)
        for table in design.tables:
            conn.execute(f"ANALYZE {design.schema}.{table}")
        conn.execute("CHECKPOINT")
        with Phase(cluster, conn) as b:
            done = _race(dsn, design, b, burst(design, 32))
        burst_result = b.result(done)
        size = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE ANY(%s)",
            (design.schema, [f"{t}%" for t in design.tables]),
        ).fetchone()
    assert planned == schedules, f"{design.name}: planned {planned} of {schedules}"
    assert done == schedules, f"{design.name}: completed {done} of {schedules}"
    return {
        "plan": planned_result,
        "burst": burst_result,
        "bytes": int(size[0] or 0) if size else 0,
    }


def reset(conn: psycopg.Connection[Any], design: Design, schedules: int) -> None:
    """Drop and build the design's tables, with ``schedules`` schedules due now."""
    if design.schema == "public":
        conn.execute(
            "TRUNCATE pgsched_attempt, pgsched_job_run, pgsched_schedule,"
            " pgsched_schedule_change, pgsched_skipped_range RESTART IDENTITY CASCADE"
        )
        conn.execute("ALTER TABLE pgsched_schedule DISABLE TRIGGER USER")
        conn.execute(design.setup.replace("%(schedules)s", str(schedules)))
        conn.execute("ALTER TABLE pgsched_schedule ENABLE TRIGGER USER")
        return
    conn.execute(f"DROP SCHEMA IF EXISTS {design.schema} CASCADE")
    conn.execute(f"CREATE SCHEMA {design.schema}")
    conn.execute(f"SET search_path = {design.schema}, public")
    conn.execute(design.setup)
    conn.execute("SET search_path = public")


def _line(cell: dict[str, Any]) -> str:
    pl, bu = cell["plan"], cell["burst"]
    entries = pl["index_entries"] + bu["index_entries"]
    return (
        f"plan {pl['rate']:>6}/s (server {pl['server_us_per_run']:>5} us/run,"
        f" WAL {pl['wal_bytes_per_run']:>6} B) | burst {bu['wall_s']:>6.2f} s ="
        f" {bu['rate']:>5}/s (server {bu['server_us_per_run']:>5} us,"
        f" client {bu['client_us_per_run']:>5} us, WAL {bu['wal_bytes_per_run']:>6} B)"
        f" | index entries {entries:.1f}, HOT {bu['hot_updates']:.2f}, load {cell['load'][0]:.2f}"
    )


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """The results as a Markdown table: each design's repetitions, as ``a / b``."""

    def cells(name: str, phase: str, key: str, fmt: str = "{:g}") -> str:
        return " / ".join(fmt.format(rep[phase][key]) for rep in results[name])

    def both(name: str, key: str) -> str:
        return " / ".join(f"{rep['plan'][key] + rep['burst'][key]:.1f}" for rep in results[name])

    rows = [
        ("planner, runs/s (2 connections, batch 500)", lambda n: cells(n, "plan", "rate")),
        ("burst, s (100k at batch 32, 2 connections)", lambda n: cells(n, "burst", "wall_s")),
        ("server CPU per run, plan, µs", lambda n: cells(n, "plan", "server_us_per_run")),
        ("server CPU per run, executor, µs", lambda n: cells(n, "burst", "server_us_per_run")),
        ("client CPU per run, executor, µs", lambda n: cells(n, "burst", "client_us_per_run")),
        ("WAL bytes per run, plan + claim + finish", lambda n: both(n, "wal_bytes_per_run")),
        ("heap inserts per run", lambda n: both(n, "heap_inserts")),
        ("heap updates per run (not HOT)", lambda n: both(n, "heap_updates")),
        ("HOT updates per run", lambda n: both(n, "hot_updates")),
        ("heap deletes per run", lambda n: both(n, "heap_deletes")),
        ("index entries per run", lambda n: both(n, "index_entries")),
        ("size after the burst, MB", lambda n: " / ".join(
            f"{rep['bytes'] / 1e6:.0f}" for rep in results[n])),
    ]  # fmt: skip
    names = list(results)
    out = ["| per run | " + " | ".join(f"`{n}`" for n in names) + " |"]
    out.append("| --- |" + " ---: |" * len(names))
    for label, fn in rows:
        out.append(f"| {label} | " + " | ".join(fn(n) for n in names) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--out", default=None)
    parser.add_argument("--table", default=None, help="print a results file as Markdown")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())["results"]))
        return 0

    from . import machine
    from .cluster import migrated_database, private_cluster

    results: dict[str, list[dict[str, Any]]] = {}
    with private_cluster() as cluster:
        dsn = migrated_database(cluster, "storage")
        for rep in range(args.reps):
            for name in args.designs.split(","):
                design = DESIGNS[name]
                with psycopg.connect(dsn, autocommit=True) as conn:
                    # the schedules (in pgsched_schedule) that every design copies
                    reset(conn, TODAY, args.schedules)
                    if design is not TODAY:
                        reset(conn, design, args.schedules)
                cell = run_design(cluster, dsn, design, args.schedules)
                cell["load"] = machine.load()
                results.setdefault(name, []).append(cell)
                print(f"rep {rep + 1} {name:7}: {_line(cell)}", flush=True)
        settings = cluster.settings()
    machine.write_results(args.out, args, results, server=settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
