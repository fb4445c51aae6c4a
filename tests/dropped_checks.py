"""Dropping a value bound by name, wherever it stands (a test writing a row the bounds refuse).

A bound on one column is a constraint of that column's domain (``domains.sql``),
and one name may stand on several domains (``pgsched_run_times_range`` on the times'
domain and as the table's CHECK on ``scheduled_for``; ``pgsched_run_json_readable``
on each payload's domain). :func:`drop_checks_sql` drops every constraint of those
names: the tables' CHECKs (on the partitioned table, so on every month) and the
domains' constraints.
"""

from __future__ import annotations

from collections.abc import Iterable


def drop_checks_sql(names: Iterable[str]) -> str:
    listed = ", ".join(f"'{name}'" for name in names)
    return f"""
DO $drop$
DECLARE c record;
BEGIN
    FOR c IN SELECT conname, conrelid, contypid
               FROM pg_constraint
              WHERE contype = 'c' AND conname IN ({listed})
                AND (conrelid IN ('pgsched_job_run'::regclass, 'pgsched_schedule'::regclass)
                     OR contypid <> 0)
    LOOP
        IF c.contypid <> 0 THEN
            EXECUTE format('ALTER DOMAIN %s DROP CONSTRAINT %I', c.contypid::regtype, c.conname);
        ELSE
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.conrelid::regclass, c.conname);
        END IF;
    END LOOP;
END
$drop$
"""
