-- The delivery's SQL: the circuit breakers (breaker.py), one named block per statement,
-- read by name (django_pgsched.sqlfiles). The statements admit, failure and success are
-- templates: breaker.py fills in the fragments below ({key}, {probe}, ...), each named
-- after its field.


-- name: key
-- A fragment: the key of a breaker, the destination given, or (pgsched.http) the one the
-- database computes from the URL, so that it matches pgsched_run_http_destination_idx.
coalesce(%(destination)s::text, pgsched_http_destination(%(url)s::text))


-- name: probe
-- A fragment: may this attempt be the probe? The breaker is open and its cool-down over,
-- or half-open and its probe given up (or this run is the probe, asking again).
((b.state = 'open' AND b.retry_at <= c.now) OR (b.state = 'half_open' AND (b.retry_at <= c.now OR b.probe_run_id = %(run)s)))


-- name: extend
-- A fragment: the held runs' park_until is due to be moved further ahead.
(b.park_until IS NULL OR b.park_until < c.now + %(park)s / 2)


-- name: admit
-- May this attempt go through? A template ({key}, {probe}, {extend}): the breaker as it
-- is, made half-open with this run as its probe when it may be, its park_until extended.
WITH clock AS (SELECT clock_timestamp() AS now),
changed AS (
    UPDATE pgsched_breaker b
       SET state = CASE WHEN {probe} THEN 'half_open' ELSE b.state END,
           probe_run_id = CASE WHEN {probe} THEN %(run)s ELSE b.probe_run_id END,
           since = CASE WHEN {probe} AND b.state = 'open' THEN c.now ELSE b.since END,
           retry_at = CASE WHEN {probe} THEN c.now + %(probe_window)s ELSE b.retry_at END,
           park_until = CASE WHEN {extend} THEN c.now + %(park)s ELSE b.park_until END
      FROM clock c
     WHERE b.tenant = %(tenant)s AND b.destination = {key}
       AND b.state <> 'closed'
       AND ({probe} OR {extend})
    RETURNING b.state, b.probe_run_id, b.retry_at, b.park_until, b.failures
)
SELECT c.now, {key},
       coalesce(x.state, b.state), coalesce(x.probe_run_id, b.probe_run_id),
       coalesce(x.retry_at, b.retry_at), coalesce(x.park_until, b.park_until),
       coalesce(x.failures, b.failures, 0)
  FROM clock c
  LEFT JOIN pgsched_breaker b ON b.tenant = %(tenant)s AND b.destination = {key}
  LEFT JOIN changed x ON true;


-- name: reopen
-- A fragment of failure: a half-open breaker whose probe failed (or was given up) opens
-- again.
(b.state = 'half_open' AND (b.probe_run_id IS NOT DISTINCT FROM %(run)s OR b.retry_at <= excluded.since))


-- name: open
-- A fragment of failure: a closed breaker opens at the threshold.
(b.state = 'closed' AND b.failures + 1 >= %(threshold)s)


-- name: next_cooldown
-- A fragment of failure: the cool-down after a failed probe, doubled up to its maximum.
least(coalesce(b.cooldown, %(cooldown)s) * 2, %(cooldown_max)s)


-- name: failure
-- A failed delivery. A template ({key}, {reopen}, {open}, {next_cooldown}).
-- Transitions: closed -> open at the threshold; half-open -> open when the probe fails
-- (or was given up); open stays open.
INSERT INTO pgsched_breaker AS b
       (tenant, destination, state, failures, since, retry_at, cooldown, park_until, opened,
        opened_at, last_error, last_failure_at)
SELECT %(tenant)s, {key}, CASE WHEN o THEN 'open' ELSE 'closed' END, 1, now,
       CASE WHEN o THEN now + %(cooldown)s END, CASE WHEN o THEN %(cooldown)s END,
       CASE WHEN o THEN now + %(park)s END, CASE WHEN o THEN 1 ELSE 0 END,
       CASE WHEN o THEN now END, %(error)s, now
  FROM (SELECT clock_timestamp() AS now, %(threshold)s <= 1 AS o) c
