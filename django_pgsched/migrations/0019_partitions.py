"""Monthly range partitions of ``pgsched_job_run`` (by ``scheduled_for``) and of
``pgsched_attempt`` in step (by ``run_scheduled_for``, its run's), the rows kept.

One transaction under ACCESS EXCLUSIVE locks on both tables: the rows are copied
into the new partitioned tables (one partition per calendar month, UTC, that
holds a run, and the current month and three ahead), then the indexes are built
on the filled partitions. The lock lasts as long as the copy and the index
builds: see docs/explanation/partitions.md ("Migrating a large table") for
figures and how to shorten it (trim the history first).

What changes besides the layout:

- the primary keys become ``(id, scheduled_for)`` and ``(id, run_scheduled_for)``
  (a partitioned table's unique index holds its partition key); ids stay unique
  (one identity sequence);
- ``pgsched_run_idempotency_key`` is unique within a month; the trigger
  ``pgsched_run_key_unique`` keeps a key to one run across months;
- the foreign keys from attempts to runs and from runs to schedules are replaced
  by triggers doing what they did (a foreign key on a partitioned table is one per
  month: every monthly ATTACH would lock the referenced table against writes, and
  every DROP against reads);
- ``pgsched_create_month(timestamptz)`` creates and attaches a month of both
  tables (the upkeep of django_pgsched.partitions calls its two steps).
"""

from django.db import migrations, models

