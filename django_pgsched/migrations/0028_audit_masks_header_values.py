"""The audit trail keeps header names, never their values.

A schedule's ``kwargs`` may carry credentials in ``headers`` (``pgsched.http``'s
``Authorization``, a cookie); the trail of changes kept every value it ever had, so a
rotated token stayed readable for as long as the trail was retained. Now a trigger on
``pgsched_schedule_change`` replaces each header's value in the recorded ``kwargs`` by
``"[masked]"`` (``"[masked: changed]"`` on the side of a change where it differs from the
other), before the row is written, whatever wrote it; the rows already there are masked
the same way. Locks: the UPDATE of the existing rows holds row locks on the changes that
carry headers, only; replicas of before run beside it unchanged.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = r"""
-- one side of a kwargs change, with its headers' values masked; "other" is the other side
CREATE FUNCTION pgsched_mask_headers(side jsonb, other jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(side) = 'object' AND jsonb_typeof(side -> 'headers') = 'object'
        THEN jsonb_set(side, '{headers}', coalesce((
            SELECT jsonb_object_agg(
                       h.key,
                       CASE WHEN other IS NULL OR jsonb_typeof(other) <> 'object'
                                 OR other -> 'headers' -> h.key IS NOT DISTINCT FROM h.value
                            THEN '"[masked]"'::jsonb
                            ELSE '"[masked: changed]"'::jsonb END)
              FROM jsonb_each(side -> 'headers') AS h), '{}'::jsonb))
        ELSE side
    END
$$;

CREATE FUNCTION pgsched_mask_change(changes jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(changes -> 'kwargs') = 'array'
        THEN jsonb_set(changes, '{kwargs}', jsonb_build_array(
                 pgsched_mask_headers(changes -> 'kwargs' -> 0, changes -> 'kwargs' -> 1),
                 pgsched_mask_headers(changes -> 'kwargs' -> 1, changes -> 'kwargs' -> 0)))
        ELSE changes
    END
$$;

CREATE FUNCTION pgsched_change_masked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changes := pgsched_mask_change(NEW.changes);
    RETURN NEW;
END $$;

CREATE TRIGGER pgsched_change_masked BEFORE INSERT OR UPDATE OF changes
    ON pgsched_schedule_change FOR EACH ROW
    WHEN (NEW.changes ? 'kwargs')
    EXECUTE FUNCTION pgsched_change_masked();

UPDATE pgsched_schedule_change
   SET changes = pgsched_mask_change(changes)
 WHERE changes ? 'kwargs' AND changes::text LIKE '%%"headers"%%';
"""

REVERSE = r"""
DROP TRIGGER pgsched_change_masked ON pgsched_schedule_change;
DROP FUNCTION pgsched_change_masked();
DROP FUNCTION pgsched_mask_change(jsonb);
DROP FUNCTION pgsched_mask_headers(jsonb, jsonb);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0027_idempotency_keys_per_tenant"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, REVERSE),
    ]
