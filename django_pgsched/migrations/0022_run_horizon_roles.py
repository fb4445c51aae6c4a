"""The live months' functions of migration 0020, for every role and every value.

- ``pgsched_run_horizon_lower()`` (the trigger's) and ``pgsched_run_horizon_advance()``
  run with the privileges of the role that migrated (``SECURITY DEFINER``, with
  the migration's schema then ``pg_temp`` as their search path), and the executor reads the horizon through
  ``pgsched_run_horizon_since()``, one of the same kind: a role granted only the
  tables of docs/how-to/database.md ("A role without superuser") needs no grant
  on ``pgsched_run_horizon`` (without one, every pass of a replica running as such
  a role failed on it).
- The horizon never holds an instant before year 1: a run scheduled BC (written
  with its CHECKs dropped, see the poisoned-rows fault scenario) makes it NULL
  (every month) instead, which Python can read (it cannot read a year BC: each
  pass failed on it).
"""

from __future__ import annotations

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION pgsched_run_horizon_lower() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    -- wait for an advance under way, then compare with what it wrote
    PERFORM 1 FROM pgsched_run_horizon FOR KEY SHARE;
    UPDATE pgsched_run_horizon
       SET live_since = CASE WHEN NEW.scheduled_for >= '0001-01-01 00:00:00+00'
                             THEN pgsched_month_floor(NEW.scheduled_for, 0) END
     WHERE live_since > NEW.scheduled_for;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pgsched_run_horizon_advance() RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER AS $$
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
    -- each month's own table, oldest first by its bound (never by its name: a month BC
    -- is named as the same month AD); its partial indexes of unfinished runs make each
    -- look a probe (a statement of its own: it sees what committed before)
    FOR part IN
        SELECT c.relname,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                             'FROM \(''([^'']+)''\)'))[1]::timestamptz AS month
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'pgsched_job_run'::regclass
         ORDER BY 2
    LOOP
        EXIT WHEN part.month >= cap;
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %I WHERE status IN (''pending'', ''retrying''))'
            ' OR EXISTS (SELECT 1 FROM %I WHERE status = ''running'')',
            part.relname, part.relname) INTO live;
        IF live THEN
            -- its oldest unfinished run's month (the partition's own bound may not be UTC's)
            EXECUTE format(
                'SELECT pgsched_month_floor(min(scheduled_for), 0) FROM %I'
                ' WHERE status IN (''pending'', ''retrying'', ''running'')',
                part.relname) INTO oldest;
            EXIT;
        END IF;
    END LOOP;
    oldest := least(coalesce(oldest, cap), cap);
    IF oldest < '0001-01-01 00:00:00+00' THEN
        oldest := NULL;  -- a month BC (a row written past its CHECKs): every month
    END IF;
    IF oldest IS DISTINCT FROM current_since THEN
        UPDATE pgsched_run_horizon SET live_since = oldest;
    END IF;
    RETURN oldest;
END
$$;

-- what the executor's pass reads: where the live months start (NULL: every month)
CREATE FUNCTION pgsched_run_horizon_since() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER AS $$
    SELECT CASE WHEN live_since >= '0001-01-01 00:00:00+00' THEN live_since END
      FROM pgsched_run_horizon
$$;

-- the migration's schema, then pg_temp (never a temporary table of the caller's)
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pgsched_run_horizon_lower() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pgsched_run_horizon_advance() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION pgsched_run_horizon_since() SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
"""

# migration 0020's functions, as they were
REVERSE = r"""
DROP FUNCTION IF EXISTS pgsched_run_horizon_since();
CREATE OR REPLACE FUNCTION pgsched_run_horizon_lower() RETURNS trigger
LANGUAGE plpgsql SECURITY INVOKER AS $$
BEGIN
    -- wait for an advance under way, then compare with what it wrote
    PERFORM 1 FROM pgsched_run_horizon FOR KEY SHARE;
    UPDATE pgsched_run_horizon
       SET live_since = pgsched_month_floor(NEW.scheduled_for, 0)
     WHERE live_since > NEW.scheduled_for;
    RETURN NULL;
END
$$;
ALTER FUNCTION pgsched_run_horizon_lower() RESET search_path;
CREATE OR REPLACE FUNCTION pgsched_run_horizon_advance() RETURNS timestamptz
LANGUAGE plpgsql SECURITY INVOKER AS $$
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
ALTER FUNCTION pgsched_run_horizon_advance() RESET search_path;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0021_checks_without_functions"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, REVERSE),
    ]
