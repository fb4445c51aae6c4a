"""The audit trail of schedule changes: ``pgsched_schedule_change`` and its trigger.

A row-level trigger records every insert, update and delete of
``pgsched_schedule`` with the before and after of each changed column (as
JSON), the actor from the session setting ``pgsched.actor`` (``'sql'`` when
unset), the database role and the ``application_name``.

The planner's own writes are not changes. The columns it advances are listed
once, in ``pgsched_schedule_runtime_columns()``; the update trigger's ``WHEN``
clause compares every *other* column of OLD and NEW, so a planner advance
never calls the trigger function. The ``WHEN`` clause names the columns
explicitly (that is what keeps it cheap), so it is generated from the catalog
by ``pgsched_schedule_audit_install()``: a later migration that adds a
column to ``pgsched_schedule`` calls it again (the system check
``pgsched.W003`` reports a column it does not cover).
"""

import django.db.models.functions.datetime
from django.db import migrations, models


AUDIT = r"""
-- The columns the scheduler itself writes as it runs a schedule: never audited.
CREATE FUNCTION pgsched_schedule_runtime_columns() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ARRAY['id', 'next_fire_at', 'last_fire_at', 'skipped_occurrences',
                       'updated_at', 'created_at', 'unplanned_from', 'unplanned_reason']::text[] $$;

CREATE FUNCTION pgsched_schedule_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    runtime CONSTANT text[] := pgsched_schedule_runtime_columns();
    before jsonb;
    after jsonb;
    diff jsonb;
    sid bigint;
    sname text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        after := to_jsonb(NEW) - runtime; sid := NEW.id; sname := NEW.name;
    ELSIF TG_OP = 'UPDATE' THEN
        before := to_jsonb(OLD) - runtime; after := to_jsonb(NEW) - runtime;
        sid := NEW.id; sname := NEW.name;
    ELSE
        before := to_jsonb(OLD) - runtime; sid := OLD.id; sname := OLD.name;
    END IF;
    SELECT coalesce(jsonb_object_agg(k, jsonb_build_array(before -> k, after -> k)), '{}'::jsonb)
      INTO diff
      FROM jsonb_object_keys(coalesce(after, before)) AS k
     WHERE (before -> k) IS DISTINCT FROM (after -> k)
       -- a new schedule: its set fields; a deleted one: all of them
       AND (TG_OP <> 'INSERT' OR after -> k <> 'null'::jsonb);
    IF TG_OP = 'UPDATE' AND diff = '{}'::jsonb THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgsched_schedule_change
           (schedule_id, schedule_name, action, actor, changes, at, db_user, application)
    VALUES (sid, sname,
            CASE TG_OP WHEN 'INSERT' THEN 'created' WHEN 'UPDATE' THEN 'changed' ELSE 'deleted' END,
            coalesce(nullif(current_setting('pgsched.actor', true), ''), 'sql'),
            diff, statement_timestamp(), current_user,
            coalesce(current_setting('application_name', true), ''));
    RETURN NULL;
END $$;

-- (Re)creates the update trigger with a WHEN clause over every column that is
-- not runtime state. Call it again after adding a column to pgsched_schedule.
CREATE FUNCTION pgsched_schedule_audit_install() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    old_cols text;
    new_cols text;
BEGIN
    SELECT string_agg('OLD.' || quote_ident(attname), ', ' ORDER BY attnum),
           string_agg('NEW.' || quote_ident(attname), ', ' ORDER BY attnum)
      INTO old_cols, new_cols
      FROM pg_attribute
     WHERE attrelid = 'pgsched_schedule'::regclass
       AND attnum > 0
       AND NOT attisdropped
       AND attname <> ALL (pgsched_schedule_runtime_columns());
    DROP TRIGGER IF EXISTS pgsched_schedule_audit_update ON pgsched_schedule;
    EXECUTE format(
        'CREATE TRIGGER pgsched_schedule_audit_update AFTER UPDATE ON pgsched_schedule '
        'FOR EACH ROW WHEN (ROW(%s) IS DISTINCT FROM ROW(%s)) '
        'EXECUTE FUNCTION pgsched_schedule_audit()', old_cols, new_cols);
END $$;

CREATE TRIGGER pgsched_schedule_audit_insert AFTER INSERT ON pgsched_schedule
    FOR EACH ROW EXECUTE FUNCTION pgsched_schedule_audit();
CREATE TRIGGER pgsched_schedule_audit_delete AFTER DELETE ON pgsched_schedule
    FOR EACH ROW EXECUTE FUNCTION pgsched_schedule_audit();
SELECT pgsched_schedule_audit_install();
"""
AUDIT_REVERSE = """
DROP TRIGGER IF EXISTS pgsched_schedule_audit_update ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_audit_delete ON pgsched_schedule;
DROP TRIGGER pgsched_schedule_audit_insert ON pgsched_schedule;
DROP FUNCTION pgsched_schedule_audit_install();
DROP FUNCTION pgsched_schedule_audit();
DROP FUNCTION pgsched_schedule_runtime_columns();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0005_tenants"),
    ]

    operations = [
        migrations.CreateModel(
            name="ScheduleChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "schedule_id",
                    models.BigIntegerField(
                        help_text="The schedule's id (kept after it is deleted).", null=True
                    ),
                ),
                ("schedule_name", models.CharField(max_length=200)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("created", "created"),
                            ("changed", "changed"),
                            ("deleted", "deleted"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "actor",
                    models.TextField(
                        help_text="user:<username>, 'settings sync', 'orm', a scheduler loop, or 'sql'."
                    ),
                ),
                ("changes", models.JSONField(default=dict, help_text="{field: [before, after]}")),
                ("at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("db_user", models.TextField(blank=True, db_default="", default="")),
                (
                    "application",
                    models.TextField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="The session's application_name.",
                    ),
                ),
            ],
            options={
                "verbose_name": "schedule change",
                "db_table": "pgsched_schedule_change",
                "ordering": ("-at", "-id"),
                "indexes": [
                    models.Index(
                        fields=["schedule_id", "at", "id"], name="pgsched_change_schedule_idx"
                    ),
                    models.Index(fields=["at", "id"], name="pgsched_change_at_idx"),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("action__in", ["created", "changed", "deleted"])),
                        name="pgsched_change_action_valid",
                    )
                ],
            },
        ),
        migrations.RunSQL(AUDIT, AUDIT_REVERSE),
    ]
