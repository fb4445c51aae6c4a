-- The ledger's SQL (what became of each occurrence: the timeline, backfills, stalls),
-- one named block per statement, read by name (django_pgsched.sqlfiles).


-- name: timeline_state
-- timeline.py: the schedule's state, and the database's time.
SELECT status, next_fire_at, unplanned_from, unplanned_reason, statement_timestamp()
  FROM pgsched_schedule WHERE id = %s;


-- name: timeline_runs
-- timeline.py: the runs of these occurrences (the unique occurrence index).
SELECT scheduled_for, id, status, is_backfill FROM pgsched_job_run
 WHERE schedule_id = %s AND scheduled_for = ANY(%s);


-- name: timeline_ranges
-- timeline.py: the ledger ranges that meet [first, last] of the occurrences read (a
-- time that never existed, dst_gap, is no occurrence).
SELECT first, last, count, reason FROM pgsched_skipped_range
 WHERE schedule_id = %s AND last >= %s AND first <= %s AND reason <> 'dst_gap'
 ORDER BY first;


-- name: backfill_unplanned
-- backfill.py: where a stopped schedule stopped planning, and the database's time.
SELECT unplanned_from, statement_timestamp() FROM pgsched_schedule WHERE id = %(id)s;


-- name: backfill_existing
-- backfill.py: the occurrences of [start, end) that already have a run.
SELECT scheduled_for FROM pgsched_job_run
 WHERE schedule_id = %(id)s AND scheduled_for >= %(start)s AND scheduled_for < %(end)s;


-- name: backfill_existing_count
-- backfill.py: how many those are.
SELECT count(*) FROM pgsched_job_run
 WHERE schedule_id = %(id)s AND scheduled_for >= %(start)s AND scheduled_for < %(end)s;


-- name: backfill_ensure_months
-- backfill.py, before backfill_insert: the months of these times that have no
-- partition get one (a backfill's may be long gone, to retention, or never made).
SELECT pgsched_ensure_months(%(times)s::timestamptz[]);


-- name: backfill_insert
-- backfill.py: the runs of these occurrences (is_backfill, due now; the unique
-- occurrence index absorbs a repeat), the occurrences created.
WITH occurrence AS (
    SELECT unnest(%(times)s::timestamptz[]) AS scheduled_for
)
INSERT INTO pgsched_job_run
       (schedule_id, schedule_name, scheduled_for, idempotency_key, job, kwargs, queue, status,
        fire_after, attempts, max_attempts, timeout, note, tenant, is_backfill, overlap)
SELECT s.id, s.name, o.scheduled_for,
       'pgsched:' || s.id || ':'
           || to_char(o.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       s.job, s.kwargs, %(queue)s, 'pending', statement_timestamp(), 0,
       coalesce(s.max_attempts, %(max_attempts)s), coalesce(s.timeout, %(timeout)s),
       %(note)s, s.tenant, true, nullif(s.overlap, 'allow')
  FROM occurrence o, pgsched_schedule s
 WHERE s.id = %(id)s
 ORDER BY o.scheduled_for
    ON CONFLICT DO NOTHING
RETURNING scheduled_for;


-- name: backfill_ranges
-- backfill.py: the ledger ranges that hold an occurrence of [first, last], locked to be
-- cut (the occurrences backfilled leave the ledger).
SELECT id, first, last, count, reason FROM pgsched_skipped_range
 WHERE schedule_id = %(id)s AND last >= %(first)s AND first <= %(last)s
   AND reason <> 'dst_gap'  -- times that never existed: no occurrence is one of them
 ORDER BY first
   FOR UPDATE;


-- name: stall_candidates
-- stalls.py: active schedules (after the name %(after)s, a batch of them) that may have
-- gone quiet: next_fire_at far in the past (not_planned), or a run that started
-- longer ago than two occurrences (not_running; a cron's are only roughly filtered
-- here, stalls.py counts them).
WITH clock AS (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now)
SELECT s.name, s.cron, s."interval", s.anchor, s.timezone, s.dst_gap, s.dst_fold,
       s.next_fire_at, g.grace, clock.now,
       greatest(started.scheduled_for, s.created_at, s.updated_at) AS since,
       started.scheduled_for IS NOT DISTINCT FROM
           greatest(started.scheduled_for, s.created_at, s.updated_at) AS since_run
  FROM pgsched_schedule s
 CROSS JOIN clock
 CROSS JOIN LATERAL (SELECT coalesce(s.misfire_grace, %(grace)s) AS grace) g
  LEFT JOIN LATERAL (
        SELECT r.scheduled_for FROM pgsched_job_run r
         WHERE r.schedule_id = s.id AND r.started_at IS NOT NULL
         ORDER BY r.scheduled_for DESC
         LIMIT 1
       ) started ON true
 WHERE s.status = 'active' AND s.name > %(after)s
   AND (s.next_fire_at < clock.now - g.grace - %(lookahead)s - %(slack)s
        -- at least two occurrences (each a second or more apart) before now - grace
        OR greatest(started.scheduled_for, s.created_at, s.updated_at)
           < clock.now - g.grace - coalesce(2 * s."interval", interval '2 seconds'))
 ORDER BY s.name
 LIMIT %(batch)s;
