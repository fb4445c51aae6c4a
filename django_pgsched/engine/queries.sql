-- The scheduler's hot-path SQL, one named block per statement.
-- Loaded by queries.py. Parameters use the %(name)s style.
--
-- Every statement that decides "is it due / has it expired" takes its time
-- from the database: coalesce(%(now)s, <database clock>). Tests pass an
-- explicit %(now)s to travel in time; the runner always passes NULL.


-- name: planner_claim
-- Claim due schedules (FOR NO KEY UPDATE SKIP LOCKED, so two
-- planners take different rows instead of waiting on each other). A NULL
-- next_fire_at means "new, resumed or re-timed: fire first after now".
-- unplanned_from: a stopped schedule is active again; the occurrences from there
-- to the first one this pass plans go into the ledger (paused or broken).
-- The first row always carries the database time, even when nothing is due.
-- defect: the values of a row that Python could not read or the planner could not
-- use (a time outside years 1-9999, a duration out of its bounds: written by SQL
-- with the bounds' CHECKs dropped), named with their text; the row's times and
-- durations then come back NULL and the planner marks it broken.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT clock.now AS db_now, s.id, s.name, s.job, s.cron,
       CASE WHEN d.defect = '' THEN s."interval" END AS "interval",
       CASE WHEN d.defect = '' THEN s.anchor END AS anchor,
       CASE WHEN d.defect = '' THEN s.next_fire_at END AS next_fire_at,
       s.misfire_policy, s.catch_up_limit,
       CASE WHEN d.defect = '' THEN s.misfire_grace END AS misfire_grace,
       s.max_attempts,
       CASE WHEN d.defect = '' THEN s.timeout END AS timeout,
       s.queue, s.timezone, s.dst_gap, s.dst_fold,
       CASE WHEN d.defect = '' THEN s.jitter ELSE interval '0' END AS jitter,
       CASE WHEN d.defect = '' THEN s.unplanned_from END AS unplanned_from,
       s.unplanned_reason, d.defect,
       -- its tenant (one probe of the tenants' key, for a schedule of a tenant only):
       -- paused, its due occurrences go to the ledger and no run is made; its record's
       -- min_interval, which the planner holds each planned gap to (a tenant without
       -- a record has TENANT_DEFAULTS')
       (s.tenant <> '' AND coalesce(t.paused, false)) AS tenant_paused,
       s.tenant,
       (s.tenant <> '' AND t.key IS NOT NULL) AS tenant_recorded,
       t.min_interval AS tenant_min_interval,
       -- nothing claimed: the earliest next_fire_at of an active schedule (locked ones
       -- included), which the planner may sleep until; NULL when there is none, or
       -- when it is NULL itself (a new schedule) or unreadable
       CASE WHEN s.id IS NULL THEN (
            SELECT CASE WHEN pgsched_time_ok(n.next_fire_at) THEN n.next_fire_at END
              FROM pgsched_schedule n
             WHERE n.status = 'active'
             ORDER BY coalesce(n.next_fire_at, '-infinity'::timestamptz)
             LIMIT 1) END AS next_due
  FROM clock
  LEFT JOIN LATERAL (
        SELECT *
          FROM pgsched_schedule
         WHERE status = 'active'
           AND coalesce(next_fire_at, '-infinity'::timestamptz) <= clock.now + %(lookahead)s
         ORDER BY coalesce(next_fire_at, '-infinity'::timestamptz)
         LIMIT %(batch)s
           FOR NO KEY UPDATE SKIP LOCKED
       ) s ON true
  LEFT JOIN LATERAL (
        SELECT t.key, t.paused, t.min_interval FROM pgsched_tenant t
         WHERE s.tenant <> '' AND t.key = s.tenant
       ) t ON true
  LEFT JOIN LATERAL (
        SELECT concat_ws('; ',
            CASE WHEN NOT pgsched_time_ok(s.anchor) THEN 'anchor ' || s.anchor END,
            CASE WHEN NOT pgsched_time_ok(s.next_fire_at)
                 THEN 'next_fire_at ' || s.next_fire_at END,
            CASE WHEN NOT pgsched_time_ok(s.unplanned_from)
                 THEN 'unplanned_from ' || s.unplanned_from END,
            CASE WHEN NOT pgsched_interval_ok(s."interval", interval '1 second', interval '366 days')
                 THEN 'interval ' || s."interval" END,
            CASE WHEN NOT pgsched_interval_ok(s.misfire_grace, interval '0', interval '366 days')
                 THEN 'misfire_grace ' || s.misfire_grace END,
            CASE WHEN NOT pgsched_interval_ok(s.timeout, interval '1 second', interval '7 days')
                 THEN 'timeout ' || s.timeout END,
            CASE WHEN NOT pgsched_interval_ok(s.jitter, interval '0', interval '1 day')
                 THEN 'jitter ' || s.jitter END,
            CASE WHEN NOT pgsched_interval_ok(s.start_deadline, interval '1 second',
                                              interval '366 days')
                 THEN 'start_deadline ' || s.start_deadline END
        ) AS defect
       ) d ON true;


-- name: planner_stale_months
-- The months of runs (partitions of pgsched_job_run) whose statistics the runs
-- written since their last ANALYZE have outgrown: at least %(at_least)s rows
-- changed, and more than half as many as the statistics counted (autovacuum's rule
-- is a tenth, at its next round: up to a minute). The planner analyzes them after a
-- burst: plans made while a month was small (every replica's, prepared and kept)
-- are made again for what it holds. pg_stat_user_tables is readable by any role.
SELECT s.relid::regclass::text AS month
  FROM pg_stat_user_tables s
  JOIN pg_inherits i ON i.inhrelid = s.relid
  JOIN pg_class c ON c.oid = s.relid
 WHERE i.inhparent = 'pgsched_job_run'::regclass
   AND s.n_mod_since_analyze >= %(at_least)s
   AND s.n_mod_since_analyze > greatest(c.reltuples, 0) / 2
 ORDER BY s.relid::regclass::text;


-- name: planner_apply
-- One statement per batch: insert the runs (the duplicate guard: the unique index on
-- (schedule_id, scheduled_for) and ON CONFLICT DO NOTHING), advance every
-- claimed schedule, add the skipped occurrences, record what did not run in
-- the ledger, and wake the executors once if anything was inserted. A run's
-- queue, attempts and timeout come from its schedule, else from its job's
-- defaults (one row per distinct job); its priority from its job (a django.tasks
-- task's priority; 0 for @job functions). A run's fire_after is its occurrence
-- plus the schedule's deterministic jitter (timing/jitter.py; equal to
-- scheduled_for without jitter). A ledger span that starts right after a range
-- of the same schedule and reason (its "previous" occurrence is that range's
-- last) extends the range instead of adding a row.
WITH job_default AS (
    SELECT *
      FROM unnest(%(job_names)b::text[], %(job_queues)b::text[], %(job_attempts)b::smallint[],
                  %(job_timeouts)b::interval[], %(job_priorities)b::smallint[])
        AS d(job, queue, max_attempts, timeout, priority)
),
plan AS (
    SELECT *
      FROM unnest(%(ids)b::bigint[], %(next_fire_at)b::timestamptz[],
                  %(last_fire_at)b::timestamptz[], %(skipped)b::bigint[])
        AS p(id, next_fire_at, last_fire_at, skipped)
),
occurrence AS (
    SELECT *
      FROM unnest(%(run_schedule_ids)b::bigint[], %(run_times)b::timestamptz[],
                  %(run_fire_after)b::timestamptz[])
        AS o(schedule_id, scheduled_for, fire_after)
),
inserted AS (
    INSERT INTO pgsched_job_run
           (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue, status,
            fire_after, attempts, max_attempts, timeout, note, tenant, priority, overlap,
            start_by)
    SELECT s.id, s.name, o.scheduled_for,
           'pgsched:' || s.id || ':'
               || to_char(o.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
           s.job, s.kwargs, coalesce(s.queue, d.queue), 'pending', o.fire_after, 0,
           coalesce(s.max_attempts, d.max_attempts), coalesce(s.timeout, d.timeout), '', s.tenant,
           d.priority, nullif(s.overlap, 'allow'), o.fire_after + s.start_deadline
      FROM occurrence o
      JOIN pgsched_schedule s ON s.id = o.schedule_id
      JOIN job_default d ON d.job = s.job
     ORDER BY o.scheduled_for, s.id
        ON CONFLICT DO NOTHING
    RETURNING id, schedule_id
),
advanced AS (
    UPDATE pgsched_schedule s
       SET next_fire_at = p.next_fire_at,
           last_fire_at = coalesce(p.last_fire_at, s.last_fire_at),
           skipped_occurrences = s.skipped_occurrences + p.skipped,
           unplanned_from = NULL,
           unplanned_reason = NULL
      FROM plan p
     WHERE s.id = p.id
    RETURNING s.id
),
span AS (
    SELECT *
      FROM unnest(%(span_schedule_ids)b::bigint[], %(span_first)b::timestamptz[],
                  %(span_last)b::timestamptz[], %(span_count)b::bigint[],
                  %(span_reason)b::text[], %(span_previous)b::timestamptz[])
           WITH ORDINALITY AS k(schedule_id, first, last, count, reason, previous, ord)
),
extended AS (
    UPDATE pgsched_skipped_range r
       SET last = k.last, count = r.count + k.count
      FROM span k
     WHERE r.schedule_id = k.schedule_id AND r.last = k.previous AND r.reason = k.reason
    RETURNING k.ord
),
ledgered AS (
    INSERT INTO pgsched_skipped_range (schedule_id, first, last, count, reason)
    SELECT schedule_id, first, last, count, reason
      FROM span
     WHERE ord NOT IN (SELECT ord FROM extended)
)
SELECT (SELECT count(*) FROM advanced) AS advanced,
       ARRAY(SELECT schedule_id FROM inserted) AS inserted,
       (SELECT pg_notify('pgsched_wait', left(string_agg(id::text, ','), 7000)) FROM inserted
         HAVING count(*) > 0) AS notified;


-- name: planner_mark_broken
-- A schedule whose occurrences cannot be computed stops firing until it is fixed.
UPDATE pgsched_schedule s
   SET status = 'broken', last_error = b.error
  FROM unnest(%(ids)b::bigint[], %(errors)b::text[]) AS b(id, error)
 WHERE s.id = b.id;


-- name: executor_pass
-- One executor pass in one statement (one round trip, one commit):
-- 1. record the finished attempts (lease rule 3: only where the lease token is
--    still ours): each run's new status, decided by the executor
--    (claims.Outcome.run_status), and its attempt row; a retried run falls due
--    again after its delay;
-- 2. claim at most %(limit)s due runs for the idle slots (lease rule 1), a fresh
--    lease token each, the attempt counted at the claim. Which runs are
--    claimable is decided in the "claimable" CTE and nowhere else (status, due,
--    attempts left, a job registered in this replica, its queues, the claim
--    cursor). A run that uses a capability with rules of its own (an overlap
--    policy, a start deadline) is not claimed here but by executor_guarded_pick
--    and executor_pass_by_id, so the common run pays nothing for those rules;
-- 3. when the slots were not all filled, say when the next claimable run falls due.
-- Recording and claiming commit together, so a slot's outcome is recorded by
-- the commit that claims its successor (never more live leases than slots).
-- Rows: one per claimed run, or a single row with a NULL id when none was; each
-- also carries the pass's facts (recorded ids and statuses, next due, database time).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
-- %(live_since)s: where the months that may hold an unfinished run start (what the
-- previous pass read from pgsched_run_horizon; NULL: every month). Every read of an
-- unfinished run below says so, and PostgreSQL leaves the older months (finished
-- history) out of the statement when it starts it.
outcome AS (
    SELECT *
      FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[], %(errors)b::text[],
                  %(statuses)b::text[], %(delays)b::float8[], %(values)b::text[],
                  %(error_classes)b::text[], %(not_befores)b::timestamptz[],
                  %(details)b::jsonb[])
        AS o(id, token, result, error, next_status, delay, value, error_class, not_before,
             detail)
),
finished AS (
    UPDATE pgsched_job_run r
       SET status = o.next_status,
           finished_at = CASE WHEN o.next_status = 'retrying' THEN NULL ELSE clock.now END,
           fire_after = CASE WHEN o.next_status = 'retrying'
                             -- a job's Fail(not_before=...) may ask for later, never sooner
                             THEN greatest(clock.now + make_interval(secs => o.delay),
                                           o.not_before)
                             ELSE r.fire_after END,
           claimed_by = NULL,
           claim_expires_at = NULL,
           -- what a django.tasks task returned (JSON), with its succeeded attempt
           return_value = CASE WHEN o.next_status = 'succeeded'
                               THEN coalesce(o.value::jsonb, r.return_value)
                               ELSE r.return_value END
      FROM outcome o, clock
     WHERE r.id = o.id
       -- from the outcomes' earliest month on (NULL: every month)
       AND r.scheduled_for >= coalesce(%(record_since)s::timestamptz, '-infinity')
       -- only while the lease is ours: a token is set exactly while the run is
       -- 'running' (CHECK pgsched_run_lease_iff_running). Not repeating "status =
       -- 'running'" keeps PostgreSQL's query planner on the primary key: with that
       -- predicate it may read pgsched_run_running_idx whole, which holds an entry
       -- for every run claimed since vacuum last ran (all of them while a long
       -- transaction elsewhere holds vacuum back).
       AND r.claimed_by = o.token
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker, r.status, o.result,
              o.error, o.error_class, o.detail
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error,
            error_class, detail)
    SELECT f.id, f.scheduled_for, f.attempts, f.result, f.started_at, clock.now,
           coalesce(f.worker, ''), f.error, coalesce(f.error_class, ''), f.detail
      FROM finished f, clock
),
claimable AS MATERIALIZED (
    SELECT r.id, r.scheduled_for  -- with its month: the lease's update reads one partition
      FROM pgsched_job_run r
     WHERE r.status IN ('pending', 'retrying')
       AND r.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
       AND r.fire_after <= (SELECT now FROM clock)
       AND (r.claim_expires_at IS NULL OR r.claim_expires_at < (SELECT now FROM clock))
       AND r.attempts < r.max_attempts
       AND r.job = ANY(%(jobs)b::text[])
       -- never a run of a paused tenant, nor of one with a max_running: those are
       -- claimed by id under the tenant's lock (executor_held_lock); the index
       -- pgsched_tenant_held_idx holds only such tenants (usually none)
       AND (r.tenant = '' OR NOT EXISTS (SELECT FROM pgsched_tenant t
                                          WHERE t.key = r.tenant
                                            AND (t.paused OR t.max_running IS NOT NULL)))
       -- a tenant without a record is held too when PGSCHED["TENANT_DEFAULTS"] has a
       -- max_running (%(default_held)s)
       AND (r.tenant = '' OR NOT %(default_held)s::boolean
            OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = r.tenant))
       AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
       -- a run with an overlap policy or a start deadline is never claimed here: its
       -- capability's own step decides when it may start (executor_guarded_pick, then
       -- executor_pass_by_id); the claim reads two columns, no subquery
       AND r.overlap IS NULL AND r.start_by IS NULL
       -- the claim cursor: start after the runs this replica claimed last time
       -- (NULL: from the start); see claiming.ClaimCursor
       AND (r.priority * -1, r.fire_after, r.id)
           >= (coalesce(%(floor_rank)s::integer, -32768),
               coalesce(%(floor_at)s::timestamptz, '-infinity'),
               coalesce(%(floor_id)s::bigint, 0))
     -- highest priority first, then the longest due (pgsched_run_claim_order_idx)
     ORDER BY r.priority * -1, r.fire_after, r.id
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF r SKIP LOCKED
),
claimed AS (
    UPDATE pgsched_job_run r
       SET status = 'running',
           attempts = r.attempts + 1,  -- below max_attempts (see claimable)
           claimed_by = gen_random_uuid(),
           worker = %(worker)s,
           -- the timeout bounded as its CHECK bounds it: a row written before the CHECK
           -- (or with it dropped) never overflows the lease arithmetic
           claim_expires_at = clock.now
               + least(greatest(r.timeout, interval '1 second'), interval '7 days')
                 * %(lease_factor)s,
           started_at = clock.now
      FROM claimable c, clock
     WHERE r.id = c.id
       AND r.scheduled_for = c.scheduled_for
       AND r.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
    -- Every claimed row can be read: the payloads as text (each is decoded and checked
    -- against its bounds on its own in Python, claiming.read_payloads; one that cannot
    -- be is failed, not the pass), and a time or timeout Python cannot hold is named in
    -- "defect" and replaced by one it can (the run is then failed with that error,
    -- fenced on its token).
    RETURNING r.id, r.claimed_by, r.attempts, r.max_attempts,
              least(greatest(r.timeout, interval '1 second'), interval '7 days') AS timeout,
              r.job, r.queue, r.kwargs::text AS kwargs, r.schedule_name,
              CASE WHEN pgsched_time_ok(r.scheduled_for) THEN r.scheduled_for
                   ELSE clock.now END AS scheduled_for,
              r.idempotency_key,
              CASE WHEN pgsched_time_ok(r.fire_after) THEN r.fire_after
                   ELSE clock.now END AS fire_after,
              r.started_at, r.claim_expires_at, r.task_call::text AS task_call, r.priority,
              r.tenant,
              concat_ws('; ',
                  CASE WHEN NOT pgsched_time_ok(r.scheduled_for)
                       THEN 'scheduled_for ' || r.scheduled_for END,
                  CASE WHEN NOT pgsched_time_ok(r.fire_after)
                       THEN 'fire_after ' || r.fire_after END,
                  CASE WHEN NOT pgsched_interval_ok(r.timeout, interval '1 second',
                                                    interval '7 days')
                       THEN 'timeout ' || r.timeout END) AS defect
),
next_due AS (
    -- only when the slots were not all filled: when to look again
    SELECT (SELECT greatest(q.fire_after, '0001-01-01 00:00:00+00'::timestamptz)
              FROM pgsched_job_run q
             WHERE q.status IN ('pending', 'retrying')
               AND q.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
               AND q.attempts < q.max_attempts
               -- never claimable once past its start deadline (the guard ends it):
               -- not worth waking up for
               AND (q.start_by IS NULL OR q.start_by >= (SELECT now FROM clock)
                    OR q.status = 'retrying')
               AND q.job = ANY(%(jobs)b::text[])
               -- nor a paused tenant's; a held tenant's (max_running) only while
               -- it is not yet due: once due it waits for a slot of its tenant, which
               -- a finish frees (this replica's next pass, any other's poll)
               AND (q.tenant = '' OR NOT EXISTS (SELECT FROM pgsched_tenant t
                                                  WHERE t.key = q.tenant
                                                    AND (t.paused
                                                         OR (t.max_running IS NOT NULL
                                                             AND q.fire_after
                                                                 <= (SELECT now FROM clock)))))
               AND (q.tenant = '' OR NOT %(default_held)s::boolean
                    OR q.fire_after > (SELECT now FROM clock)
                    OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = q.tenant))
               AND (%(queues)b::text[] IS NULL OR q.queue = ANY(%(queues)b::text[]))
               AND q.id NOT IN (SELECT id FROM claimable)
             ORDER BY q.fire_after
             LIMIT 1) AS at
     WHERE (SELECT count(*) FROM claimable) < %(limit)s
),
facts AS (
    SELECT (SELECT array_agg(id ORDER BY id) FROM finished) AS recorded_ids,
           (SELECT array_agg(status::text ORDER BY id) FROM finished) AS recorded_statuses,
           (SELECT at FROM next_due) AS next_due,
           clock.now AS db_now,
           -- the horizon for the next pass: pgsched_run_horizon_since(), read here rather
           -- than called (a SECURITY DEFINER function is planned again at every call;
           -- every role may read this table: migrations/sql/grants.sql)
           (SELECT CASE WHEN h.live_since >= '0001-01-01 00:00:00+00' THEN h.live_since END
              FROM pgsched_run_horizon h) AS live_since
      FROM clock
)
SELECT c.id, c.claimed_by, c.attempts, c.max_attempts, c.timeout, c.job, c.queue, c.kwargs,
       c.schedule_name, c.scheduled_for, c.idempotency_key, c.fire_after, c.started_at,
       c.claim_expires_at, c.task_call, c.priority, c.tenant, c.defect,
       f.recorded_ids, f.recorded_statuses, f.next_due, f.db_now, f.live_since,
       -- whether a tenant has a max_running (held_tenants_exist, read here: the pass's
       -- implicit transaction, not one more of its own)
       EXISTS (SELECT FROM pgsched_tenant
                WHERE max_running IS NOT NULL AND NOT paused) AS held_tenants
  FROM clock
  LEFT JOIN (SELECT claimed.*, row_number() OVER () AS n FROM claimed) c ON true
  -- the pass's own facts on its first row only (the others carry NULLs): the recorded
  -- ids and statuses are a pass's worth each, sent once, not once per claimed run
  LEFT JOIN facts f ON c.n IS NULL OR c.n = 1
 ORDER BY c.n;


