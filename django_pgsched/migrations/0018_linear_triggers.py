"""The triggers of ``pgsched_schedule`` made linear in the rows a statement touches.

Before: a row-level audit trigger (a PL/pgSQL call and an ``INSERT`` per changed
row), a row-level cancel trigger (an ``UPDATE`` of the runs per paused or
re-timed row) and a statement-level notify trigger whose join of the
transition tables (``new_rows JOIN old_rows ... LIMIT 500``) was planned as a
nested loop: a bulk ``UPDATE`` of 100k schedules cost 5-9x the same statement
without triggers, and one that set ``next_fire_at`` to a single value went
quadratic (138 s at 40k rows).

After, per event, one statement-level ``AFTER`` trigger does everything that
only reads the changed rows, set-based:

- ``pgsched_schedule_after_insert`` / ``_after_delete``: the audit rows
  (``created`` / ``deleted``) in one ``INSERT ... SELECT`` from the transition
  table, and ``NOTIFY pgsched_schedule`` with up to 500 ids;
- ``pgsched_schedule_after_update``: one hash join of ``old_rows`` and
  ``new_rows`` (no ``LIMIT`` inside it: the planner sizes the join from the
  tuplestores' real row counts, and a hash join is linear) that keeps only
  the rows that matter (a definition changed, or ``next_fire_at`` cleared or
  moved earlier); from those, the audit rows in one ``INSERT``, the unstarted
  runs of paused, broken or re-timed schedules cancelled in one ``UPDATE``
  (driven by an array of ids, so a small change uses the runs' index), and the
  notification. The planner's own advance matches none of the conditions: it
  pays the capture of the transition tables and one join of its batch.

What must change ``NEW`` stays row-level ``BEFORE UPDATE`` (with a ``WHEN``
clause, evaluated in C, so the planner never calls it): one function now for
what were two triggers (clear ``next_fire_at`` on a re-time or a resume; keep
``unplanned_from`` for the ledger on a resume). A deleted schedule's
unstarted runs are cancelled by a trigger on ``pgsched_job_run`` instead of one
``UPDATE`` per deleted schedule: the foreign key's ``ON DELETE SET NULL``
already visits each of its runs, and a pending, unstarted run that loses its
schedule is cancelled there (``AFTER UPDATE OF schedule_id``: the engine's own
writes of runs never set that column, so they never evaluate it).

The audited columns are named in ``pgsched_schedule_after_update``'s join, so
``pgsched_schedule_audit_install()`` now regenerates that function from the
catalog (a migration that adds a column to ``pgsched_schedule`` still calls
it; check ``pgsched.W003`` reads the function's source).
"""

from __future__ import annotations

import importlib

from django.db import migrations

_0006 = importlib.import_module("django_pgsched.migrations.0006_schedule_change")
_0007 = importlib.import_module("django_pgsched.migrations.0007_time_zones")

TIMETABLE_N = 'n.cron, n."interval", n.anchor, n.timezone, n.dst_gap, n.dst_fold'
TIMETABLE_O = 'o.cron, o."interval", o.anchor, o.timezone, o.dst_gap, o.dst_fold'
# the columns whose change wakes the planners (as 0007's notify trigger)
NOTIFY = (
    '@status, @cron, @"interval", @anchor, @job, @kwargs, @misfire_policy, @catch_up_limit, '
    "@misfire_grace, @max_attempts, @timeout, @queue, @timezone, @dst_gap, @dst_fold, @jitter"
)
NOTIFY_N, NOTIFY_O = NOTIFY.replace("@", "n."), NOTIFY.replace("@", "o.")

AUDIT_ROW = """
           coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
           statement_timestamp(), current_user,
           coalesce(current_setting('application_name', true), '')"""