FUNCTIONS = r"""
-- The month's table of TBL (pgsched_job_run or pgsched_attempt), in this schema;
-- NULL when there is none. Read from the catalog with this statement's snapshot (not
-- the relation cache), so a table another transaction just committed is seen.
CREATE FUNCTION pgsched_partition_oid(tbl text, month timestamptz) RETURNS oid
LANGUAGE sql STABLE AS $$
    SELECT c.oid FROM pg_class c
     WHERE c.relnamespace = current_schema()::regnamespace
       AND c.relname = tbl || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM')
$$;

-- Step 1: the month's table, created standalone: no lock on the partitioned table
-- beyond reading its definition. An unattached table of that name left empty (an
-- upkeep killed between its two steps) is made anew, with the current columns and
-- CHECKs. False when the month was attached already.
CREATE FUNCTION pgsched_partition_create(tbl text, month timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    start timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    suffix text := '_p' || to_char(start AT TIME ZONE 'UTC', 'YYYYMM');
    part text := tbl || suffix;
    orphan oid := pgsched_partition_oid(tbl, start);
    sch text := current_schema();  -- never pg_temp (a test's table may shadow the name)
    empty boolean;
    idx record;
BEGIN
    IF orphan IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = orphan) THEN
            RETURN false;  -- attached already
        END IF;
        EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM %I.%I)', sch, part) INTO empty;
        IF NOT empty THEN
            RETURN true;  -- rows of its own (kept detached?): attach it as it is, or fail
        END IF;
        EXECUTE format('DROP TABLE %I.%I', sch, part);
    END IF;
    EXECUTE format(
        'CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
        sch, part, sch, tbl);
    IF tbl = 'pgsched_job_run' THEN
        -- runs churn: room on each page for HOT lease renewals, early vacuum
        EXECUTE format('ALTER TABLE %I.%I SET (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02,'
                       ' autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)',
                       sch, part);
    END IF;
    -- The partitioned table's indexes, named after theirs (pgsched_run_recent_idx_p202612:
    -- a plan says which index it reads), built on the empty table; ATTACH adopts them.
    FOR idx IN
        SELECT c.relname AS name, pg_get_indexdef(i.indexrelid) AS def,
               k.conname, pg_get_constraintdef(k.oid) AS condef
          FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.contype IN ('p', 'u')
                                   AND k.conrelid = i.indrelid
         WHERE i.indrelid = format('%I.%I', sch, tbl)::regclass
    LOOP
        IF idx.conname IS NOT NULL THEN
            EXECUTE format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s',
                           sch, part, left(idx.conname, 55) || suffix, idx.condef);
        ELSE
            EXECUTE regexp_replace(idx.def, '^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ ',
                                   'CREATE \1INDEX ' || quote_ident(left(idx.name, 55) || suffix)
                                   || ' ON ' || quote_ident(sch) || '.' || quote_ident(part)
                                   || ' ');
        END IF;
    END LOOP;
    RETURN true;
END $$;

-- Step 2: attach it. ATTACH takes SHARE UPDATE EXCLUSIVE on the partitioned table
-- (claims, inserts and updates go on) and, for the foreign key it copies, SHARE ROW
-- EXCLUSIVE on pgsched_schedule (a planner's update waits, at most lock_timeout).
-- The table is empty, so checking its rows against the bounds costs nothing.
-- False when it was attached already.
CREATE FUNCTION pgsched_partition_attach(tbl text, month timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    start timestamptz := date_trunc('month', month AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    part text := tbl || '_p' || to_char(start AT TIME ZONE 'UTC', 'YYYYMM');
    sch text := current_schema();
BEGIN
    IF EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = pgsched_partition_oid(tbl, start)) THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                   sch, tbl, sch, part, start,
                   (date_trunc('month', month AT TIME ZONE 'UTC') + interval '1 month')
                       AT TIME ZONE 'UTC');
    RETURN true;
END $$;

-- The month lock: whoever creates a month holds it to the end of its transaction.
CREATE FUNCTION pgsched_month_lock_key(month timestamptz) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(month AT TIME ZONE 'UTC', 'YYYYMM')::integer
$$;

-- Both steps for both tables in the caller's transaction: the way of the migration
-- and of an insert into a month that has no partition yet (pgsched_ensure_months).
-- Two transactions creating one month take turns; the second finds it made.
CREATE FUNCTION pgsched_create_month(month timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1885825, pgsched_month_lock_key(month));
    IF EXISTS (SELECT 1 FROM pg_inherits
                WHERE inhrelid = pgsched_partition_oid('pgsched_job_run', month))
       AND EXISTS (SELECT 1 FROM pg_inherits
                    WHERE inhrelid = pgsched_partition_oid('pgsched_attempt', month)) THEN
        RETURN false;
    END IF;
    PERFORM pgsched_partition_create('pgsched_job_run', month);
    PERFORM pgsched_partition_attach('pgsched_job_run', month);
    PERFORM pgsched_partition_create('pgsched_attempt', month);
    PERFORM pgsched_partition_attach('pgsched_attempt', month);
    RETURN true;
END $$;

-- The months of TIMES that have no partition get one (in the caller's transaction);
-- how many were created. Cheap when they all exist: a catalog lookup per month.
CREATE FUNCTION pgsched_ensure_months(times timestamptz[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m timestamptz;
    created integer := 0;
BEGIN
    FOR m IN SELECT DISTINCT date_trunc('month', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
               FROM unnest(times) t WHERE t IS NOT NULL AND isfinite(t) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_inherits
                        WHERE inhrelid = pgsched_partition_oid('pgsched_job_run', m))
           OR NOT EXISTS (SELECT 1 FROM pg_inherits
                           WHERE inhrelid = pgsched_partition_oid('pgsched_attempt', m)) THEN
            IF pgsched_create_month(m) THEN
                created := created + 1;
            END IF;
        END IF;
    END LOOP;
    RETURN created;
END $$;
"""

FUNCTIONS_REVERSE = """
DROP FUNCTION pgsched_ensure_months(timestamptz[]);
DROP FUNCTION pgsched_create_month(timestamptz);
DROP FUNCTION pgsched_month_lock_key(timestamptz);
DROP FUNCTION pgsched_partition_attach(text, timestamptz);
DROP FUNCTION pgsched_partition_create(text, timestamptz);
DROP FUNCTION pgsched_partition_oid(text, timestamptz);
"""