-- name: guard_decide
-- The guard's decision (engine/guard.py), in its own transaction: the due
-- pending runs that have an overlap policy or a start deadline (all of them are
-- few: pgsched_run_guarded_idx) and will never start, up to a batch, locked (SKIP LOCKED: a run being claimed is left alone; the lock
-- re-checks that it is still pending). The claim (executor_pass) never starts
-- them, so the decision cannot race a claim:
-- * overlap, skip: an earlier run of the schedule started and had not finished
--   when this one fell due (or has not yet);
-- * overlap, buffer_one: two earlier runs of the schedule are unfinished (the
--   one running or next, and the one waiting behind it);
-- * deadline: not started by its start_by.
-- A backfilled run is never skipped for overlap: it waits its turn (it has no
-- start deadline either: ledger/backfill.py).
-- Runs of a schedule are ordered by id: the planner and backfill insert them
-- holding the schedule's row lock, so ids follow commit order per schedule.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
due AS MATERIALIZED (
    SELECT r.id, r.schedule_id, r.fire_after, r.overlap, r.start_by, r.is_backfill
      FROM pgsched_job_run r
     WHERE r.status = 'pending'
       AND (r.overlap IS NOT NULL OR r.start_by IS NOT NULL)
       AND r.fire_after <= (SELECT now FROM clock)
),
decided AS MATERIALIZED (
    SELECT d.id,
           CASE WHEN d.overlap = 'skip' AND NOT d.is_backfill
                 AND (EXISTS (SELECT FROM pgsched_job_run e
                               WHERE e.schedule_id = d.schedule_id AND e.overlap IS NOT NULL
                                 AND e.finished_at IS NULL AND e.started_at IS NOT NULL
                                 AND e.id < d.id)
                      OR EXISTS (SELECT FROM pgsched_job_run e
                                  WHERE e.schedule_id = d.schedule_id AND e.overlap IS NOT NULL
                                    AND e.finished_at > d.fire_after
                                    AND e.started_at IS NOT NULL AND e.id < d.id))
                THEN 'overlap'
                WHEN d.overlap = 'buffer_one' AND NOT d.is_backfill
                 AND (SELECT count(*)
                        FROM (SELECT FROM pgsched_job_run e
                               WHERE e.schedule_id = d.schedule_id AND e.overlap IS NOT NULL
                                 AND e.finished_at IS NULL AND e.id < d.id
                               LIMIT 2) two) = 2
                THEN 'overlap'
                WHEN d.start_by < (SELECT now FROM clock)
                THEN 'deadline'
           END AS reason
      FROM due d
)
-- A one-off run (no schedule: a deadline given another way) is decided too, but has
-- no occurrence to ledger; nor has one whose time, or whose schedule's timetable,
-- Python cannot hold (a row written with the bounds' CHECKs dropped): NULL here.
SELECT r.id, r.schedule_id,
       CASE WHEN pgsched_time_ok(r.scheduled_for) THEN r.scheduled_for END AS scheduled_for,
       d.reason, r.job, r.queue, r.tenant, s.cron,
       CASE WHEN pgsched_interval_ok(s."interval", interval '1 second', interval '366 days')
            THEN s."interval" END AS "interval",
       CASE WHEN pgsched_time_ok(s.anchor) THEN s.anchor END AS anchor,
       s.timezone, s.dst_gap, s.dst_fold,
       (SELECT now FROM clock) AS db_now
  FROM decided d
  JOIN pgsched_job_run r ON r.id = d.id
  LEFT JOIN pgsched_schedule s ON s.id = r.schedule_id
 WHERE d.reason IS NOT NULL
   AND r.status = 'pending'
 ORDER BY r.schedule_id, r.scheduled_for
 LIMIT %(batch)s
   FOR UPDATE OF r SKIP LOCKED;


-- name: guard_apply
-- The guard's writes, in the transaction of guard_decide (whose rows are
-- locked): a run past its deadline ends 'missed' without running; an
-- overlapped one is deleted (it never ran: nothing but its occurrence is
-- lost, and that goes into the ledger). Either way its occurrence joins the
-- ledger, extending a range of the same schedule and reason that ends at the
-- occurrence just before it (as planner_apply does).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
missed AS (
    UPDATE pgsched_job_run r
       SET status = 'missed', finished_at = clock.now,
           note = left('not started by its start deadline ('
                       || to_char(r.start_by AT TIME ZONE 'UTC',
                                  'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ')', 2000)
      FROM clock
     WHERE r.id = ANY(%(missed)b::bigint[]) AND r.status = 'pending'
    RETURNING r.id
),
dropped AS (
    DELETE FROM pgsched_job_run r
     WHERE r.id = ANY(%(dropped)b::bigint[]) AND r.status = 'pending'
    RETURNING r.id
),
span AS (
    SELECT *
      FROM unnest(%(span_schedule_ids)b::bigint[], %(span_first)b::timestamptz[],
                  %(span_last)b::timestamptz[], %(span_count)b::bigint[],
                  %(span_reason)b::text[], %(span_previous)b::timestamptz[])
           WITH ORDINALITY AS k(schedule_id, first, last, count, reason, previous, ord)
),
extended AS (
    UPDATE pgsched_skipped_range r
       SET last = k.last, count = r.count + k.count
      FROM span k
     WHERE r.schedule_id = k.schedule_id AND r.last = k.previous AND r.reason = k.reason
    RETURNING k.ord
),
ledgered AS (
    INSERT INTO pgsched_skipped_range (schedule_id, first, last, count, reason)
    SELECT schedule_id, first, last, count, reason
      FROM span
     WHERE ord NOT IN (SELECT ord FROM extended)
)
SELECT ARRAY(SELECT id FROM missed) AS missed, ARRAY(SELECT id FROM dropped) AS dropped;


-- name: executor_pass_by_id
-- executor_pass claiming the runs %(claim_ids)s that the broker named
-- (PGSCHED["CLAIMS"], django_pgsched/broker/consumer.py) instead of reading the claim
-- index. Written out, not derived: every other part is executor_pass's, word for
-- word (tests/unit/test_claims_transport.py compares them): the fenced recording, the
-- claimable CTE's predicates (status, due, attempts left, jobs, queues, no live lease),
-- the lease. It differs in six places: the overlap and deadline rules are checked
-- (executor_pass leaves such runs to executor_guarded_pick, whose ids come here); the
-- claimable runs come from the ids, looked up by primary key (their status read as
-- text, so that no partial index can serve instead); no claim cursor and no
-- order (a generic plan that kept the ORDER BY read the claim index and filtered the
-- ids: tests/integration/test_plans.py); no next-due probe; and a held tenant's runs
-- (max_running) are claimable when %(held)s says the ids are executor_held_pick's.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
outcome AS (
    SELECT *
      FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(results)b::text[], %(errors)b::text[],
                  %(statuses)b::text[], %(delays)b::float8[], %(values)b::text[],
                  %(error_classes)b::text[], %(not_befores)b::timestamptz[],
                  %(details)b::jsonb[])
        AS o(id, token, result, error, next_status, delay, value, error_class, not_before,
             detail)
),
finished AS (
    UPDATE pgsched_job_run r
       SET status = o.next_status,
           finished_at = CASE WHEN o.next_status = 'retrying' THEN NULL ELSE clock.now END,
           fire_after = CASE WHEN o.next_status = 'retrying'
                             THEN greatest(clock.now + make_interval(secs => o.delay),
                                           o.not_before)
                             ELSE r.fire_after END,
           claimed_by = NULL,
           claim_expires_at = NULL,
           return_value = CASE WHEN o.next_status = 'succeeded'
                               THEN coalesce(o.value::jsonb, r.return_value)
                               ELSE r.return_value END
      FROM outcome o, clock
     WHERE r.id = o.id
       AND r.scheduled_for >= coalesce(%(record_since)s::timestamptz, '-infinity')
       AND r.claimed_by = o.token
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker, r.status, o.result,
              o.error, o.error_class, o.detail
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error,
            error_class, detail)
    SELECT f.id, f.scheduled_for, f.attempts, f.result, f.started_at, clock.now,
           coalesce(f.worker, ''), f.error, coalesce(f.error_class, ''), f.detail
      FROM finished f, clock
),
claimable AS MATERIALIZED (
    SELECT r.id, r.scheduled_for  -- with its month: the lease's update reads one partition
      -- the named runs, each looked up by primary key (a nested loop over the ids): with
      -- "r.id = ANY(ids)" a generic plan also read the claimable index (a BitmapAnd)
      FROM unnest(%(claim_ids)b::bigint[]) AS named(id)
      JOIN pgsched_job_run r ON r.id = named.id
      -- status as text, which no partial index's predicate follows from: a generic plan
      -- made while the month held few due runs probed the claimable index for each id
      -- ("fire_after <= now AND id = named.id": every due entry per id; 27-86 ms a pass
      -- in a 100k burst, bench/fairness.py --statements) instead of the primary key
     WHERE r.status::text || '' IN ('pending', 'retrying')
       AND r.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
       AND r.fire_after <= (SELECT now FROM clock)
       AND (r.claim_expires_at IS NULL OR r.claim_expires_at < (SELECT now FROM clock))
       AND r.attempts < r.max_attempts
       AND r.job = ANY(%(jobs)b::text[])
       -- never a run of a paused tenant, nor of one with a max_running unless
       -- %(held)s: the ids were picked under the tenant's lock (executor_held_pick);
       -- a broker's ids never are
       AND (r.tenant = '' OR NOT EXISTS (SELECT FROM pgsched_tenant t
                                          WHERE t.key = r.tenant
                                            AND (t.paused OR (t.max_running IS NOT NULL
                                                              AND NOT %(held)s::boolean))))
       -- a tenant without a record is held too when PGSCHED["TENANT_DEFAULTS"] has a
       -- max_running (%(default_held)s)
       AND (r.tenant = '' OR NOT %(default_held)s::boolean
            OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = r.tenant) OR %(held)s::boolean)
       AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
       AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock) OR r.status = 'retrying')
       AND (r.overlap IS NULL
            OR (NOT EXISTS (SELECT FROM pgsched_job_run e
                             WHERE e.schedule_id = r.schedule_id AND e.overlap IS NOT NULL
                               AND e.finished_at IS NULL AND e.id < r.id
                               AND e.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity'))
                AND (r.overlap <> 'skip' OR r.is_backfill
                     OR NOT EXISTS (SELECT FROM pgsched_job_run e
                                     WHERE e.schedule_id = r.schedule_id
                                       AND e.overlap IS NOT NULL
                                       AND e.finished_at > r.fire_after
                                       AND e.started_at IS NOT NULL AND e.id < r.id))))
     LIMIT %(limit)s
       FOR NO KEY UPDATE OF r SKIP LOCKED
),
claimed AS (
    UPDATE pgsched_job_run r
       SET status = 'running',
           attempts = r.attempts + 1,  -- below max_attempts (see claimable)
           claimed_by = gen_random_uuid(),
           worker = %(worker)s,
           claim_expires_at = clock.now
               + least(greatest(r.timeout, interval '1 second'), interval '7 days')
                 * %(lease_factor)s,
           started_at = clock.now
      FROM claimable c, clock
     WHERE r.id = c.id
       AND r.scheduled_for = c.scheduled_for
       AND r.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
    RETURNING r.id, r.claimed_by, r.attempts, r.max_attempts,
              least(greatest(r.timeout, interval '1 second'), interval '7 days') AS timeout,
              r.job, r.queue, r.kwargs::text AS kwargs, r.schedule_name,
              CASE WHEN pgsched_time_ok(r.scheduled_for) THEN r.scheduled_for
                   ELSE clock.now END AS scheduled_for,
              r.idempotency_key,
              CASE WHEN pgsched_time_ok(r.fire_after) THEN r.fire_after
                   ELSE clock.now END AS fire_after,
              r.started_at, r.claim_expires_at, r.task_call::text AS task_call, r.priority,
              r.tenant,
              concat_ws('; ',
                  CASE WHEN NOT pgsched_time_ok(r.scheduled_for)
                       THEN 'scheduled_for ' || r.scheduled_for END,
                  CASE WHEN NOT pgsched_time_ok(r.fire_after)
                       THEN 'fire_after ' || r.fire_after END,
                  CASE WHEN NOT pgsched_interval_ok(r.timeout, interval '1 second',
                                                    interval '7 days')
                       THEN 'timeout ' || r.timeout END) AS defect
),
next_due AS (
    SELECT (SELECT greatest(q.fire_after, '0001-01-01 00:00:00+00'::timestamptz)
              FROM pgsched_job_run q
             WHERE q.status IN ('pending', 'retrying')
               AND q.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
               AND q.attempts < q.max_attempts
               AND (q.start_by IS NULL OR q.start_by >= (SELECT now FROM clock)
                    OR q.status = 'retrying')
               AND q.job = ANY(%(jobs)b::text[])
               -- nor a paused tenant's; a held tenant's (max_running) only while
               -- it is not yet due: once due it waits for a slot of its tenant, which
               -- a finish frees (this replica's next pass, any other's poll)
               AND (q.tenant = '' OR NOT EXISTS (SELECT FROM pgsched_tenant t
                                                  WHERE t.key = q.tenant
                                                    AND (t.paused
                                                         OR (t.max_running IS NOT NULL
                                                             AND q.fire_after
                                                                 <= (SELECT now FROM clock)))))
               AND (q.tenant = '' OR NOT %(default_held)s::boolean
                    OR q.fire_after > (SELECT now FROM clock)
                    OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = q.tenant))
               AND (%(queues)b::text[] IS NULL OR q.queue = ANY(%(queues)b::text[]))
               AND q.id NOT IN (SELECT id FROM claimable)
             ORDER BY q.fire_after
             LIMIT 1) AS at
     WHERE false  -- no next-due probe: the broker says when there is work
),
facts AS (
    SELECT (SELECT array_agg(id ORDER BY id) FROM finished) AS recorded_ids,
           (SELECT array_agg(status::text ORDER BY id) FROM finished) AS recorded_statuses,
           (SELECT at FROM next_due) AS next_due,
           clock.now AS db_now,
           (SELECT CASE WHEN h.live_since >= '0001-01-01 00:00:00+00' THEN h.live_since END
              FROM pgsched_run_horizon h) AS live_since
      FROM clock
)
SELECT c.id, c.claimed_by, c.attempts, c.max_attempts, c.timeout, c.job, c.queue, c.kwargs,
       c.schedule_name, c.scheduled_for, c.idempotency_key, c.fire_after, c.started_at,
       c.claim_expires_at, c.task_call, c.priority, c.tenant, c.defect,
       f.recorded_ids, f.recorded_statuses, f.next_due, f.db_now, f.live_since,
       EXISTS (SELECT FROM pgsched_tenant
                WHERE max_running IS NOT NULL AND NOT paused) AS held_tenants
  FROM clock
  LEFT JOIN (SELECT claimed.*, row_number() OVER () AS n FROM claimed) c ON true
  LEFT JOIN facts f ON c.n IS NULL OR c.n = 1  -- on the first row only, as executor_pass
 ORDER BY c.n


