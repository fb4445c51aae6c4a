"""Idempotency keys are unique within a tenant, not across all of them.

Before, ``enqueue(..., idempotency_key="order-42", tenant="A")`` returned tenant B's run
(its kwargs and headers) when B had used the key first, and A could take B's predictable
keys first so that B's runs were never created. Now:

- ``pgsched_run_idempotency_key`` is ``UNIQUE (idempotency_key, tenant, scheduled_for)``
  (within a month: a partitioned table's unique index holds its partition key);
- ``pgsched_run_key_unique()`` checks the other months for the same tenant's key, under
  an advisory lock on the hash of both, and runs again when a run's tenant changes.

Locks: building the new unique index takes a SHARE lock on every month of
``pgsched_job_run`` for as long as it reads them (writes of runs wait; reads go on);
the old index is dropped after it. The rows themselves are unchanged: every pair of
runs that was unique before is unique now.
"""

from __future__ import annotations

from django.db import migrations, models

FUNCTION = r"""
CREATE OR REPLACE FUNCTION pgsched_run_key_unique() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off  -- read the key's index in every month (migration 0024)
    AS $$
BEGIN
    IF NEW.idempotency_key = 'pgsched:' || NEW.schedule_id || ':'
           || to_char(NEW.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') THEN
        RETURN NEW;
    END IF;
    IF NEW.idempotency_key ~ '^pgsched:[0-9]+:' THEN
        RAISE EXCEPTION 'idempotency key % is reserved for the occurrence it names',
                        NEW.idempotency_key
              USING ERRCODE = 'check_violation', CONSTRAINT = 'pgsched_run_key_unique';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.idempotency_key = OLD.idempotency_key
       AND NEW.tenant = OLD.tenant THEN
        RETURN NEW;  -- the key stays with this run (a move to another month)
    END IF;
    -- one of 1024 locks (a bulk insert of many keys takes at most that many, not one each)
    PERFORM pg_advisory_xact_lock(
        1885824, hashtext(NEW.tenant || chr(31) || NEW.idempotency_key) & 1023);
    IF EXISTS (SELECT 1 FROM pgsched_job_run
                WHERE idempotency_key = NEW.idempotency_key
                  AND tenant = NEW.tenant
                  AND scheduled_for <> NEW.scheduled_for) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "%"',
                        'pgsched_run_idempotency_key'
              USING ERRCODE = 'unique_violation', CONSTRAINT = 'pgsched_run_idempotency_key',
                    DETAIL = format('Key (idempotency_key, tenant)=(%s, %s) already exists in '
                                    'another month.', NEW.idempotency_key, NEW.tenant);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER pgsched_run_key_unique ON pgsched_job_run;
CREATE TRIGGER pgsched_run_key_unique
    BEFORE INSERT OR UPDATE OF idempotency_key, scheduled_for, tenant
    ON pgsched_job_run FOR EACH ROW EXECUTE FUNCTION pgsched_run_key_unique();
"""

REVERSE = r"""
CREATE OR REPLACE FUNCTION pgsched_run_key_unique() RETURNS trigger LANGUAGE plpgsql
    SET enable_seqscan = off  -- read the key's index in every month (migration 0024)
    AS $$
BEGIN
    IF NEW.idempotency_key = 'pgsched:' || NEW.schedule_id || ':'
           || to_char(NEW.scheduled_for AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') THEN
        RETURN NEW;
    END IF;
    IF NEW.idempotency_key ~ '^pgsched:[0-9]+:' THEN
        RAISE EXCEPTION 'idempotency key % is reserved for the occurrence it names',
                        NEW.idempotency_key
              USING ERRCODE = 'check_violation', CONSTRAINT = 'pgsched_run_key_unique';
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.idempotency_key = OLD.idempotency_key THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(1885824, hashtext(NEW.idempotency_key) & 1023);
    IF EXISTS (SELECT 1 FROM pgsched_job_run
                WHERE idempotency_key = NEW.idempotency_key
                  AND scheduled_for <> NEW.scheduled_for) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "%"',
                        'pgsched_run_idempotency_key'
              USING ERRCODE = 'unique_violation', CONSTRAINT = 'pgsched_run_idempotency_key',
                    DETAIL = format('Key (idempotency_key)=(%s) already exists in another month.',
                                    NEW.idempotency_key);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER pgsched_run_key_unique ON pgsched_job_run;
CREATE TRIGGER pgsched_run_key_unique BEFORE INSERT OR UPDATE OF idempotency_key, scheduled_for
    ON pgsched_job_run FOR EACH ROW EXECUTE FUNCTION pgsched_run_key_unique();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0026_drop_repeated_run_checks"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="jobrun", name="pgsched_run_idempotency_key"),
        migrations.AddConstraint(
            model_name="jobrun",
            constraint=models.UniqueConstraint(
                fields=("idempotency_key", "tenant", "scheduled_for"),
                name="pgsched_run_idempotency_key",
            ),
        ),
        migrations.RunSQL(FUNCTION, REVERSE),
    ]