# Indexes with a unique guarantee are defined here (they must hold the partition
# key); every other index of the old tables is recreated as it was, by name.
CONVERT = r"""
LOCK TABLE pgsched_job_run, pgsched_attempt IN ACCESS EXCLUSIVE MODE;

CREATE TEMPORARY TABLE pgsched_saved_index ON COMMIT DROP AS
SELECT tablename, indexdef
  FROM pg_indexes
 WHERE schemaname = current_schema()
   AND tablename IN ('pgsched_job_run', 'pgsched_attempt')
   AND indexname NOT IN ('pgsched_job_run_pkey', 'pgsched_run_idempotency_key',
                         'pgsched_one_run_per_occurrence', 'pgsched_attempt_pkey',
                         'pgsched_attempt_once');

-- triggers of other migrations go over to the new tables, enabled or disabled as they were
CREATE TEMPORARY TABLE pgsched_saved_trigger ON COMMIT DROP AS
SELECT tgrelid::regclass::text AS tablename, tgname, pg_get_triggerdef(oid) AS def, tgenabled
  FROM pg_trigger
 WHERE tgrelid IN ('pgsched_job_run'::regclass, 'pgsched_attempt'::regclass)
   AND NOT tgisinternal;

ALTER TABLE pgsched_attempt DROP CONSTRAINT pgsched_attempt_job_run_fk;
ALTER TABLE pgsched_job_run RENAME TO pgsched_job_run_unpartitioned;
ALTER TABLE pgsched_attempt RENAME TO pgsched_attempt_unpartitioned;

-- the old tables' index and constraint names are taken again by the new tables
DO $$
DECLARE
    old record;
BEGIN
    FOR old IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                WHERE i.indrelid IN ('pgsched_job_run_unpartitioned'::regclass,
                                     'pgsched_attempt_unpartitioned'::regclass) LOOP
        EXECUTE format('ALTER INDEX %I RENAME TO %I', old.relname, left(old.relname, 50) || '_old');
    END LOOP;
END $$;
ALTER TABLE pgsched_job_run_unpartitioned RENAME CONSTRAINT pgsched_job_run_schedule_fk
    TO pgsched_job_run_schedule_fk_old;

CREATE TABLE pgsched_job_run (
    LIKE pgsched_job_run_unpartitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE
) PARTITION BY RANGE (scheduled_for);
CREATE TABLE pgsched_attempt (
    LIKE pgsched_attempt_unpartitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE,
    run_scheduled_for timestamptz NOT NULL
) PARTITION BY RANGE (run_scheduled_for);

ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_job_run_pkey PRIMARY KEY (id, scheduled_for),
    ADD CONSTRAINT pgsched_run_idempotency_key UNIQUE (idempotency_key, scheduled_for);
CREATE UNIQUE INDEX pgsched_one_run_per_occurrence ON pgsched_job_run (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
ALTER TABLE pgsched_attempt
    ADD CONSTRAINT pgsched_attempt_pkey PRIMARY KEY (id, run_scheduled_for),
    ADD CONSTRAINT pgsched_attempt_once UNIQUE (job_run_id, number, run_scheduled_for);

DO $$
DECLARE
    saved record;
BEGIN
    FOR saved IN SELECT * FROM pgsched_saved_index LOOP
        EXECUTE saved.indexdef;  -- on the partitioned table: built on each partition
    END LOOP;
END $$;

-- a month for every month that holds a run, and the current month and three ahead
SELECT pgsched_create_month(m)
  FROM (SELECT date_trunc('month', scheduled_for AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
          FROM pgsched_job_run_unpartitioned
        UNION
        SELECT (date_trunc('month', statement_timestamp() AT TIME ZONE 'UTC')
                + k * interval '1 month') AT TIME ZONE 'UTC'
          FROM generate_series(0, 3) k) AS months(m)
 ORDER BY m;

INSERT INTO pgsched_job_run SELECT * FROM pgsched_job_run_unpartitioned;
INSERT INTO pgsched_attempt SELECT a.*, r.scheduled_for
  FROM pgsched_attempt_unpartitioned a
  JOIN pgsched_job_run_unpartitioned r ON r.id = a.job_run_id;

SELECT setval(pg_get_serial_sequence('pgsched_job_run', 'id'),
              greatest((SELECT max(id) FROM pgsched_job_run_unpartitioned), 1),
              (SELECT max(id) IS NOT NULL FROM pgsched_job_run_unpartitioned));
SELECT setval(pg_get_serial_sequence('pgsched_attempt', 'id'),
              greatest((SELECT max(id) FROM pgsched_attempt_unpartitioned), 1),
              (SELECT max(id) IS NOT NULL FROM pgsched_attempt_unpartitioned));

DROP TABLE pgsched_attempt_unpartitioned;
DROP TABLE pgsched_job_run_unpartitioned;
ALTER SEQUENCE pgsched_job_run_id_seq1 RENAME TO pgsched_job_run_id_seq;
ALTER SEQUENCE pgsched_attempt_id_seq1 RENAME TO pgsched_attempt_id_seq;

DO $$
DECLARE
    saved record;
BEGIN
    FOR saved IN SELECT * FROM pgsched_saved_trigger LOOP
        EXECUTE saved.def;  -- "ON public.pgsched_job_run": the partitioned table now
        IF saved.tgenabled = 'D' THEN
            EXECUTE format('ALTER TABLE %I DISABLE TRIGGER %I', saved.tablename, saved.tgname);
        END IF;
    END LOOP;
END $$;

-- A run's schedule, without a foreign key: on a partitioned table a foreign key is one
-- per month, and attaching a month would lock pgsched_schedule against the planners'
-- writes, dropping one against every read of it. These two triggers do what
-- pgsched_job_run_schedule_fk did: a run names an existing schedule (locked FOR KEY
-- SHARE, as the foreign key's check did), and a deleted schedule's runs keep their
-- history with schedule_id NULL (ON DELETE SET NULL).
CREATE FUNCTION pgsched_run_schedule_exists() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM pgsched_schedule WHERE id = NEW.schedule_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "pgsched_job_run" violates foreign key '
                        'constraint "pgsched_job_run_schedule_fk"'
              USING ERRCODE = 'foreign_key_violation',
                    CONSTRAINT = 'pgsched_job_run_schedule_fk',
                    DETAIL = format('Key (schedule_id)=(%s) is not present in table '
                                    '"pgsched_schedule".', NEW.schedule_id);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pgsched_run_schedule_exists BEFORE INSERT OR UPDATE OF schedule_id
    ON pgsched_job_run FOR EACH ROW WHEN (NEW.schedule_id IS NOT NULL)
    EXECUTE FUNCTION pgsched_run_schedule_exists();
CREATE FUNCTION pgsched_schedule_release_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgsched_job_run r SET schedule_id = NULL FROM gone g WHERE r.schedule_id = g.id;
    RETURN NULL;
END $$;
CREATE TRIGGER pgsched_schedule_release_runs AFTER DELETE ON pgsched_schedule
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION pgsched_schedule_release_runs();

-- A run's attempts go with it (what ON DELETE CASCADE did).
CREATE FUNCTION pgsched_run_delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM pgsched_attempt a
     USING gone g
     WHERE a.job_run_id = g.id AND a.run_scheduled_for = g.scheduled_for;
    RETURN NULL;
END $$;
CREATE TRIGGER pgsched_run_delete_attempts AFTER DELETE ON pgsched_job_run
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
    EXECUTE FUNCTION pgsched_run_delete_attempts();

-- A run moved to another time (an UPDATE of scheduled_for: another month, maybe) takes
-- its attempts along: they are found, and detached, by their run's scheduled_for.
CREATE FUNCTION pgsched_run_move_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgsched_attempt
       SET run_scheduled_for = NEW.scheduled_for
     WHERE job_run_id = OLD.id AND run_scheduled_for = OLD.scheduled_for;
    RETURN NEW;
END $$;
CREATE TRIGGER pgsched_run_move_attempts BEFORE UPDATE OF scheduled_for ON pgsched_job_run
    FOR EACH ROW WHEN (OLD.scheduled_for IS DISTINCT FROM NEW.scheduled_for)
    EXECUTE FUNCTION pgsched_run_move_attempts();

-- An idempotency key names one run across all months. Unique (idempotency_key,
-- scheduled_for) covers a month; a key is checked against the other months under
-- an advisory lock on the key's hash (1024 of them), so two transactions inserting it
-- at once into two months take turns and the second sees the first (READ COMMITTED: each statement
-- of this function reads with a new snapshot). A key the planner and the backfill
-- derive from the run itself ('pgsched:<schedule id>:<scheduled_for>') names
-- exactly one (schedule, time), so the occurrence index guards it without a check;
-- that shape is refused for any other run.
CREATE FUNCTION pgsched_run_key_unique() RETURNS trigger LANGUAGE plpgsql AS $$
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
        RETURN NEW;  -- the key stays with this run (a move to another month)
    END IF;
    -- one of 1024 locks (a bulk insert of many keys takes at most that many, not one each)
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
CREATE TRIGGER pgsched_run_key_unique BEFORE INSERT OR UPDATE OF idempotency_key, scheduled_for
    ON pgsched_job_run FOR EACH ROW EXECUTE FUNCTION pgsched_run_key_unique();

ANALYZE pgsched_job_run;
ANALYZE pgsched_attempt;
"""