-- name: executor_guarded_pick
-- The runs executor_pass leaves out: those with an overlap policy or a start deadline,
-- due and claimable under their rules now, in the claim's order, at most %(limit)s
-- (pgsched_run_guarded_idx holds only such runs: usually none). executor_pass_by_id
-- then claims them, checking every rule again under the row lock (SKIP LOCKED: a run
-- another replica picked at the same time is claimed by one of them). Rows: one per
-- picked run, or a single row with a NULL id when none was; each also says how many
-- such runs are due and pending, picked or not (at most %(limit)s + 1): more than were
-- picked, and some are held back, which the guard may have to end (engine/guard.py).
-- %(ceil_rank)s, %(ceil_at)s, %(ceil_id)s (NULL: no bound): only runs at or before
-- this place in the claim's order, where the usual claim's last full pass ended. While
-- every pass fills every slot, the guarded runs it passed over are claimed, and none
-- ahead of the runs it will claim next: the claim's order holds across both claims.
-- - a start deadline: never started after it (the guard marks the run missed);
-- - an overlap policy (skip, buffer_one): the runs of a schedule start one at a time,
--   in the order they were created (pgsched_run_exclusive_idx; see guard_decide);
--   skip also never starts a run that an earlier started one overlapped when it fell
--   due (a backfilled run waits its turn instead).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
picked AS (
SELECT r.id, r.priority * -1 AS rank, r.fire_after
  FROM pgsched_job_run r
 WHERE r.status IN ('pending', 'retrying')
   AND (r.overlap IS NOT NULL OR r.start_by IS NOT NULL)
   AND r.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity')
   AND r.fire_after <= (SELECT now FROM clock)
   AND (r.claim_expires_at IS NULL OR r.claim_expires_at < (SELECT now FROM clock))
   AND r.attempts < r.max_attempts
   AND r.job = ANY(%(jobs)b::text[])
   AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
   -- a paused or held tenant's runs are the held claim's (executor_held_pick)
   AND (r.tenant = '' OR NOT EXISTS (SELECT FROM pgsched_tenant t
                                      WHERE t.key = r.tenant
                                        AND (t.paused OR t.max_running IS NOT NULL)))
   AND (r.tenant = '' OR NOT %(default_held)s::boolean
        OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = r.tenant))
   AND (r.priority * -1, r.fire_after, r.id)
       <= (coalesce(%(ceil_rank)s::integer, 32767),
           coalesce(%(ceil_at)s::timestamptz, 'infinity'),
           coalesce(%(ceil_id)s::bigint, 9223372036854775807))
   AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock) OR r.status = 'retrying')
   AND (r.overlap IS NULL
        OR (NOT EXISTS (SELECT FROM pgsched_job_run e
                         WHERE e.schedule_id = r.schedule_id AND e.overlap IS NOT NULL
                           AND e.finished_at IS NULL AND e.id < r.id
                           AND e.scheduled_for >= coalesce(%(live_since)s::timestamptz, '-infinity'))
            AND (r.overlap <> 'skip' OR r.is_backfill
                 OR NOT EXISTS (SELECT FROM pgsched_job_run e
                                 WHERE e.schedule_id = r.schedule_id
                                   AND e.overlap IS NOT NULL
                                   AND e.finished_at > r.fire_after
                                   AND e.started_at IS NOT NULL AND e.id < r.id))))
 ORDER BY r.priority * -1, r.fire_after, r.id
 LIMIT %(limit)s
),
due AS (
    SELECT count(*) AS waiting
      FROM (SELECT
              FROM pgsched_job_run r
             WHERE r.status = 'pending'
               AND (r.overlap IS NOT NULL OR r.start_by IS NOT NULL)
               AND r.fire_after <= (SELECT now FROM clock)
               AND r.job = ANY(%(jobs)b::text[])
               AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
             LIMIT %(limit)s + 1) x
)
SELECT p.id, d.waiting
  FROM due d
  LEFT JOIN picked p ON true
 ORDER BY p.rank, p.fire_after, p.id;


