"""The database refuses what ``clean()`` refuses: every timestamp, duration and payload bounded.

Three functions every bound uses (and the engine's statements, to read a row
that predates the bounds without failing on it): ``pgsched_time_ok`` (a
timestamp from year 1 to 9999, UTC: what Python's ``datetime`` holds),
``pgsched_json_ok`` (JSON nested at most 100 levels, every number under
10^4300: what Python's ``json`` reads back) and ``pgsched_interval_ok`` (an
interval within bounds). They are plain SQL expressions, inlined into each
CHECK and statement.

The CHECKs are added ``NOT VALID`` here (instant: only rows written from now on
are checked); migration 0016 repairs the rows written before that break them
and validates them, outside a transaction.
"""

from django.db import migrations

FUNCTIONS = r"""
CREATE FUNCTION pgsched_time_ok(t timestamptz) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT t IS NULL
          OR (t >= '0001-01-01 00:00:00+00'::timestamptz
              AND t < '10000-01-01 00:00:00+00'::timestamptz) $$;

CREATE FUNCTION pgsched_interval_ok(d interval, lo interval, hi interval) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT d IS NULL OR (d >= lo AND d <= hi) $$;

CREATE FUNCTION pgsched_json_ok(j jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT j IS NULL
          OR (NOT jsonb_path_exists(j, 'strict $.**{100 to last}')
              AND NOT jsonb_path_exists(
                  j, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')) $$;
"""
FUNCTIONS_REVERSE = """
DROP FUNCTION pgsched_json_ok(jsonb);
DROP FUNCTION pgsched_interval_ok(interval, interval, interval);
DROP FUNCTION pgsched_time_ok(timestamptz);
"""

CHECKS = r"""
ALTER TABLE pgsched_schedule
    ADD CONSTRAINT pgsched_schedule_times_range CHECK (
        pgsched_time_ok(anchor) AND pgsched_time_ok(next_fire_at)
        AND pgsched_time_ok(last_fire_at) AND pgsched_time_ok(created_at)
        AND pgsched_time_ok(updated_at)) NOT VALID,
    ADD CONSTRAINT pgsched_schedule_durations_range CHECK (
        pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
        AND pgsched_interval_ok(misfire_grace, interval '0', interval '366 days')) NOT VALID,
    ADD CONSTRAINT pgsched_schedule_kwargs_readable CHECK (pgsched_json_ok(kwargs)) NOT VALID;
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_run_times_range CHECK (
        pgsched_time_ok(scheduled_for) AND pgsched_time_ok(fire_after)
        AND pgsched_time_ok(claim_expires_at) AND pgsched_time_ok(started_at)
        AND pgsched_time_ok(finished_at) AND pgsched_time_ok(start_by)
        AND pgsched_time_ok(created_at)) NOT VALID,
    ADD CONSTRAINT pgsched_run_timeout_range CHECK (
        pgsched_interval_ok(timeout, interval '1 second', interval '7 days')) NOT VALID,
    ADD CONSTRAINT pgsched_run_json_readable CHECK (
        pgsched_json_ok(kwargs) AND pgsched_json_ok(task_call)
        AND pgsched_json_ok(return_value)) NOT VALID;
"""
CHECKS_REVERSE = """
ALTER TABLE pgsched_job_run
    DROP CONSTRAINT pgsched_run_json_readable,
    DROP CONSTRAINT pgsched_run_timeout_range,
    DROP CONSTRAINT pgsched_run_times_range;
ALTER TABLE pgsched_schedule
    DROP CONSTRAINT pgsched_schedule_kwargs_readable,
    DROP CONSTRAINT pgsched_schedule_durations_range,
    DROP CONSTRAINT pgsched_schedule_times_range;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0014_tenant_history_index"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, FUNCTIONS_REVERSE),
        migrations.RunSQL(CHECKS, CHECKS_REVERSE),
    ]