# Back to one table each (rows kept; months no longer matter).
CONVERT_REVERSE = r"""
LOCK TABLE pgsched_job_run, pgsched_attempt IN ACCESS EXCLUSIVE MODE;
CREATE TEMPORARY TABLE pgsched_saved_index ON COMMIT DROP AS
SELECT tablename, indexdef
  FROM pg_indexes
 WHERE schemaname = current_schema()
   AND tablename IN ('pgsched_job_run', 'pgsched_attempt')
   AND indexname NOT IN ('pgsched_job_run_pkey', 'pgsched_run_idempotency_key',
                         'pgsched_one_run_per_occurrence', 'pgsched_attempt_pkey',
                         'pgsched_attempt_once');
CREATE TEMPORARY TABLE pgsched_saved_trigger ON COMMIT DROP AS
SELECT tgrelid::regclass::text AS tablename, tgname, pg_get_triggerdef(oid) AS def, tgenabled
  FROM pg_trigger
 WHERE tgrelid IN ('pgsched_job_run'::regclass, 'pgsched_attempt'::regclass)
   AND NOT tgisinternal AND tgparentid = 0
   AND tgname NOT IN ('pgsched_run_key_unique', 'pgsched_run_delete_attempts',
                      'pgsched_run_move_attempts', 'pgsched_run_schedule_exists');
DROP TRIGGER pgsched_schedule_release_runs ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_release_runs();
DROP TRIGGER pgsched_run_schedule_exists ON pgsched_job_run;
DROP FUNCTION pgsched_run_schedule_exists();
DROP TRIGGER pgsched_run_key_unique ON pgsched_job_run;
DROP FUNCTION pgsched_run_key_unique();
DROP TRIGGER pgsched_run_move_attempts ON pgsched_job_run;
DROP FUNCTION pgsched_run_move_attempts();
DROP TRIGGER pgsched_run_delete_attempts ON pgsched_job_run;
DROP FUNCTION pgsched_run_delete_attempts();
ALTER TABLE pgsched_job_run RENAME TO pgsched_job_run_partitioned;
ALTER TABLE pgsched_attempt RENAME TO pgsched_attempt_partitioned;
CREATE TABLE pgsched_job_run (
    LIKE pgsched_job_run_partitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE
) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE TABLE pgsched_attempt (
    LIKE pgsched_attempt_partitioned
    INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE
);
INSERT INTO pgsched_job_run SELECT * FROM pgsched_job_run_partitioned;
INSERT INTO pgsched_attempt SELECT * FROM pgsched_attempt_partitioned;
SELECT setval(pg_get_serial_sequence('pgsched_job_run', 'id'),
              greatest((SELECT max(id) FROM pgsched_job_run_partitioned), 1),
              (SELECT max(id) IS NOT NULL FROM pgsched_job_run_partitioned));
SELECT setval(pg_get_serial_sequence('pgsched_attempt', 'id'),
              greatest((SELECT max(id) FROM pgsched_attempt_partitioned), 1),
              (SELECT max(id) IS NOT NULL FROM pgsched_attempt_partitioned));
DROP TABLE pgsched_attempt_partitioned;
DROP TABLE pgsched_job_run_partitioned;
ALTER SEQUENCE pgsched_job_run_id_seq1 RENAME TO pgsched_job_run_id_seq;
ALTER SEQUENCE pgsched_attempt_id_seq1 RENAME TO pgsched_attempt_id_seq;
ALTER TABLE pgsched_attempt DROP COLUMN run_scheduled_for;
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_job_run_pkey PRIMARY KEY (id),
    ADD CONSTRAINT pgsched_run_idempotency_key UNIQUE (idempotency_key),
    ADD CONSTRAINT pgsched_job_run_schedule_fk FOREIGN KEY (schedule_id)
        REFERENCES pgsched_schedule (id) ON DELETE SET NULL DEFERRABLE INITIALLY IMMEDIATE;
CREATE UNIQUE INDEX pgsched_one_run_per_occurrence ON pgsched_job_run (schedule_id, scheduled_for)
    WHERE schedule_id IS NOT NULL;
ALTER TABLE pgsched_attempt
    ADD CONSTRAINT pgsched_attempt_pkey PRIMARY KEY (id),
    ADD CONSTRAINT pgsched_attempt_once UNIQUE (job_run_id, number),
    ADD CONSTRAINT pgsched_attempt_job_run_fk FOREIGN KEY (job_run_id)
        REFERENCES pgsched_job_run (id) ON DELETE CASCADE DEFERRABLE INITIALLY IMMEDIATE;
DO $$
DECLARE
    saved record;
BEGIN
    FOR saved IN SELECT * FROM pgsched_saved_index LOOP
        EXECUTE replace(saved.indexdef, ' ON ONLY ', ' ON ');
    END LOOP;
    FOR saved IN SELECT * FROM pgsched_saved_trigger LOOP
        EXECUTE saved.def;
        IF saved.tgenabled = 'D' THEN
            EXECUTE format('ALTER TABLE %I DISABLE TRIGGER %I', saved.tablename, saved.tgname);
        END IF;
    END LOOP;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0018_linear_triggers"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, FUNCTIONS_REVERSE),
        migrations.RunSQL(
            CONVERT,
            CONVERT_REVERSE,
            state_operations=[
                migrations.AddField(
                    model_name="attempt",
                    name="run_scheduled_for",
                    field=models.DateTimeField(
                        editable=False,
                        help_text="Its run's scheduled_for: the partition key, so that a "
                        "month's attempts detach with its runs.",
                    ),
                    preserve_default=False,
                ),
                migrations.RemoveConstraint(model_name="attempt", name="pgsched_attempt_once"),
                migrations.AddConstraint(
                    model_name="attempt",
                    constraint=models.UniqueConstraint(
                        fields=("job_run", "number", "run_scheduled_for"),
                        name="pgsched_attempt_once",
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="jobrun", name="pgsched_run_idempotency_key"
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key", "scheduled_for"),
                        name="pgsched_run_idempotency_key",
                    ),
                ),
            ],
        ),
    ]