-- name: held_tenants_exist
-- Whether any tenant has a max_running (pgsched_tenant_held_idx): the executor reads
-- it every few seconds to decide whether its passes run the held claim.
SELECT EXISTS (SELECT FROM pgsched_tenant
                WHERE max_running IS NOT NULL AND NOT paused) AS held;


-- name: executor_held_lock
-- The tenants with a max_running ("held" tenants) that have a run this replica
-- could claim now, each locked for the rest of the transaction (advisory lock class
-- 1885826, by the tenant's key), in key order. Under the lock, executor_held_pick
-- counts the tenant's running runs and picks its next ones, and executor_pass_by_id
-- claims them: one replica at a time per tenant, so a tenant never has more than
-- max_running runs with a live lease. Run inside a transaction.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
-- with PGSCHED["TENANT_DEFAULTS"]["max_running"] (%(default_max_running)s), also every
-- tenant without a record: the distinct tenants of unfinished runs, one index probe
-- each (pgsched_run_tenant_due_idx)
unrecorded (tenant) AS (
    -- (ordered as pgsched_run_tenant_due_idx is, which only it can give without a sort)
    SELECT (SELECT r.tenant
              FROM pgsched_job_run r
             WHERE r.status IN ('pending', 'retrying') AND r.tenant <> ''
             ORDER BY r.tenant, r.priority * -1
             LIMIT 1)
     WHERE %(default_max_running)s::integer IS NOT NULL
    UNION ALL
    SELECT (SELECT r.tenant
              FROM pgsched_job_run r
             WHERE r.status IN ('pending', 'retrying') AND r.tenant <> ''
               AND r.tenant > u.tenant
             ORDER BY r.tenant, r.priority * -1
             LIMIT 1)
      FROM unrecorded u
     WHERE u.tenant IS NOT NULL
),
held AS (
    SELECT t.key, t.max_running
      FROM pgsched_tenant t
     WHERE t.max_running IS NOT NULL AND NOT t.paused
    UNION ALL
    SELECT u.tenant, %(default_max_running)s::integer
      FROM unrecorded u
     WHERE u.tenant IS NOT NULL
       AND NOT EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = u.tenant)
),
due AS MATERIALIZED (
    SELECT h.key, h.max_running
      FROM held h
     -- a due run of the tenant, in pgsched_run_tenant_due_idx's order (which the history's
     -- tenant index cannot give: it would walk the tenant's finished runs); a scalar
     -- subquery, not EXISTS, which PostgreSQL plans without its ORDER BY
     WHERE (SELECT true
              FROM pgsched_job_run r
             WHERE r.tenant >= h.key AND r.tenant <= h.key  -- see executor_fair_pick
               AND r.tenant <> ''  -- the partial index's
               AND r.status IN ('pending', 'retrying')
               AND r.fire_after <= (SELECT now FROM clock)
               AND r.job = ANY(%(jobs)b::text[])
               AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
             ORDER BY r.tenant, r.priority * -1
             LIMIT 1)
     ORDER BY h.key
     LIMIT 1000
)
-- the lock is taken after the sort (a volatile function of the output), in key order
SELECT key, max_running, pg_advisory_xact_lock(1885826, hashtext(key))::text AS locked
  FROM due
 ORDER BY key;