ON CONFLICT (tenant, destination) DO UPDATE
   SET failures = b.failures + 1,
       last_error = excluded.last_error,
       last_failure_at = excluded.since,
       state = CASE WHEN {reopen} OR {open} THEN 'open' ELSE b.state END,
       since = CASE WHEN {reopen} OR {open} THEN excluded.since ELSE b.since END,
       cooldown = CASE WHEN {reopen} THEN {next_cooldown}
                       WHEN {open} THEN %(cooldown)s ELSE b.cooldown END,
       retry_at = CASE WHEN {reopen} THEN excluded.since + {next_cooldown}
                       WHEN {open} THEN excluded.since + %(cooldown)s ELSE b.retry_at END,
       park_until = CASE WHEN {open} THEN excluded.since + %(park)s ELSE b.park_until END,
       opened_at = CASE WHEN {open} THEN excluded.since ELSE b.opened_at END,
       probe_run_id = CASE WHEN {reopen} THEN NULL ELSE b.probe_run_id END,
       opened = b.opened + CASE WHEN {open} THEN 1 ELSE 0 END
RETURNING b.state, b.destination, b.retry_at, b.park_until, b.failures,
          (b.state = 'open' AND b.since = b.last_failure_at) AS changed,
          (b.state = 'open' AND b.opened_at = b.last_failure_at) AS opened_now;


-- name: hold
-- Hold back the waiting runs of a destination that just opened: each moves to
-- park_until (no attempt used, nothing failed). Runs being claimed right now are
-- skipped: they meet the breaker when their job asks.
-- With %(hold)s false, only the probe is designated. With %(designate)s, the
-- oldest waiting run is kept for retry_at instead: the next probe, when the run
-- that failed has no attempt left to be it.
WITH locked AS MATERIALIZED (
    SELECT r.id, r.fire_after
      FROM pgsched_job_run r
     WHERE r.job = 'pgsched.http'
       AND r.status IN ('pending', 'retrying')
       AND r.tenant = %(tenant)s
       AND pgsched_http_destination(r.kwargs ->> 'url') = %(destination)s
       AND r.fire_after < %(park_until)s
       AND r.id <> %(run)s
     ORDER BY r.fire_after, r.id
     LIMIT CASE WHEN %(hold)s THEN %(limit)s ELSE 1 END
       FOR NO KEY UPDATE OF r SKIP LOCKED
),
held AS (
    SELECT id, row_number() OVER (ORDER BY fire_after, id) AS n FROM locked
)
UPDATE pgsched_job_run r
   SET fire_after = CASE WHEN held.n = 1 AND %(designate)s THEN %(retry_at)s
                         ELSE %(park_until)s END
  FROM held
 WHERE r.id = held.id
   AND (%(hold)s OR (held.n = 1 AND %(designate)s));


-- name: success
-- Close (after a success) and release what was held back: each held run gets its
-- own time back (scheduled_for), or now if that has passed. A template ({key}).
WITH old AS MATERIALIZED (
    SELECT id, park_until, opened_at, state
      FROM pgsched_breaker
     WHERE tenant = %(tenant)s AND destination = {key}
       AND (state <> 'closed' OR failures > 0)
       FOR NO KEY UPDATE
),
closed AS (
    UPDATE pgsched_breaker b
       SET state = 'closed', failures = 0, retry_at = NULL, cooldown = NULL, probe_run_id = NULL,
           park_until = NULL, last_success_at = clock_timestamp(),
           since = CASE WHEN b.state <> 'closed' THEN clock_timestamp() ELSE b.since END
      FROM old
     WHERE b.id = old.id
    RETURNING b.destination
),
released AS (
    UPDATE pgsched_job_run r
       SET fire_after = greatest(clock_timestamp(), r.scheduled_for)
      FROM old
     WHERE old.park_until IS NOT NULL
       AND r.job = 'pgsched.http'
       AND r.status IN ('pending', 'retrying')
       AND r.tenant = %(tenant)s
       AND pgsched_http_destination(r.kwargs ->> 'url') = (SELECT destination FROM closed)
       -- every held run waits until some park_until of this episode: from its opening
       -- plus PARK to the latest (a run deferred by its server waits less than that)
       AND r.fire_after BETWEEN old.opened_at + %(park)s AND old.park_until
    RETURNING r.id
)
SELECT (SELECT state FROM old), (SELECT count(*) FROM released);
