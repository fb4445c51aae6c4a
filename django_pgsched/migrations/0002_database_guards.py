"""What Django's ``Meta`` cannot declare: foreign keys with database-side ON DELETE,
CHECKs on expressions, the planner's expression index, storage parameters, and
the triggers that keep schedules honest under raw SQL and bulk updates.
"""

from __future__ import annotations

from django.db import migrations

FOREIGN_KEYS = """
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_job_run_schedule_fk FOREIGN KEY (schedule_id)
    REFERENCES pgsched_schedule (id) ON DELETE SET NULL DEFERRABLE INITIALLY IMMEDIATE;
ALTER TABLE pgsched_attempt
    ADD CONSTRAINT pgsched_attempt_job_run_fk FOREIGN KEY (job_run_id)
    REFERENCES pgsched_job_run (id) ON DELETE CASCADE DEFERRABLE INITIALLY IMMEDIATE;
"""
FOREIGN_KEYS_REVERSE = """
ALTER TABLE pgsched_attempt DROP CONSTRAINT pgsched_attempt_job_run_fk;
ALTER TABLE pgsched_job_run DROP CONSTRAINT pgsched_job_run_schedule_fk;
"""

CHECKS = r"""
ALTER TABLE pgsched_schedule
    ADD CONSTRAINT pgsched_schedule_name_nonempty CHECK (length(name) BETWEEN 1 AND 200),
    ADD CONSTRAINT pgsched_schedule_cron_text
        CHECK (cron IS NULL OR (length(cron) BETWEEN 1 AND 128 AND cron ~ '^[ -~]+$')),
    ADD CONSTRAINT pgsched_schedule_interval_whole_seconds
        CHECK ("interval" IS NULL OR (
            "interval" >= interval '1 second' AND "interval" <= interval '366 days'
            AND date_trunc('second', "interval") = "interval")),
    ADD CONSTRAINT pgsched_schedule_kwargs_object
        CHECK (jsonb_typeof(kwargs) = 'object' AND octet_length(kwargs::text) <= 1048576),
    ADD CONSTRAINT pgsched_schedule_times_finite
        CHECK ((next_fire_at IS NULL OR (isfinite(next_fire_at) AND next_fire_at < '9999-01-01'))
           AND (anchor IS NULL OR (isfinite(anchor) AND anchor < '9999-01-01'))),
    ADD CONSTRAINT pgsched_schedule_timeout_range
        CHECK (timeout IS NULL OR timeout >= interval '1 second'),
    ADD CONSTRAINT pgsched_schedule_grace_range
        CHECK (misfire_grace IS NULL OR misfire_grace >= interval '0');
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_run_scheduled_for_whole_second
        CHECK (date_trunc('second', scheduled_for) = scheduled_for),
    ADD CONSTRAINT pgsched_run_kwargs_object
        CHECK (jsonb_typeof(kwargs) = 'object' AND octet_length(kwargs::text) <= 1048576);
"""
CHECKS_REVERSE = """
ALTER TABLE pgsched_job_run
    DROP CONSTRAINT pgsched_run_scheduled_for_whole_second,
    DROP CONSTRAINT pgsched_run_kwargs_object;
ALTER TABLE pgsched_schedule
    DROP CONSTRAINT pgsched_schedule_name_nonempty,
    DROP CONSTRAINT pgsched_schedule_cron_text,
    DROP CONSTRAINT pgsched_schedule_interval_whole_seconds,
    DROP CONSTRAINT pgsched_schedule_kwargs_object,
    DROP CONSTRAINT pgsched_schedule_times_finite,
    DROP CONSTRAINT pgsched_schedule_timeout_range,
    DROP CONSTRAINT pgsched_schedule_grace_range;
"""

# The planner's claim: WHERE status = 'active' AND coalesce(next_fire_at, '-infinity') <= $horizon
# ORDER BY coalesce(next_fire_at, '-infinity') LIMIT n: a range scan that stops early,
# with NULL ("compute the first fire after now") first in line.
DUE_INDEX = """
CREATE INDEX pgsched_schedule_due_idx ON pgsched_schedule
    ((coalesce(next_fire_at, '-infinity'::timestamptz))) WHERE status = 'active';
"""
DUE_INDEX_REVERSE = "DROP INDEX pgsched_schedule_due_idx;"

# Runs churn: leave room on each page for HOT updates (lease renewals touch no
# indexed column) and vacuum early.
STORAGE = """
ALTER TABLE pgsched_job_run SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE pgsched_schedule SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05);
"""
STORAGE_REVERSE = """
ALTER TABLE pgsched_job_run RESET (fillfactor, autovacuum_vacuum_scale_factor,
    autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay);
ALTER TABLE pgsched_schedule RESET (fillfactor, autovacuum_vacuum_scale_factor);
"""

