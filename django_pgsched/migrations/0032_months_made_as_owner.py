"""The months of the run history are made with the tables' owner's privileges, by any role.

A replica that runs as the least-privileged role of ``how-to/database.md`` (no
``CREATE`` on the schema, owning nothing) could not make a month: from the first
month after those the migration made, every maintenance pass failed with
``permission denied for schema``, and once the months ran out the planner's
on-demand month (``pgsched_ensure_months``) failed too and nothing was planned.

The functions that make a month now run as the role that migrated (``SECURITY
DEFINER``, search path the schema then ``pg_temp``, as migration 0022 did for the
horizon). ``pgsched_partition_create`` and ``pgsched_partition_attach`` take a
table name, so they are now guards that refuse any table but ``pgsched_job_run``
and ``pgsched_attempt`` and then call the bodies, which are renamed ``..._body``
and only their owner may execute. Detaching and dropping months (retention) still
needs the owner: ``DETACH ... CONCURRENTLY`` cannot run inside a function.
"""

from django.db import migrations

GUARD = """
CREATE FUNCTION pgsched_partition_{step}(tbl text, month timestamptz) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF tbl IS NULL OR tbl NOT IN ('pgsched_job_run', 'pgsched_attempt') THEN
        RAISE EXCEPTION 'pgsched_partition_{step}: only the run history (pgsched_job_run, '
                        'pgsched_attempt) is partitioned by month, not %', tbl
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN pgsched_partition_{step}_body(tbl, month);
END
$$;
"""

FORWARD = (
    """
ALTER FUNCTION pgsched_partition_create(text, timestamptz)
    RENAME TO pgsched_partition_create_body;
ALTER FUNCTION pgsched_partition_attach(text, timestamptz)
    RENAME TO pgsched_partition_attach_body;
REVOKE EXECUTE ON FUNCTION pgsched_partition_create_body(text, timestamptz),
                           pgsched_partition_attach_body(text, timestamptz) FROM PUBLIC;
"""
    + GUARD.format(step="create")
    + GUARD.format(step="attach")
    + """
ALTER FUNCTION pgsched_create_month(timestamptz) SECURITY DEFINER;
ALTER FUNCTION pgsched_ensure_months(timestamptz[]) SECURITY DEFINER;
-- the migration's schema, then pg_temp (never a temporary table of the caller's)
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION pgsched_partition_create(text, timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION pgsched_partition_attach(text, timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION pgsched_create_month(timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION pgsched_ensure_months(timestamptz[])'
                   ' SET search_path = %I, pg_temp', current_schema());
END
$$;
"""
)

REVERSE = """
DROP FUNCTION pgsched_partition_create(text, timestamptz);
DROP FUNCTION pgsched_partition_attach(text, timestamptz);
ALTER FUNCTION pgsched_partition_create_body(text, timestamptz)
    RENAME TO pgsched_partition_create;
ALTER FUNCTION pgsched_partition_attach_body(text, timestamptz)
    RENAME TO pgsched_partition_attach;
GRANT EXECUTE ON FUNCTION pgsched_partition_create(text, timestamptz),
                          pgsched_partition_attach(text, timestamptz) TO PUBLIC;
ALTER FUNCTION pgsched_create_month(timestamptz) SECURITY INVOKER RESET search_path;
ALTER FUNCTION pgsched_ensure_months(timestamptz[]) SECURITY INVOKER RESET search_path;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0031_held_tenants"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, REVERSE),
    ]
