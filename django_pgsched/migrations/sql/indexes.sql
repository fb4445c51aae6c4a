-- The indexes. Those of the partitioned tables are made on each month as it is
-- created or attached.
-- Loaded by migration 0001_initial, in this order: domains, functions, tables,
-- indexes, triggers, grants.

-- pgsched_change_at_idx
CREATE INDEX pgsched_change_at_idx ON pgsched_schedule_change USING btree (at, id);

-- pgsched_change_schedule_idx
CREATE INDEX pgsched_change_schedule_idx ON pgsched_schedule_change USING btree (schedule_id, at, id);

-- pgsched_claim_outbox_due_idx
CREATE INDEX pgsched_claim_outbox_due_idx ON pgsched_claim_outbox USING btree (due, id);

-- pgsched_run_tenant_running_idx
CREATE INDEX pgsched_run_tenant_running_idx ON ONLY pgsched_job_run USING btree (tenant, claim_expires_at) WHERE (((status)::text = 'running'::text) AND (NOT ((tenant)::text = ''::text)));

-- pgsched_run_tenant_due_idx
CREATE INDEX pgsched_run_tenant_due_idx ON ONLY pgsched_job_run USING btree (tenant, (((priority)::smallint * '-1'::integer)), fire_after, id) WHERE (((status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text])) AND (NOT ((tenant)::text = ''::text)));

-- pgsched_one_run_per_occurrence
CREATE UNIQUE INDEX pgsched_one_run_per_occurrence ON ONLY pgsched_job_run USING btree (schedule_id, scheduled_for) WHERE (schedule_id IS NOT NULL);

-- pgsched_run_by_queue_idx
CREATE INDEX pgsched_run_by_queue_idx ON ONLY pgsched_job_run USING btree (queue, scheduled_for, id) WHERE (NOT ((queue)::text = 'default'::text));

-- pgsched_run_claim_order_idx
CREATE INDEX pgsched_run_claim_order_idx ON ONLY pgsched_job_run USING btree ((((priority)::smallint * '-1'::integer)), fire_after, id) WHERE ((status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text]));

-- pgsched_run_claimable_idx
CREATE INDEX pgsched_run_claimable_idx ON ONLY pgsched_job_run USING btree (fire_after, id) WHERE ((status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text]));

-- pgsched_run_exclusive_idx
CREATE INDEX pgsched_run_exclusive_idx ON ONLY pgsched_job_run USING btree (schedule_id, finished_at) WHERE (overlap IS NOT NULL);

-- pgsched_run_guarded_idx
CREATE INDEX pgsched_run_guarded_idx ON ONLY pgsched_job_run USING btree ((((priority)::smallint * '-1'::integer)), fire_after, id) WHERE (((status)::text = ANY ((ARRAY['pending'::character varying, 'retrying'::character varying])::text[])) AND ((overlap IS NOT NULL) OR (start_by IS NOT NULL)));

-- pgsched_run_http_destination_idx
CREATE INDEX pgsched_run_http_destination_idx ON ONLY pgsched_job_run USING btree (tenant, pgsched_http_destination(((kwargs)::jsonb ->> 'url'::text)), fire_after) WHERE (((job)::text = 'pgsched.http'::text) AND ((status)::text = ANY (ARRAY[('pending'::character varying)::text, ('retrying'::character varying)::text])));

-- pgsched_run_one_off_idx
CREATE INDEX pgsched_run_one_off_idx ON ONLY pgsched_job_run USING btree (schedule_name, scheduled_for, id) WHERE (schedule_id IS NULL);

-- pgsched_run_recent_idx
CREATE INDEX pgsched_run_recent_idx ON ONLY pgsched_job_run USING btree (scheduled_for, id);

-- pgsched_run_running_idx
CREATE INDEX pgsched_run_running_idx ON ONLY pgsched_job_run USING btree (started_at) WHERE ((status)::text = 'running'::text);

-- pgsched_run_tenant_idx
CREATE INDEX pgsched_run_tenant_idx ON ONLY pgsched_job_run USING btree (tenant, scheduled_for, id) WHERE (NOT ((tenant)::text = ''::text));

-- pgsched_run_unsuccessful_idx
CREATE INDEX pgsched_run_unsuccessful_idx ON ONLY pgsched_job_run USING btree (scheduled_for, id) WHERE ((status)::text = ANY (ARRAY[('failed'::character varying)::text, ('cancelled'::character varying)::text]));

-- pgsched_schedule_due_idx
CREATE INDEX pgsched_schedule_due_idx ON pgsched_schedule USING btree (COALESCE(next_fire_at, '-infinity'::timestamp with time zone)) WHERE ((status)::text = 'active'::text);

-- pgsched_schedule_name_idx
CREATE INDEX pgsched_schedule_name_idx ON pgsched_schedule USING btree (name);

-- pgsched_skipped_last_idx
CREATE INDEX pgsched_skipped_last_idx ON pgsched_skipped_range USING btree (last);

-- pgsched_skipped_schedule_idx
CREATE INDEX pgsched_skipped_schedule_idx ON pgsched_skipped_range USING btree (schedule_id, last);

-- pgsched_tenant_held_idx
CREATE INDEX pgsched_tenant_held_idx ON pgsched_tenant USING btree (key) WHERE (paused OR (max_running IS NOT NULL));

-- pgsched_tenant_key_86e8ed83_like
CREATE INDEX pgsched_tenant_key_86e8ed83_like ON pgsched_tenant USING btree (key varchar_pattern_ops);