FORWARD = rf"""
-- Row-level BEFORE UPDATE: only what must change NEW. One function for the
-- re-time / resume rule (0002, 0007) and the ledger's unplanned_from (0010).
CREATE OR REPLACE FUNCTION pgsched_schedule_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'active' AND NEW.status = 'active'
       AND OLD.unplanned_from IS NULL AND OLD.next_fire_at IS NOT NULL THEN
        -- a stopped schedule is active again: where it stopped, and why, for the
        -- planner's ledger (the first stop wins until the planner has recorded it)
        NEW.unplanned_from := OLD.next_fire_at;
        NEW.unplanned_reason := OLD.status;
    END IF;
    IF (NEW.cron, NEW."interval", NEW.anchor, NEW.timezone, NEW.dst_gap, NEW.dst_fold)
       IS DISTINCT FROM
       (OLD.cron, OLD."interval", OLD.anchor, OLD.timezone, OLD.dst_gap, OLD.dst_fold)
    THEN
        IF OLD.status = 'broken' AND NEW.status = 'broken' THEN
            NEW.status := 'active';
            NEW.last_error := '';
        END IF;
        IF NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
            NEW.next_fire_at := NULL;
        END IF;
    ELSIF OLD.status <> 'active' AND NEW.status = 'active'
          AND NEW.next_fire_at IS NOT DISTINCT FROM OLD.next_fire_at THEN
        NEW.next_fire_at := NULL;
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER pgsched_schedule_unplanned ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_unplanned();

-- A deleted schedule's unstarted runs are cancelled. The foreign key's ON DELETE
-- SET NULL detaches them (one UPDATE per deleted schedule, which a DELETE pays
-- with or without triggers); a run that loses its schedule while still pending
-- and unstarted is cancelled right there. "UPDATE OF schedule_id": no other
-- write of a run (claims, leases, outcomes) sets that column, so none of them
-- even evaluates the WHEN clause.
DROP TRIGGER pgsched_schedule_cancel_on_delete ON pgsched_schedule;
CREATE FUNCTION pgsched_job_run_orphaned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgsched_job_run
       SET status = 'cancelled', finished_at = clock_timestamp(), note = 'schedule deleted'
     WHERE id = NEW.id AND status = 'pending' AND attempts = 0;
    RETURN NULL;
END $$;
CREATE TRIGGER pgsched_job_run_orphaned AFTER UPDATE OF schedule_id ON pgsched_job_run
    FOR EACH ROW
    WHEN (OLD.schedule_id IS NOT NULL AND NEW.schedule_id IS NULL
          AND NEW.status = 'pending' AND NEW.attempts = 0)
    EXECUTE FUNCTION pgsched_job_run_orphaned();

-- The row-level AFTER triggers and the old statement-level notify go: the
-- statement-level functions below do their work set-based.
DROP TRIGGER pgsched_schedule_cancel_on_update ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_cancel_pending();
DROP TRIGGER IF EXISTS pgsched_schedule_audit_update ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_audit_insert ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_audit_delete ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_audit();
DROP TRIGGER pgsched_schedule_notify_insert ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_notify_update ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_notify_delete ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_notify();

-- (Re)creates the three statement-level functions with the audited columns
-- (every column that is not runtime state) spelled out: the comparison and the
-- before/after of each column are plain expressions, with no row-to-JSON
-- round trip. Call it again after adding a column to pgsched_schedule (check
-- pgsched.W003 reports a column pgsched_schedule_after_update() does not name).
CREATE OR REPLACE FUNCTION pgsched_schedule_audit_install() RETURNS void LANGUAGE plpgsql
AS $install$
DECLARE
    old_cols text;
    new_cols text;
    changed text;   -- column -> [before, after], of the columns that differ
    created text;   -- column -> [null, value], of the columns set
    deleted text;   -- column -> [value, null], of every column
BEGIN
    -- created, deleted: one jsonb_build_object per 20 columns (a function takes at most
    -- 100 arguments), then the keys of the columns left out removed: far cheaper than a
    -- || per column when most columns are there
    WITH col AS (
        SELECT attname, attnum, (row_number() OVER (ORDER BY attnum) - 1) / 20 AS chunk
          FROM pg_attribute
         WHERE attrelid = 'pgsched_schedule'::regclass
           AND attnum > 0
           AND NOT attisdropped
           AND attname <> ALL (pgsched_schedule_runtime_columns())
    ),
    part AS (
        SELECT chunk,
               string_agg(format('%L, jsonb_build_array(NULL::jsonb, to_jsonb(n.%I))',
                                 attname, attname), ', ' ORDER BY attnum) AS created_pairs,
               string_agg(format('%L, jsonb_build_array(to_jsonb(o.%I), NULL::jsonb)',
                                 attname, attname), ', ' ORDER BY attnum) AS deleted_pairs
          FROM col
         GROUP BY chunk
    )
    SELECT (SELECT string_agg('o.' || quote_ident(attname), ', ' ORDER BY attnum) FROM col),
           (SELECT string_agg('n.' || quote_ident(attname), ', ' ORDER BY attnum) FROM col),
           -- an UPDATE changes a column or two: a || of the changed ones is cheapest
           (SELECT string_agg(format('CASE WHEN o.%1$I IS DISTINCT FROM n.%1$I THEN '
                                     'jsonb_build_object(%1$L, jsonb_build_array('
                                     'to_jsonb(o.%1$I), to_jsonb(n.%1$I))) '
                                     'ELSE ''{{}}''::jsonb END', attname),
                              E'\n || ' ORDER BY attnum) FROM col),
           (SELECT '(('
                   || string_agg('jsonb_build_object(' || created_pairs || ')', ' || '
                                 ORDER BY chunk)
                   || ') - array_remove(ARRAY['
                   || (SELECT string_agg(format('CASE WHEN n.%I IS NULL THEN %L END',
                                                attname, attname),
                                         ', ' ORDER BY attnum) FROM col)
                   || ']::text[], NULL))' FROM part),
           (SELECT string_agg('jsonb_build_object(' || deleted_pairs || ')', ' || ' ORDER BY chunk)
              FROM part)
      INTO old_cols, new_cols, changed, created, deleted;

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_insert() RETURNS trigger LANGUAGE plpgsql
    SET jit = off  -- a tuplestore has no statistics: the estimates are wild, and JIT costs seconds
AS $fn$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT n.id, n.name, 'created', {AUDIT_ROW}, %1$s
      FROM new_rows n;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM new_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, created);

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_delete() RETURNS trigger LANGUAGE plpgsql
    SET jit = off
AS $fn$
DECLARE
    ids text;
BEGIN
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
    SELECT o.id, o.name, 'deleted', {AUDIT_ROW}, %1$s
      FROM old_rows o;
    SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM old_rows LIMIT 500) t;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, deleted);

    EXECUTE format($body$
CREATE OR REPLACE FUNCTION pgsched_schedule_after_update() RETURNS trigger LANGUAGE plpgsql
    SET jit = off
AS $fn$
DECLARE
    ids text;
    stop_ids bigint[];
    stop_reasons text[];
    stop_future boolean[];
BEGIN
    -- One join of the transition tables (no LIMIT inside it), kept to the rows that matter.
    WITH pair AS MATERIALIZED (
        SELECT n.id, n.name, n.status,
               o.status = 'active' AND n.status <> 'active' AS stopped,
               ({TIMETABLE_N}) IS DISTINCT FROM ({TIMETABLE_O}) AS retimed,
               (({NOTIFY_N}) IS DISTINCT FROM ({NOTIFY_O})
                OR n.next_fire_at IS NULL
                OR n.next_fire_at < o.next_fire_at) AS notify,
               CASE WHEN ROW(%1$s) IS DISTINCT FROM ROW(%2$s) THEN %3$s END AS diff
          FROM new_rows n JOIN old_rows o ON o.id = n.id
         WHERE ROW(%1$s) IS DISTINCT FROM ROW(%2$s)
            OR ({NOTIFY_N}) IS DISTINCT FROM ({NOTIFY_O})
            OR n.next_fire_at IS NULL
            OR n.next_fire_at < o.next_fire_at
    ),
    recorded AS (
        INSERT INTO pgsched_schedule_change
               (schedule_id, schedule_name, action, actor, at, db_user, application, changes)
        SELECT p.id, p.name, 'changed', {AUDIT_ROW}, p.diff
          FROM pair p
         WHERE p.diff <> '{{}}'::jsonb
    )
    SELECT (SELECT string_agg(id::text, ',') FROM (SELECT id FROM pair WHERE notify LIMIT 500) t),
           array_agg(id) FILTER (WHERE stopped OR retimed),
           array_agg(CASE WHEN stopped THEN 'schedule ' || status ELSE 'schedule re-timed' END)
               FILTER (WHERE stopped OR retimed),
           array_agg(NOT stopped) FILTER (WHERE stopped OR retimed)
      INTO ids, stop_ids, stop_reasons, stop_future
      FROM pair;
    -- Runs of a schedule that stopped (paused, broken) or changed its timetable
    -- and that no executor has started yet are cancelled (a re-time: future ones).
    IF stop_ids IS NOT NULL THEN
        UPDATE pgsched_job_run r
           SET status = 'cancelled', finished_at = clock_timestamp(), note = c.reason
          FROM unnest(stop_ids, stop_reasons, stop_future) AS c(id, reason, only_future)
         WHERE r.schedule_id = c.id
           AND r.status = 'pending'
           AND r.attempts = 0
           AND (NOT c.only_future OR r.fire_after > clock_timestamp());
    END IF;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $fn$;
$body$, old_cols, new_cols, changed);
END $install$;

SELECT pgsched_schedule_audit_install();
CREATE TRIGGER pgsched_schedule_after_insert AFTER INSERT ON pgsched_schedule
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_insert();
CREATE TRIGGER pgsched_schedule_after_delete AFTER DELETE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_delete();
CREATE TRIGGER pgsched_schedule_after_update AFTER UPDATE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_update();

DROP TRIGGER pgsched_schedule_before_update ON pgsched_schedule;
CREATE TRIGGER pgsched_schedule_before_update BEFORE UPDATE ON pgsched_schedule
    FOR EACH ROW
    WHEN ((NEW.cron, NEW."interval", NEW.anchor, NEW.timezone, NEW.dst_gap, NEW.dst_fold)
          IS DISTINCT FROM
          (OLD.cron, OLD."interval", OLD.anchor, OLD.timezone, OLD.dst_gap, OLD.dst_fold)
          OR (OLD.status <> 'active' AND NEW.status = 'active'))
    EXECUTE FUNCTION pgsched_schedule_before_update();
"""

