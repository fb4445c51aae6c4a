-- The broker's SQL (the outbox of the nats claim transport), one named block per
-- statement, read by name (django_pgsched.sqlfiles). The outbox's DDL blocks are
-- verbatim: run as one script without parameters, each kept as written.


-- name: outbox_take
-- publisher.py: the due outbox rows, locked FOR UPDATE SKIP LOCKED (replicas take
-- different rows, none waits), and whether each one's run is still claimable.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now
)
SELECT o.id, o.run_id, o.queue, o.tenant, o.idempotency_key,
       EXISTS (SELECT 1 FROM pgsched_job_run r
                WHERE r.id = o.run_id AND r.status IN ('pending', 'retrying')) AS live
  FROM pgsched_claim_outbox o, clock
 WHERE o.due <= clock.now
 ORDER BY o.due, o.id
 LIMIT %(batch)s
   FOR UPDATE OF o SKIP LOCKED;


-- name: outbox_next_due
-- publisher.py: seconds until the next outbox row falls due (NULL: none).
SELECT extract(epoch FROM min(due) - clock_timestamp()) FROM pgsched_claim_outbox;


-- name: outbox_delete
-- publisher.py: the rows published (or no longer claimable), in the transaction that
-- took them.
DELETE FROM pgsched_claim_outbox WHERE id = ANY(%(ids)s);


-- name: outbox_lag
-- publisher.py (outbox_lag()): how long the oldest due row has waited, in seconds, and
-- how many rows are due.
SELECT coalesce(extract(epoch FROM clock_timestamp() - min(due)), 0),
       count(*)
  FROM pgsched_claim_outbox
 WHERE due <= clock_timestamp();


-- name: outbox_table verbatim
-- schema.py: the outbox (as the migration makes it), if missing.
CREATE TABLE IF NOT EXISTS pgsched_claim_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id bigint NOT NULL,
    due timestamptz NOT NULL,
    queue text NOT NULL,
    tenant text NOT NULL,
    idempotency_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX IF NOT EXISTS pgsched_claim_outbox_due_idx ON pgsched_claim_outbox (due, id);


-- name: outbox_function verbatim
-- schema.py: the triggers' function: one outbox row for the run.
CREATE OR REPLACE FUNCTION pgsched_claim_outbox_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgsched_claim_outbox (run_id, due, queue, tenant, idempotency_key)
    VALUES (NEW.id, NEW.fire_after, NEW.queue, NEW.tenant, NEW.idempotency_key);
    RETURN NULL;
END
$$;


-- name: outbox_triggers verbatim
-- schema.py: one trigger per event: a WHEN clause of an INSERT trigger cannot name OLD.
-- Both are evaluated in C before any PL/pgSQL runs: a claim, a renewal or a completion
-- does not call the function. Their names are schema.TRIGGER_NAMES.
CREATE OR REPLACE TRIGGER pgsched_run_outbox_insert
    AFTER INSERT ON pgsched_job_run
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retrying'))
    EXECUTE FUNCTION pgsched_claim_outbox_add();
CREATE OR REPLACE TRIGGER pgsched_run_outbox_update
    AFTER UPDATE OF status, fire_after ON pgsched_job_run
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retrying')
                       AND (OLD.status IS DISTINCT FROM NEW.status
                            OR OLD.fire_after IS DISTINCT FROM NEW.fire_after))
    EXECUTE FUNCTION pgsched_claim_outbox_add();


-- name: outbox_state
-- schema.py: how many of the two triggers (%s: their names) exist on pgsched_job_run,
-- and how many of them are enabled.
SELECT count(*) FILTER (WHERE tgenabled <> 'D') AS enabled, count(*) AS present
  FROM pg_trigger
 WHERE tgrelid = 'pgsched_job_run'::regclass AND tgname = ANY(%s) AND tgparentid = 0;
