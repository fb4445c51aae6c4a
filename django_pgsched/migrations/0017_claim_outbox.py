"""The claim outbox (``PGSCHED["CLAIMS"]``, transport ``nats``): table and disabled triggers.

The triggers write an outbox row whenever a run becomes claimable; they are
created disabled, so a deployment on the default ``postgres`` transport pays
nothing for them. A ``nats`` replica enables them at start
(``django_pgsched.broker.schema``).
"""

from django.db import migrations

TABLE = """
CREATE TABLE pgsched_claim_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id bigint NOT NULL,
    due timestamptz NOT NULL,
    queue text NOT NULL,
    tenant text NOT NULL,
    idempotency_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX pgsched_claim_outbox_due_idx ON pgsched_claim_outbox (due, id);
"""

FUNCTION = """
CREATE OR REPLACE FUNCTION pgsched_claim_outbox_add() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgsched_claim_outbox (run_id, due, queue, tenant, idempotency_key)
    VALUES (NEW.id, NEW.fire_after, NEW.queue, NEW.tenant, NEW.idempotency_key);
    RETURN NULL;
END
$$;
"""

TRIGGERS = """
CREATE TRIGGER pgsched_run_outbox_insert
    AFTER INSERT ON pgsched_job_run
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retrying'))
    EXECUTE FUNCTION pgsched_claim_outbox_add();
CREATE TRIGGER pgsched_run_outbox_update
    AFTER UPDATE OF status, fire_after ON pgsched_job_run
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retrying')
                       AND (OLD.status IS DISTINCT FROM NEW.status
                            OR OLD.fire_after IS DISTINCT FROM NEW.fire_after))
    EXECUTE FUNCTION pgsched_claim_outbox_add();
ALTER TABLE pgsched_job_run DISABLE TRIGGER pgsched_run_outbox_insert;
ALTER TABLE pgsched_job_run DISABLE TRIGGER pgsched_run_outbox_update;
"""

REVERSE = """
DROP TRIGGER IF EXISTS pgsched_run_outbox_insert ON pgsched_job_run;
DROP TRIGGER IF EXISTS pgsched_run_outbox_update ON pgsched_job_run;
DROP FUNCTION IF EXISTS pgsched_claim_outbox_add();
DROP TABLE IF EXISTS pgsched_claim_outbox;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0016_value_bounds_validate"),
    ]

    operations = [
        migrations.RunSQL(TABLE + FUNCTION + TRIGGERS, REVERSE),
    ]