TRIGGERS = r"""
-- A changed lattice, or a resume, means "fire first after now": clear
-- next_fire_at (unless the same statement set it) and let the planner compute
-- it from the database clock. Fixing a broken schedule's definition reactivates it.
CREATE FUNCTION pgsched_schedule_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.cron, NEW."interval", NEW.anchor) IS DISTINCT FROM (OLD.cron, OLD."interval", OLD.anchor)
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
-- WHEN keeps the planner's own advance (it never changes these) from calling the function
CREATE TRIGGER pgsched_schedule_before_update BEFORE UPDATE ON pgsched_schedule
    FOR EACH ROW
    WHEN ((NEW.cron, NEW."interval", NEW.anchor) IS DISTINCT FROM (OLD.cron, OLD."interval", OLD.anchor)
          OR (OLD.status <> 'active' AND NEW.status = 'active'))
    EXECUTE FUNCTION pgsched_schedule_before_update();

-- Runs of a schedule that stopped (paused, broken, deleted) or changed its
-- lattice and that no executor has started yet are cancelled: a paused
-- schedule fires nothing, not even what was materialised a few seconds ahead.
CREATE FUNCTION pgsched_schedule_cancel_pending() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sid bigint;
    reason text;
    only_future boolean := false;
BEGIN
    IF TG_OP = 'DELETE' THEN
        sid := OLD.id; reason := 'schedule deleted';
    ELSIF OLD.status = 'active' AND NEW.status <> 'active' THEN
        sid := NEW.id; reason := 'schedule ' || NEW.status;
    ELSIF (NEW.cron, NEW."interval", NEW.anchor) IS DISTINCT FROM (OLD.cron, OLD."interval", OLD.anchor)
    THEN
        sid := NEW.id; reason := 'schedule re-timed'; only_future := true;
    ELSE
        RETURN NULL;
    END IF;
    UPDATE pgsched_job_run
       SET status = 'cancelled', finished_at = clock_timestamp(), note = reason
     WHERE schedule_id = sid
       AND status = 'pending'
       AND attempts = 0
       AND (NOT only_future OR fire_after > clock_timestamp());
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;  -- a BEFORE DELETE trigger returning NULL would cancel the delete
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER pgsched_schedule_cancel_on_update AFTER UPDATE ON pgsched_schedule
    FOR EACH ROW
    WHEN ((OLD.status = 'active' AND NEW.status <> 'active')
          OR (NEW.cron, NEW."interval", NEW.anchor) IS DISTINCT FROM (OLD.cron, OLD."interval", OLD.anchor))
    EXECUTE FUNCTION pgsched_schedule_cancel_pending();
CREATE TRIGGER pgsched_schedule_cancel_on_delete BEFORE DELETE ON pgsched_schedule
    FOR EACH ROW EXECUTE FUNCTION pgsched_schedule_cancel_pending();

-- NOTIFY pgsched_schedule once per statement, with the ids (trimmed to fit a
-- payload) of schedules whose definition or state changed. The planner's own
-- advance (next_fire_at forward, last_fire_at, skipped count) does not notify.
CREATE FUNCTION pgsched_schedule_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM new_rows LIMIT 500) t;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT string_agg(id::text, ',') INTO ids FROM (SELECT id FROM old_rows LIMIT 500) t;
    ELSE
        SELECT string_agg(n.id::text, ',') INTO ids FROM (
            SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE (n.status, n.cron, n."interval", n.anchor, n.job, n.kwargs, n.misfire_policy,
                    n.catch_up_limit, n.misfire_grace, n.max_attempts, n.timeout, n.queue)
                   IS DISTINCT FROM
                   (o.status, o.cron, o."interval", o.anchor, o.job, o.kwargs, o.misfire_policy,
                    o.catch_up_limit, o.misfire_grace, o.max_attempts, o.timeout, o.queue)
                OR n.next_fire_at IS NULL
                OR n.next_fire_at < o.next_fire_at
             LIMIT 500) n;
    END IF;
    IF ids IS NOT NULL THEN
        PERFORM pg_notify('pgsched_schedule', ids);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER pgsched_schedule_notify_insert AFTER INSERT ON pgsched_schedule
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
CREATE TRIGGER pgsched_schedule_notify_update AFTER UPDATE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
CREATE TRIGGER pgsched_schedule_notify_delete AFTER DELETE ON pgsched_schedule
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_notify();
"""
TRIGGERS_REVERSE = """
DROP TRIGGER pgsched_schedule_notify_delete ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_notify_update ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_notify_insert ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_notify();
DROP TRIGGER pgsched_schedule_cancel_on_delete ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_cancel_on_update ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_cancel_pending();
DROP TRIGGER pgsched_schedule_before_update ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_before_update();
"""


class Migration(migrations.Migration):
    dependencies = [("pgsched", "0001_initial")]

    operations = [
        migrations.RunSQL(FOREIGN_KEYS, FOREIGN_KEYS_REVERSE),
        migrations.RunSQL(CHECKS, CHECKS_REVERSE),
        migrations.RunSQL(DUE_INDEX, DUE_INDEX_REVERSE),
        migrations.RunSQL(STORAGE, STORAGE_REVERSE),
        migrations.RunSQL(TRIGGERS, TRIGGERS_REVERSE),
    ]