-- name: executor_held_pick
-- Under the locks of executor_held_lock (a later statement: its snapshot sees every
-- claim committed before the lock was granted): for each held tenant, how many of its
-- runs hold a live lease, and up to max_running less that many of its claimable runs,
-- in the claim's order. At most %(limit)s ids, shared round-robin among the tenants.
-- executor_pass_by_id then claims them (held = true), checking them again.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
room AS (
    SELECT h.key,
           h.max_running - (SELECT count(*)
                              FROM pgsched_job_run r
                             WHERE r.tenant >= h.key AND r.tenant <= h.key  -- see executor_fair_pick
                               AND r.tenant <> ''
                               AND r.status = 'running'
                               AND r.claim_expires_at >= (SELECT now FROM clock)) AS free
      FROM unnest(%(keys)b::text[], %(maxes)b::integer[]) AS h(key, max_running)
),
picked AS (
    SELECT p.id, p.turn
      FROM room,
           -- (the tenant leads the order: pgsched_run_tenant_due_idx's, which no other
           -- index gives for a range of tenants)
           LATERAL (SELECT r.id,
                           row_number() OVER (ORDER BY r.tenant, r.priority * -1, r.fire_after,
                                                       r.id) AS turn
                      FROM pgsched_job_run r
                     WHERE r.tenant >= room.key AND r.tenant <= room.key  -- see executor_fair_pick
                       AND r.tenant <> ''  -- the partial index's
                       AND r.status IN ('pending', 'retrying')
                       -- no bound on scheduled_for (the horizon of executor_pass): with
                       -- one, PostgreSQL 18 reads the tenant's whole history by
                       -- pgsched_run_tenant_idx; a month without an unfinished run costs
                       -- a probe of an empty partial index
                       AND r.fire_after <= (SELECT now FROM clock)
                       AND (r.claim_expires_at IS NULL
                            OR r.claim_expires_at < (SELECT now FROM clock))
                       AND r.attempts < r.max_attempts
                       AND r.job = ANY(%(jobs)b::text[])
                       AND (%(queues)b::text[] IS NULL OR r.queue = ANY(%(queues)b::text[]))
                       AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock)
                            OR r.status = 'retrying')
                       -- an overlap policy's earlier unfinished run (executor_pass)
                       AND (r.overlap IS NULL
                            OR NOT EXISTS (SELECT FROM pgsched_job_run e
                                            WHERE e.schedule_id = r.schedule_id
                                              AND e.overlap IS NOT NULL
                                              AND e.finished_at IS NULL AND e.id < r.id))
                     ORDER BY r.tenant, r.priority * -1, r.fire_after, r.id
                     LIMIT greatest(room.free, 0)) p
)
SELECT id FROM picked ORDER BY turn, id LIMIT %(limit)s;


