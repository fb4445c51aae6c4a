-- The privileges: the month bodies are the owner's alone (the guards call them);
-- every role may read the horizon of the live runs.
-- Loaded by migration 0001_initial, in this order: domains, functions, tables,
-- indexes, triggers, grants.

-- FUNCTION pgsched_partition_attach_body(tbl text, month timestamp with time zone)
REVOKE ALL ON FUNCTION pgsched_partition_attach_body(tbl text, month timestamp with time zone) FROM PUBLIC;

-- FUNCTION pgsched_partition_create_body(tbl text, month timestamp with time zone)
REVOKE ALL ON FUNCTION pgsched_partition_create_body(tbl text, month timestamp with time zone) FROM PUBLIC;

-- TABLE pgsched_run_horizon
GRANT SELECT ON TABLE pgsched_run_horizon TO PUBLIC;


--