# Back to 0013: the row-level triggers of 0002/0006/0007/0010 and the old notify.
_OLD_AUDIT = "CREATE FUNCTION pgsched_schedule_audit()" + _0006.AUDIT.split(
    "CREATE FUNCTION pgsched_schedule_audit()", 1
)[1].replace(
    "CREATE FUNCTION pgsched_schedule_audit_install()",
    "CREATE OR REPLACE FUNCTION pgsched_schedule_audit_install()",
)
REVERSE = (
    r"""
DROP TRIGGER pgsched_job_run_orphaned ON pgsched_job_run;
DROP FUNCTION pgsched_job_run_orphaned();
DROP TRIGGER pgsched_schedule_after_update ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_after_update();
DROP TRIGGER pgsched_schedule_after_delete ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_after_delete();
DROP TRIGGER pgsched_schedule_after_insert ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_after_insert();

CREATE FUNCTION pgsched_schedule_unplanned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.unplanned_from IS NULL AND OLD.next_fire_at IS NOT NULL THEN
        NEW.unplanned_from := OLD.next_fire_at;
        NEW.unplanned_reason := OLD.status;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pgsched_schedule_unplanned BEFORE UPDATE ON pgsched_schedule
    FOR EACH ROW WHEN (OLD.status <> 'active' AND NEW.status = 'active')
    EXECUTE FUNCTION pgsched_schedule_unplanned();

-- a placeholder: 0007's SQL below drops it and creates it anew
CREATE TRIGGER pgsched_schedule_cancel_on_update AFTER UPDATE ON pgsched_schedule
    FOR EACH ROW EXECUTE FUNCTION pgsched_schedule_before_update();
"""
    + _0007._triggers(_0007.TIMETABLE, _0007.COLUMNS)
    + """
CREATE TRIGGER pgsched_schedule_cancel_on_delete BEFORE DELETE ON pgsched_schedule
    FOR EACH ROW EXECUTE FUNCTION pgsched_schedule_cancel_pending();
CREATE TRIGGER pgsched_schedule_notify_insert AFTER INSERT ON pgsched_schedule
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
CREATE TRIGGER pgsched_schedule_notify_update AFTER UPDATE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
CREATE TRIGGER pgsched_schedule_notify_delete AFTER DELETE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
"""
    + _OLD_AUDIT
)


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0017_claim_outbox"),
    ]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