-- name: tenanted_runs_exist
-- Whether any unfinished run has a tenant (pgsched_run_tenant_due_idx, every month:
-- no scheduled_for bound, which would let the history's tenant index serve): the executor
-- reads it every few seconds to decide whether a contended pass shares its claim.
SELECT EXISTS (SELECT FROM pgsched_job_run r
                WHERE r.status IN ('pending', 'retrying') AND r.tenant <> '')
       AS tenanted;


-- name: executor_fair_pick
-- The fair claim, when the last pass filled every idle slot (demand beyond supply):
-- the claim is shared by weight among the tenants with due runs, so one tenant's
-- burst never holds back another's runs for the burst's length.
-- 1. up to %(tenants)s tenants with unfinished runs, after %(after)s (the last one the
--    previous fair pass visited: a rotation), one probe each of pgsched_run_tenant_due_idx
--    (in every month: a scheduled_for bound would let the history's tenant index serve,
--    walking a tenant's finished runs);
-- 2. of those, the ones neither paused nor held (max_running: the held claim's), each
--    with its weight (its record's, else %(default_weight)s), and how many of its runs
--    are due (counted up to %(limit)s);
-- 3. each one's share of %(limit)s by weight, at most what it has due; what a tenant
--    leaves goes, by weight again, to those with more due;
--    (a tenant's runs are read as the range "tenant >= t AND tenant <= t", not
--    "tenant = t": with the equality, PostgreSQL drops the tenant from the order it
--    needs, so pgsched_run_claim_order_idx can give it too, and a generic plan made on
--    statistics of one tenant alone read the other's burst in that index, filtering
--    on the tenant; the range is estimated as narrow whatever the statistics, and
--    only pgsched_run_tenant_due_idx gives its order without a sort:
--    tests/integration/test_plans.py)
-- 4. each one's due claimable runs in the claim's order, as many as its share, locked
--    FOR NO KEY UPDATE SKIP LOCKED (so replicas take different runs, as in the usual
--    claim); the turns divided by the weight interleave the tenants; at most %(limit)s.
-- executor_pass_by_id claims them in the same transaction. Runs without a tenant are
-- not shared: the usual claim, after this one, takes them with the slots left. Each
-- row also says how many tenants had more due than their share (%(limit)s counted at
-- most): with two or more, the executor runs the fair claim again at its next pass.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
visited (tenant, n) AS (
    -- (ordered as pgsched_run_tenant_due_idx is, which only it can give without a sort)
    SELECT (SELECT r.tenant
              FROM pgsched_job_run r
             WHERE r.status IN ('pending', 'retrying') AND r.tenant <> ''
               AND r.tenant > %(after)s::text
             ORDER BY r.tenant, r.priority * -1
             LIMIT 1),
           1
    UNION ALL
    SELECT (SELECT r.tenant
              FROM pgsched_job_run r
             WHERE r.status IN ('pending', 'retrying') AND r.tenant <> ''
               AND r.tenant > v.tenant
             ORDER BY r.tenant, r.priority * -1
             LIMIT 1),
           v.n + 1
      FROM visited v
     WHERE v.tenant IS NOT NULL AND v.n < %(tenants)s
),
contenders AS MATERIALIZED (
    SELECT v.tenant, coalesce(t.weight, %(default_weight)s::integer) AS weight
      FROM visited v
      LEFT JOIN pgsched_tenant t ON t.key = v.tenant
     WHERE v.tenant IS NOT NULL
       AND NOT coalesce(t.paused OR t.max_running IS NOT NULL, %(default_held)s::boolean)
),
demand AS MATERIALIZED (
    SELECT c.tenant, c.weight, d.due
      FROM contenders c,
           LATERAL (SELECT count(*) AS due
                      FROM (SELECT
                              FROM pgsched_job_run r
                             WHERE r.tenant >= c.tenant AND r.tenant <= c.tenant  -- see executor_fair_pick
                               AND r.tenant <> ''  -- the partial index's
                               AND r.status IN ('pending', 'retrying')
                               AND r.fire_after <= (SELECT now FROM clock)
                               AND (r.claim_expires_at IS NULL
                                    OR r.claim_expires_at < (SELECT now FROM clock))
                               AND r.attempts < r.max_attempts
                               AND r.job = ANY(%(jobs)b::text[])
                               AND (%(queues)b::text[] IS NULL
                                    OR r.queue = ANY(%(queues)b::text[]))
                             ORDER BY r.tenant, r.priority * -1
                             LIMIT %(limit)s) x) d
     WHERE d.due > 0
),
shares AS (
    SELECT d.tenant, d.weight, d.due,
           least(d.due, ceil(%(limit)s::float8 * d.weight / sum(d.weight) OVER ())::integer)
               AS first
      FROM demand d
),
allotted AS (
    SELECT s.tenant, s.weight, s.due,
           s.first + CASE WHEN s.due > s.first
                          THEN least(s.due - s.first,
                                     ceil(greatest(%(limit)s - sum(s.first) OVER (), 0)::float8
                                          * s.weight
                                          / sum(CASE WHEN s.due > s.first THEN s.weight END)
                                                OVER ())::integer)
                          ELSE 0 END AS n
      FROM shares s
),
picked AS (
    SELECT p.id, p.turn::float8 / a.weight AS share
      FROM allotted a,
           LATERAL (SELECT x.id, row_number() OVER (ORDER BY x.rank, x.fire_after, x.id) AS turn
                      FROM (SELECT r.id, r.priority * -1 AS rank, r.fire_after
                              FROM pgsched_job_run r
                             WHERE r.tenant >= a.tenant AND r.tenant <= a.tenant  -- see executor_fair_pick
                               AND r.tenant <> ''  -- the partial index's
                               AND r.status IN ('pending', 'retrying')
                               -- no horizon: see executor_held_pick
                               AND r.fire_after <= (SELECT now FROM clock)
                               AND (r.claim_expires_at IS NULL
                                    OR r.claim_expires_at < (SELECT now FROM clock))
                               AND r.attempts < r.max_attempts
                               AND r.job = ANY(%(jobs)b::text[])
                               AND (%(queues)b::text[] IS NULL
                                    OR r.queue = ANY(%(queues)b::text[]))
                               AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock)
                                    OR r.status = 'retrying')
                               -- an overlap policy's earlier unfinished run (executor_pass)
                               AND (r.overlap IS NULL
                                    OR NOT EXISTS (SELECT FROM pgsched_job_run e
                                                    WHERE e.schedule_id = r.schedule_id
                                                      AND e.overlap IS NOT NULL
                                                      AND e.finished_at IS NULL
                                                      AND e.id < r.id))
                             ORDER BY r.tenant, r.priority * -1, r.fire_after, r.id
                             LIMIT a.n
                               FOR NO KEY UPDATE OF r SKIP LOCKED) x) p
),
ranked AS (
    SELECT p.id, row_number() OVER (ORDER BY p.share, p.id) AS k FROM picked p
)
SELECT ranked.id,
       (SELECT max(tenant) FROM visited) AS last_visited,
       (SELECT count(tenant) FROM visited) AS visited,
       (SELECT count(*) FROM allotted a WHERE a.due > a.n) AS starved
  FROM ranked
 WHERE ranked.k <= %(limit)s
 ORDER BY ranked.k;


-- name: executor_defer
-- A job's Defer (django_pgsched.outcomes), fenced on the token like every write
-- on a leased run. An attempt that did something ('attempted': a request went
-- out and the server said "later") is recorded as 'deferred' and does not use up
-- a retry: max_attempts grows by one, up to the ceiling of %(max_attempts)s attempt
-- rows, where the run fails instead (so deferrals are bounded). One that did
-- nothing (a circuit breaker held it back) gives its attempt back and leaves no
-- attempt row, like a release; its reason goes on the run's note. The run waits
-- until the job's time, at most %(max_delay)s ahead.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
d AS (
    SELECT *
      FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(attempted)b::bool[],
                  %(untils)b::timestamptz[], %(delays)b::float8[], %(reasons)b::text[],
                  %(details)b::jsonb[])
        AS d(id, token, attempted, until, delay, reason, detail)
),
deferred AS (
    UPDATE pgsched_job_run r
       SET status = CASE WHEN d.attempted AND r.attempts >= %(max_attempts)s THEN 'failed'
                         WHEN NOT d.attempted AND r.attempts <= 1 THEN 'pending'
                         ELSE 'retrying' END,
           finished_at = CASE WHEN d.attempted AND r.attempts >= %(max_attempts)s
                              THEN clock.now END,
           fire_after = least(coalesce(d.until, clock.now + make_interval(secs => d.delay)),
                              clock.now + %(max_delay)s),
           attempts = CASE WHEN d.attempted THEN r.attempts ELSE r.attempts - 1 END,
           max_attempts = CASE WHEN d.attempted THEN least(r.max_attempts + 1, %(max_attempts)s)
                               ELSE r.max_attempts END,
           claimed_by = NULL,
           claim_expires_at = NULL,
           started_at = CASE WHEN d.attempted THEN r.started_at END,
           worker = CASE WHEN d.attempted THEN r.worker END,
           note = CASE WHEN d.attempted THEN r.note ELSE left(d.reason, 2000) END
      FROM d, clock
     WHERE r.id = d.id
       AND r.claimed_by = d.token  -- implies 'running'; see executor_pass
    RETURNING r.id, r.scheduled_for, r.status, r.attempts, r.started_at, r.worker, d.attempted,
              d.reason, d.detail
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error,
            detail)
    SELECT x.id, x.scheduled_for, x.attempts, 'deferred', x.started_at, clock.now, coalesce(x.worker, ''),
           x.reason, x.detail
      FROM deferred x, clock
     WHERE x.attempted
)
SELECT id, status FROM deferred;


