-- The domains: a bound on one column is a CHECK of its column's domain, evaluated
-- where the value is written (planned once per session, never per statement).
-- Loaded by migration 0001_initial, in this order: domains, functions, tables,
-- indexes, triggers, grants.

-- pgsched_run_attempts
CREATE DOMAIN pgsched_run_attempts AS smallint
	CONSTRAINT pgsched_run_attempts_range CHECK (((VALUE >= 0) AND (VALUE <= 8)));

-- pgsched_run_kwargs
CREATE DOMAIN pgsched_run_kwargs AS jsonb
	CONSTRAINT pgsched_run_json_readable CHECK (((VALUE IS NULL) OR ((NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}'::jsonpath)) AND (NOT jsonb_path_exists(VALUE, 'strict $.**?(@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))'::jsonpath)))))
	CONSTRAINT pgsched_run_kwargs_object CHECK (((jsonb_typeof(VALUE) = 'object'::text) AND (octet_length((VALUE)::text) <= 1048576)));

-- pgsched_run_max_attempts
CREATE DOMAIN pgsched_run_max_attempts AS smallint
	CONSTRAINT pgsched_run_max_attempts_range CHECK (((VALUE >= 1) AND (VALUE <= 8)));

-- pgsched_run_overlap
CREATE DOMAIN pgsched_run_overlap AS character varying(16)
	CONSTRAINT pgsched_run_overlap_valid CHECK (((VALUE IS NULL) OR ((VALUE)::text = ANY (ARRAY['skip'::text, 'buffer_one'::text]))));

-- pgsched_run_priority
CREATE DOMAIN pgsched_run_priority AS smallint
	CONSTRAINT pgsched_run_priority_range CHECK (((VALUE >= '-100'::integer) AND (VALUE <= 100)));

-- pgsched_run_return_value
CREATE DOMAIN pgsched_run_return_value AS jsonb
	CONSTRAINT pgsched_run_json_readable CHECK (((VALUE IS NULL) OR ((NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}'::jsonpath)) AND (NOT jsonb_path_exists(VALUE, 'strict $.**?(@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))'::jsonpath)))))
	CONSTRAINT pgsched_run_return_value_size CHECK (((VALUE IS NULL) OR (octet_length((VALUE)::text) <= 1048576)));

-- pgsched_run_status
CREATE DOMAIN pgsched_run_status AS character varying(16)
	CONSTRAINT pgsched_run_status_valid CHECK (((VALUE)::text = ANY (ARRAY['pending'::text, 'running'::text, 'retrying'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text, 'missed'::text])));

-- pgsched_run_task_call
CREATE DOMAIN pgsched_run_task_call AS jsonb
	CONSTRAINT pgsched_run_json_readable CHECK (((VALUE IS NULL) OR ((NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}'::jsonpath)) AND (NOT jsonb_path_exists(VALUE, 'strict $.**?(@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))'::jsonpath)))))
	CONSTRAINT pgsched_run_task_call_object CHECK (((VALUE IS NULL) OR ((jsonb_typeof(VALUE) = 'object'::text) AND (octet_length((VALUE)::text) <= 1048576))));

-- pgsched_run_tenant
CREATE DOMAIN pgsched_run_tenant AS character varying(200)
	CONSTRAINT pgsched_run_tenant_text CHECK (((VALUE)::text !~ '[\x01-\x1f\x7f]'::text));

-- pgsched_run_time
CREATE DOMAIN pgsched_run_time AS timestamp with time zone
	CONSTRAINT pgsched_run_times_range CHECK (((VALUE >= '0001-01-01 00:00:00+00'::timestamp with time zone) AND (VALUE < '10000-01-01 00:00:00+00'::timestamp with time zone)));

-- pgsched_run_timeout
CREATE DOMAIN pgsched_run_timeout AS interval
	CONSTRAINT pgsched_run_timeout_range CHECK (((VALUE >= '00:00:01'::interval) AND (VALUE <= '7 days'::interval)));

-- pgsched_schedule_kwargs
CREATE DOMAIN pgsched_schedule_kwargs AS jsonb
	CONSTRAINT pgsched_schedule_kwargs_object CHECK (((jsonb_typeof(VALUE) = 'object'::text) AND (octet_length((VALUE)::text) <= 1048576)))
	CONSTRAINT pgsched_schedule_kwargs_readable CHECK (((VALUE IS NULL) OR ((NOT jsonb_path_exists(VALUE, 'strict $.**{100 to last}'::jsonpath)) AND (NOT jsonb_path_exists(VALUE, 'strict $.**?(@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))'::jsonpath)))));

-- pgsched_schedule_tenant
CREATE DOMAIN pgsched_schedule_tenant AS character varying(200)
	CONSTRAINT pgsched_schedule_tenant_text CHECK (((VALUE)::text !~ '[\x01-\x1f\x7f]'::text));
