-- The operations' SQL (metrics, system checks), one named block per statement, read
-- by name (django_pgsched.sqlfiles).


-- name: backlog
-- metrics.py, a template: the database's time, the backlog, the broken schedules, and
-- the stranded runs and their schedules. The backlog counts what some live replica
-- could run (engine/stranded.py: the replicas' registrations are advisory locks;
-- {held} and {runnable} are the engine's blocks stranded_held and stranded_runnable);
-- while none is registered at all (every executor down or starting), every due run
-- counts, so that autoscaling sees the work.
WITH {held}
SELECT clock_timestamp(),
       (SELECT count(*) FROM pgsched_job_run r
         WHERE r.status = ANY(%(unfinished)s) AND r.fire_after <= clock_timestamp()
           AND (r.status = 'running' OR NOT EXISTS (SELECT 1 FROM held) OR {runnable})),
       (SELECT count(*) FROM pgsched_schedule WHERE status = %(broken)s),
       stranded.runs, stranded.schedules
  FROM (SELECT count(*) AS runs, count(DISTINCT r.schedule_id) AS schedules
          FROM pgsched_job_run r
         WHERE r.status = 'pending' AND r.attempts = 0
           AND r.fire_after < clock_timestamp() - make_interval(secs => %(grace)s)
           AND EXISTS (SELECT 1 FROM held) AND NOT {runnable}) stranded;


-- name: tenant_running
-- metrics.py, per tenant (PGSCHED["METRICS_TENANT_LABEL"]), like the two below: each
-- read from the partial index of its runs (pgsched_run_tenant_running_idx,
-- pgsched_run_tenant_due_idx), never the history; the busiest tenants first, at most
-- metrics.TENANTS_LIMIT. Here: the runs holding a live lease.
SELECT tenant, count(*) FROM pgsched_job_run
 WHERE status = 'running' AND tenant <> '' AND claim_expires_at >= clock_timestamp()
 GROUP BY tenant ORDER BY count(*) DESC, tenant LIMIT %(limit)s;


-- name: tenant_due
-- metrics.py: the runs due and waiting to be claimed, per tenant.
SELECT tenant, count(*) FROM pgsched_job_run
 WHERE status IN ('pending', 'retrying') AND tenant <> '' AND fire_after <= clock_timestamp()
 GROUP BY tenant ORDER BY count(*) DESC, tenant LIMIT %(limit)s;


-- name: tenant_paused
-- metrics.py: the paused tenants, 1 each.
SELECT key, 1 FROM pgsched_tenant WHERE paused ORDER BY key LIMIT %(limit)s;


-- name: audit_coverage
-- checks.py (pgsched.W003): the columns of pgsched_schedule that the audit trigger's
-- function does not compare (it names each one o.<column>, then a comma or a closing
-- parenthesis), but for the runtime columns it leaves out on purpose. Run without
-- parameters: %% is sent as written (LIKE reads it as two wildcards, the same as one).
SELECT a.attname
  FROM pg_attribute a
 WHERE a.attrelid = 'pgsched_schedule'::regclass AND a.attnum > 0 AND NOT a.attisdropped
   AND a.attname <> ALL (pgsched_schedule_runtime_columns())
   AND NOT EXISTS (
        SELECT 1 FROM pg_proc p
         WHERE p.oid = to_regprocedure('pgsched_schedule_after_update()')
           AND (p.prosrc LIKE '%%o.' || quote_ident(a.attname) || ',%%'
                OR p.prosrc LIKE '%%o.' || quote_ident(a.attname) || ')%%'))
 ORDER BY a.attnum;