-- name: executor_check
-- A job re-asserts its lease (RunContext.ensure_lease) when this replica still
-- trusts it for as long as the job needs: is the run still ours, under this
-- token? A read, fenced like a write (a reaped, cancelled or re-claimed run has
-- another token, or none). When the trust is too short, executor_renew instead.
SELECT r.id
  FROM pgsched_job_run r
  JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS l(id, token) ON r.id = l.id
 WHERE r.claimed_by = l.token;


-- name: executor_renew
-- Lease rule 2: extend the leases still ours; a missing id means the lease is lost.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
)
UPDATE pgsched_job_run r
   SET claim_expires_at = clock.now
           + least(greatest(r.timeout, interval '1 second'), interval '7 days') * %(lease_factor)s
  FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS l(id, token), clock
 WHERE r.id = l.id
   AND r.claimed_by = l.token  -- implies 'running'; see executor_pass
RETURNING r.id, r.claim_expires_at;


-- name: executor_fail_minimal
-- The fallback when the full completion write failed: never leave the run
-- 'running' (the reap -> claim -> redeliver cycle would never end).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
)
UPDATE pgsched_job_run r
   SET status = CASE WHEN r.attempts >= r.max_attempts OR %(delay)s::float8 IS NULL
                     THEN 'failed' ELSE 'retrying' END,
       finished_at = CASE WHEN r.attempts >= r.max_attempts OR %(delay)s::float8 IS NULL
                          THEN clock.now END,
       fire_after = clock.now + make_interval(secs => coalesce(%(delay)s::float8, 0)),
       claimed_by = NULL,
       claim_expires_at = NULL,
       note = %(note)s
  FROM clock
 WHERE r.id = %(id)s
   AND r.claimed_by = %(token)s
   AND r.status = 'running'
RETURNING r.id, r.status;


-- name: executor_release
-- Give back claimed-but-unstarted runs without consuming an attempt (shutdown).
UPDATE pgsched_job_run r
   SET status = CASE WHEN r.attempts <= 1 THEN 'pending' ELSE 'retrying' END,
       attempts = r.attempts - 1,
       claimed_by = NULL,
       claim_expires_at = NULL,
       started_at = NULL,
       worker = NULL
  FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS l(id, token)
 WHERE r.id = l.id
   AND r.claimed_by = l.token  -- implies 'running'; see executor_pass
RETURNING r.id;


-- name: reaper_candidates
-- Step 1 of expired-lease recovery: a plain read of what looks expired.
SELECT id, claimed_by, attempts
  FROM pgsched_job_run
 WHERE status = 'running'
   AND claim_expires_at < coalesce(%(now)s::timestamptz, clock_timestamp())
 ORDER BY claim_expires_at
 LIMIT %(batch)s;


