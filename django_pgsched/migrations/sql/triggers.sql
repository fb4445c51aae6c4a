-- The triggers. The claim outbox's two are made disabled: the broker's claim path
-- enables them (django_pgsched.broker.schema).
-- Loaded by migration 0001_initial, in this order: domains, functions, tables,
-- indexes, triggers, grants.

-- pgsched_schedule_change pgsched_change_masked
CREATE TRIGGER pgsched_change_masked BEFORE INSERT OR UPDATE OF changes ON pgsched_schedule_change FOR EACH ROW WHEN ((new.changes ? 'kwargs'::text)) EXECUTE FUNCTION pgsched_change_masked();

-- pgsched_job_run pgsched_job_run_orphaned
CREATE TRIGGER pgsched_job_run_orphaned AFTER UPDATE OF schedule_id ON pgsched_job_run FOR EACH ROW WHEN (((old.schedule_id IS NOT NULL) AND (new.schedule_id IS NULL) AND ((new.status)::text = 'pending'::text) AND ((new.attempts)::smallint = 0))) EXECUTE FUNCTION pgsched_job_run_orphaned();

-- pgsched_job_run pgsched_run_delete_attempts
CREATE TRIGGER pgsched_run_delete_attempts AFTER DELETE ON pgsched_job_run REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pgsched_run_delete_attempts();

-- pgsched_job_run pgsched_run_horizon_lower
CREATE TRIGGER pgsched_run_horizon_lower AFTER INSERT OR UPDATE OF status, scheduled_for ON pgsched_job_run FOR EACH ROW WHEN ((((new.status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text, ('running'::character varying)::text])) AND (new.scheduled_for < ((date_trunc('month'::text, (now() AT TIME ZONE 'UTC'::text)) - '1 mon'::interval) AT TIME ZONE 'UTC'::text)))) EXECUTE FUNCTION pgsched_run_horizon_lower();

-- pgsched_job_run pgsched_run_key_unique
CREATE TRIGGER pgsched_run_key_unique BEFORE INSERT OR UPDATE OF idempotency_key, scheduled_for, tenant ON pgsched_job_run FOR EACH ROW EXECUTE FUNCTION pgsched_run_key_unique();

-- pgsched_job_run pgsched_run_move_attempts
CREATE TRIGGER pgsched_run_move_attempts BEFORE UPDATE OF scheduled_for ON pgsched_job_run FOR EACH ROW WHEN ((old.scheduled_for IS DISTINCT FROM new.scheduled_for)) EXECUTE FUNCTION pgsched_run_move_attempts();

-- pgsched_job_run pgsched_run_outbox_insert
CREATE TRIGGER pgsched_run_outbox_insert AFTER INSERT ON pgsched_job_run FOR EACH ROW WHEN (((new.status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text]))) EXECUTE FUNCTION pgsched_claim_outbox_add();

ALTER TABLE pgsched_job_run DISABLE TRIGGER pgsched_run_outbox_insert;

-- pgsched_job_run pgsched_run_outbox_update
CREATE TRIGGER pgsched_run_outbox_update AFTER UPDATE OF status, fire_after ON pgsched_job_run FOR EACH ROW WHEN ((((new.status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text])) AND (((old.status)::text IS DISTINCT FROM (new.status)::text) OR ((old.fire_after)::timestamp with time zone IS DISTINCT FROM (new.fire_after)::timestamp with time zone)))) EXECUTE FUNCTION pgsched_claim_outbox_add();

ALTER TABLE pgsched_job_run DISABLE TRIGGER pgsched_run_outbox_update;

-- pgsched_job_run pgsched_run_schedule_exists
CREATE TRIGGER pgsched_run_schedule_exists BEFORE INSERT OR UPDATE OF schedule_id ON pgsched_job_run FOR EACH ROW WHEN ((new.schedule_id IS NOT NULL)) EXECUTE FUNCTION pgsched_run_schedule_exists();

-- pgsched_schedule pgsched_schedule_after_delete
CREATE TRIGGER pgsched_schedule_after_delete AFTER DELETE ON pgsched_schedule REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_delete();

-- pgsched_schedule pgsched_schedule_after_insert
CREATE TRIGGER pgsched_schedule_after_insert AFTER INSERT ON pgsched_schedule REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_insert();

-- pgsched_schedule pgsched_schedule_after_update
CREATE TRIGGER pgsched_schedule_after_update AFTER UPDATE ON pgsched_schedule REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_after_update();

-- pgsched_schedule pgsched_schedule_before_update
CREATE TRIGGER pgsched_schedule_before_update BEFORE UPDATE ON pgsched_schedule FOR EACH ROW WHEN ((((new.cron)::text IS DISTINCT FROM (old.cron)::text) OR (new."interval" IS DISTINCT FROM old."interval") OR (new.anchor IS DISTINCT FROM old.anchor) OR ((new.timezone)::text IS DISTINCT FROM (old.timezone)::text) OR ((new.dst_gap)::text IS DISTINCT FROM (old.dst_gap)::text) OR ((new.dst_fold)::text IS DISTINCT FROM (old.dst_fold)::text) OR (((old.status)::text <> 'active'::text) AND ((new.status)::text = 'active'::text)))) EXECUTE FUNCTION pgsched_schedule_before_update();

-- pgsched_schedule pgsched_schedule_release_runs
CREATE TRIGGER pgsched_schedule_release_runs AFTER DELETE ON pgsched_schedule REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pgsched_schedule_release_runs();

-- pgsched_schedule pgsched_schedule_tenant_quota
CREATE TRIGGER pgsched_schedule_tenant_quota BEFORE INSERT OR UPDATE OF tenant, job ON pgsched_schedule FOR EACH ROW WHEN (((new.tenant)::text <> ''::text)) EXECUTE FUNCTION pgsched_schedule_tenant_quota();
