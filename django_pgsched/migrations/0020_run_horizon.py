"""The live months of the run history: where the executor's claim looks.

``pgsched_run_horizon`` holds one instant, ``live_since``: the start of the oldest
month that may hold an unfinished run (pending, retrying or running). The
executor's pass (``executor_pass``) reads the months from it onwards only, so
that PostgreSQL leaves the months of finished history out of the statement when
it starts (partition pruning of a prepared statement's generic plan): a pass
with two years of monthly partitions then costs about what it costs with one
(docs/explanation/partitions.md, "Where the claim looks").

It moves both ways:

- **down**, at once, by the trigger ``pgsched_run_horizon_lower``: a run written
  or re-queued unfinished into a month before the previous one (a backfill, a
  ``run_at`` long past, a retried run of an old month) lowers it to its month in
  the writing transaction;
- **up** (or back down), by ``pgsched_run_horizon_advance()``, which every
  replica's partition upkeep calls (each ``RETENTION_INTERVAL``): the oldest month
  holding an unfinished run, never later than the start of the month before the
  one of a day ago, so that the current and previous months need no trigger at
  all (a run is nearly always written into them), even from a transaction that
  began up to a day before a month ended. A run that a longer transaction wrote
  below the horizon (or that was written with triggers disabled) is found by the
  next advance, which moves the horizon back down to it.

The advance locks the row ``FOR UPDATE`` before it reads the months; the trigger
locks it ``FOR KEY SHARE`` before it compares, so an advance waits for the
transactions that lowered (or found no need to lower) it and then sees their
runs, and a trigger that comes after waits for the advance and compares with
its result. An advance that finds the row locked leaves it as it is (the next
one does the work); nobody waits for it.
"""

from django.db import migrations

SQL = r"""
-- The first instant of AT's month (UTC), BACK months earlier.
CREATE FUNCTION pgsched_month_floor(at timestamptz, back integer) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (date_trunc('month', at AT TIME ZONE 'UTC') - make_interval(months => back))
           AT TIME ZONE 'UTC'
$$;

CREATE TABLE pgsched_run_horizon (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    live_since timestamptz  -- NULL: every month (until an upkeep has looked)
);
INSERT INTO pgsched_run_horizon (live_since) VALUES (NULL);

CREATE FUNCTION pgsched_run_horizon_lower() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- wait for an advance under way, then compare with what it wrote
    PERFORM 1 FROM pgsched_run_horizon FOR KEY SHARE;
    UPDATE pgsched_run_horizon
       SET live_since = pgsched_month_floor(NEW.scheduled_for, 0)
     WHERE live_since > NEW.scheduled_for;
    RETURN NULL;
END
$$;

-- Only for unfinished runs of a month before the previous one: the advance never
-- moves the horizon past the previous month's start, so any other write is seen.
CREATE TRIGGER pgsched_run_horizon_lower
    AFTER INSERT OR UPDATE OF status, scheduled_for ON pgsched_job_run
    FOR EACH ROW
    WHEN (NEW.status IN ('pending', 'retrying', 'running')
          AND NEW.scheduled_for < pgsched_month_floor(now(), 1))
    EXECUTE FUNCTION pgsched_run_horizon_lower();

-- The oldest month (attached, before the previous month) that holds an unfinished
-- run, or the previous month's start (a day ago); written to pgsched_run_horizon and
-- returned, whether that moves it up or back down. NULL when another session holds
-- the row (an advance, or a write lowering it): left as it is.
CREATE FUNCTION pgsched_run_horizon_advance() RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    -- the previous month's start, as it was a day ago: a transaction that began before
    -- a month's end and writes after it compared with the month before (its now())
    cap timestamptz := pgsched_month_floor(now() - interval '1 day', 1);
    current_since timestamptz;
    oldest timestamptz;
    part record;
    live boolean;
BEGIN
    SELECT live_since INTO current_since FROM pgsched_run_horizon FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- each month's own table, oldest first; its partial indexes of unfinished runs
    -- make each look a probe (a statement of its own: it sees what committed before)
    FOR part IN
        SELECT c.relname,
               (to_date(substr(c.relname, 18), 'YYYYMM')::timestamp) AT TIME ZONE 'UTC' AS month
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'pgsched_job_run'::regclass
           AND c.relname ~ '^pgsched_job_run_p[0-9]{6}$'
         ORDER BY 2
    LOOP
        EXIT WHEN part.month >= cap;
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''pending'', ''retrying''))'
            ' OR EXISTS (SELECT 1 FROM %I WHERE status = ''running'')',
            part.relname, part.relname) INTO live;
        IF live THEN
            oldest := part.month;
            EXIT;
        END IF;
    END LOOP;
    oldest := least(coalesce(oldest, cap), cap);
    IF oldest IS DISTINCT FROM current_since THEN
        UPDATE pgsched_run_horizon SET live_since = oldest;
    END IF;
    RETURN oldest;
END
$$;
"""

REVERSE = """
DROP TRIGGER IF EXISTS pgsched_run_horizon_lower ON pgsched_job_run;
DROP FUNCTION IF EXISTS pgsched_run_horizon_advance();
DROP FUNCTION IF EXISTS pgsched_run_horizon_lower();
DROP TABLE IF EXISTS pgsched_run_horizon;
DROP FUNCTION IF EXISTS pgsched_month_floor(timestamptz, integer);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0019_partitions"),
    ]

    operations = [
        migrations.RunSQL(SQL, REVERSE),
    ]