-- name: reaper_reap
-- Step 2: re-check each row as it is now (status, token, expiry) under a
-- SKIP LOCKED lock, so a run that finished or was re-claimed since step 1 is
-- left alone; write the 'lost' attempt in the same statement. The attempt
-- ends when its lease expired (from then on the worker held nothing: it had
-- abandoned the run by its own clock), not when the reaper came by.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
),
expired AS MATERIALIZED (
    SELECT r.id, l.delay, r.claim_expires_at AS expired_at
      FROM pgsched_job_run r
      JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(delays)b::float8[]) AS l(id, token, delay)
        ON r.id = l.id, clock
     WHERE r.status = 'running'
       AND r.claimed_by = l.token
       AND r.claim_expires_at < clock.now
       FOR NO KEY UPDATE OF r SKIP LOCKED
),
reaped AS (
    UPDATE pgsched_job_run r
       SET status = CASE WHEN r.attempts >= r.max_attempts THEN 'failed' ELSE 'retrying' END,
           finished_at = CASE WHEN r.attempts >= r.max_attempts THEN clock.now END,
           fire_after = clock.now + make_interval(secs => e.delay),
           claimed_by = NULL,
           claim_expires_at = NULL
      FROM expired e, clock
     WHERE r.id = e.id
    RETURNING r.id, r.scheduled_for, r.attempts, r.started_at, r.worker, r.status, r.job, r.queue,
              r.tenant
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error)
    SELECT r.id, r.scheduled_for, r.attempts, 'lost', r.started_at, greatest(e.expired_at, r.started_at),
           coalesce(r.worker, ''),
           'lease expired: the worker stopped renewing it (crashed, frozen or cut off)'
      FROM reaped r
      JOIN expired e ON e.id = r.id
        ON CONFLICT DO NOTHING
)
SELECT id, status, job, queue, tenant FROM reaped;


-- name: retention_delete_changes
-- The audit trail's retention, like the runs': one bounded batch of schedule
-- changes recorded before the cutoff (pgsched_change_at_idx).
WITH doomed AS MATERIALIZED (
    SELECT id
      FROM pgsched_schedule_change
     WHERE at < %(cutoff)s
     ORDER BY at, id
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM pgsched_schedule_change c
 USING doomed d
 WHERE c.id = d.id;


-- name: retention_delete_ranges
-- The ledger's retention, like the runs': one bounded batch of ranges whose
-- last occurrence is before the cutoff (pgsched_skipped_last_idx).
WITH doomed AS MATERIALIZED (
    SELECT id
      FROM pgsched_skipped_range
     WHERE last < %(cutoff)s
     ORDER BY last
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM pgsched_skipped_range r
 USING doomed d
 WHERE r.id = d.id;


-- name: cancel_runs
-- An operator's cancel (api.cancel_runs) of runs that have not finished, given
-- as (id, lease token seen). A pending or retrying run is cancelled if it still
-- is; a running one only while it still carries the lease token that was read
-- (FOR NO KEY UPDATE re-checks the condition on the row's latest version), and
-- its in-flight attempt is recorded as cancelled. The executor's next renewal
-- no longer finds its token, so it abandons the job, and its outcome write
-- (fenced on the token too) changes nothing.
WITH target AS MATERIALIZED (
    SELECT r.id, r.status AS was
      FROM pgsched_job_run r
      JOIN unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) AS t(id, token) ON t.id = r.id
     WHERE r.status IN ('pending', 'retrying')
        OR (r.status = 'running' AND r.claimed_by = t.token)
       FOR NO KEY UPDATE OF r
),
cancelled AS (
    UPDATE pgsched_job_run r
       SET status = 'cancelled',
           finished_at = clock_timestamp(),
           claimed_by = NULL,
           claim_expires_at = NULL,
           note = %(note)s
      FROM target t
     WHERE r.id = t.id
    RETURNING r.id, r.scheduled_for, t.was, r.attempts, r.started_at, r.worker, r.job, r.queue,
              r.tenant
),
recorded AS (
    INSERT INTO pgsched_attempt
           (job_run_id, run_scheduled_for, number, status, started_at, finished_at, worker, error)
    SELECT id, scheduled_for, attempts, 'cancelled', started_at, clock_timestamp(), coalesce(worker, ''), %(note)s
      FROM cancelled
     WHERE was = 'running' AND attempts >= 1
        ON CONFLICT DO NOTHING
)
SELECT id, was, job, queue, attempts, tenant FROM cancelled ORDER BY id;


-- name: task_enqueue
-- django.tasks' enqueue (django_pgsched.tasks.PgschedBackend): one run, in the caller's
-- transaction. No NOTIFY here: a transaction that notifies holds PostgreSQL's notify lock
-- through its commit's WAL flush, so concurrent enqueues would commit one at a time; the
-- backend sends wake_executors after the commit instead (django_pgsched.tasks.wakeup).
-- The call carries the enqueue time, so a claim knows it without reading the run again.
WITH clock AS (
    SELECT statement_timestamp() AS now
),
inserted AS (
    INSERT INTO pgsched_job_run
           (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue,
            status, fire_after, attempts, max_attempts, timeout, note, created_at, priority,
            task_call)
    SELECT NULL, NULL, date_trunc('second', coalesce(%(run_after)s::timestamptz, clock.now)),
           'pgsched:task:' || gen_random_uuid(), %(job)s, %(kwargs)s::jsonb, %(queue)s,
           'pending', coalesce(%(run_after)s::timestamptz, clock.now), 0, %(max_attempts)s,
           %(timeout)s, '', clock.now, %(priority)s,
           %(call)s::jsonb || jsonb_build_object('enqueued_at', clock.now)
      FROM clock
    RETURNING id, created_at
)
SELECT id, created_at FROM inserted;


-- name: wake_executors
SELECT pg_notify('pgsched_wait', %(payload)s) AS notified;


-- name: database_now
SELECT statement_timestamp() AS now;


-- name: ensure_months
-- Before inserting runs: the months of these times that have no partition get one,
-- in this transaction (django_pgsched.partitions.months). A catalog lookup per month
-- when they exist; sent only for months this process has not seen attached.
SELECT pgsched_ensure_months(%(times)b::timestamptz[]) AS created;


-- name: stranded_held
-- A fragment (engine/stranded.py fills it in and puts it in a WITH; so does the
-- backlog gauge, ops/metrics.py): the live registrations, as the CTE held. Each
-- replica's executor session holds a shared advisory lock per job it registers,
-- or per (job, queue) it serves; {job_key} and {queue_key} are those locks'
-- classes (stranded.JOB_KEY, stranded.QUEUE_KEY).
held AS (
    SELECT l.classid::bigint AS ns, l.objid AS key
      FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.classid IN ({job_key}::oid, {queue_key}::oid)
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
)


-- name: stranded_runnable
-- A fragment, after stranded_held: some live replica could run the run r (its job
-- registered, or its job in its queue). {job_key} and {queue_key} as above.
EXISTS (SELECT 1 FROM held h
         WHERE (h.ns = {job_key} AND h.key = hashtext(r.job)::oid)
            OR (h.ns = {queue_key} AND h.key = hashtext(r.job || chr(31) || r.queue)::oid))


-- name: stranded_runs
-- The stranded runs by (job, queue): pending, never started, due for longer than the
-- grace (in seconds), and runnable by no live replica; none while no replica
-- registers anything at all. {held} and {runnable}: the two fragments above.
/* stranded runs */
WITH {held},
clock AS (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now)
SELECT r.job, r.queue, count(*), count(DISTINCT r.schedule_id)
  FROM pgsched_job_run r, clock
 WHERE r.status = 'pending' AND r.attempts = 0
   AND r.fire_after < clock.now - make_interval(secs => %(grace)s)
   AND EXISTS (SELECT 1 FROM held)
   AND NOT {runnable}
 GROUP BY r.job, r.queue
 ORDER BY r.job, r.queue;


-- name: stranded_coalesce
-- A (job, queue) seen stranded for the whole grace: each schedule keeps its newest
-- stranded run, the older ones are cancelled with a note naming the run kept.
WITH stranded AS (
    SELECT r.id, r.schedule_id,
           first_value(r.id) OVER (PARTITION BY r.schedule_id
                                   ORDER BY r.scheduled_for DESC, r.id DESC) AS kept
      FROM pgsched_job_run r
     WHERE r.job = %(job)s AND r.queue = %(queue)s AND r.schedule_id IS NOT NULL
       AND r.status = 'pending' AND r.attempts = 0
       AND r.fire_after < coalesce(%(now)s::timestamptz, statement_timestamp())
                          - make_interval(secs => %(grace)s)
)
UPDATE pgsched_job_run r
   SET status = 'cancelled', finished_at = clock_timestamp(),
       note = 'stranded: no live replica runs ' || r.job || ' in queue ' || r.queue
              || '; kept run ' || s.kept
  FROM stranded s
 WHERE r.id = s.id AND s.id <> s.kept
   AND r.status = 'pending' AND r.attempts = 0;
