"""The CHECKs of 0015 validated, after repairing the rows written before them.

Outside a transaction (``atomic = False``): each statement commits on its own,
and ``VALIDATE CONSTRAINT`` lets the scheduler keep writing while it scans.

A row that breaks a bound cannot be read by Python (Django, the admin, the
engine), so it is repaired first, with what it held kept in words:

- a schedule: ``broken``, the value out of range cleared (a time or a
  duration: empty, its default; a payload: ``{}``), and ``last_error`` naming
  the field and the value it held;
- a run: its times brought into range (an unreadable ``scheduled_for`` becomes
  a distinct whole second of year 1, so the one-run-per-occurrence index
  holds), its timeout at most 7 days, an unreadable payload ``{}``; a run not
  finished ends ``failed``; its ``note`` names the fields and the values.
"""

from django.db import migrations

REPAIR_SCHEDULES = r"""
UPDATE pgsched_schedule SET
    status = 'broken',
    last_error = left('out of range, cleared by migration 0016: ' || concat_ws('; ',
        CASE WHEN NOT pgsched_time_ok(anchor) THEN 'anchor ' || anchor END,
        CASE WHEN NOT pgsched_time_ok(next_fire_at) THEN 'next_fire_at ' || next_fire_at END,
        CASE WHEN NOT pgsched_time_ok(last_fire_at) THEN 'last_fire_at ' || last_fire_at END,
        CASE WHEN NOT pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
             THEN 'timeout ' || timeout END,
        CASE WHEN NOT pgsched_interval_ok(misfire_grace, interval '0', interval '366 days')
             THEN 'misfire_grace ' || misfire_grace END,
        CASE WHEN NOT pgsched_json_ok(kwargs) THEN 'kwargs (too deep or a number too large): '
             || left(kwargs::text, 200) END), 2000),
    anchor = CASE WHEN pgsched_time_ok(anchor) THEN anchor END,
    next_fire_at = CASE WHEN pgsched_time_ok(next_fire_at) THEN next_fire_at END,
    last_fire_at = CASE WHEN pgsched_time_ok(last_fire_at) THEN last_fire_at END,
    created_at = CASE WHEN pgsched_time_ok(created_at) THEN created_at ELSE now() END,
    updated_at = CASE WHEN pgsched_time_ok(updated_at) THEN updated_at ELSE now() END,
    timeout = CASE WHEN pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
                   THEN timeout END,
    misfire_grace = CASE WHEN pgsched_interval_ok(misfire_grace, interval '0', interval '366 days')
                         THEN misfire_grace END,
    kwargs = CASE WHEN pgsched_json_ok(kwargs) THEN kwargs ELSE '{}' END
 WHERE NOT (pgsched_time_ok(anchor) AND pgsched_time_ok(next_fire_at)
            AND pgsched_time_ok(last_fire_at) AND pgsched_time_ok(created_at)
            AND pgsched_time_ok(updated_at)
            AND pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
            AND pgsched_interval_ok(misfire_grace, interval '0', interval '366 days')
            AND pgsched_json_ok(kwargs));
"""

REPAIR_RUNS = r"""
UPDATE pgsched_job_run SET
    note = left('out of range, repaired by migration 0016: ' || concat_ws('; ',
        CASE WHEN NOT pgsched_time_ok(scheduled_for) THEN 'scheduled_for ' || scheduled_for END,
        CASE WHEN NOT pgsched_time_ok(fire_after) THEN 'fire_after ' || fire_after END,
        CASE WHEN NOT pgsched_time_ok(start_by) THEN 'start_by ' || start_by END,
        CASE WHEN NOT pgsched_time_ok(started_at) THEN 'started_at ' || started_at END,
        CASE WHEN NOT pgsched_time_ok(finished_at) THEN 'finished_at ' || finished_at END,
        CASE WHEN NOT pgsched_time_ok(claim_expires_at)
             THEN 'claim_expires_at ' || claim_expires_at END,
        CASE WHEN NOT pgsched_time_ok(created_at) THEN 'created_at ' || created_at END,
        CASE WHEN NOT pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
             THEN 'timeout ' || timeout END,
        CASE WHEN NOT pgsched_json_ok(kwargs) THEN 'kwargs (too deep or a number too large): '
             || left(kwargs::text, 200) END,
        CASE WHEN NOT pgsched_json_ok(task_call) THEN 'task_call unreadable' END,
        CASE WHEN NOT pgsched_json_ok(return_value) THEN 'return_value unreadable' END
        ) || CASE WHEN note <> '' THEN '; ' || note ELSE '' END, 2000),
    status = CASE WHEN status IN ('succeeded', 'failed', 'cancelled', 'missed') THEN status
                  ELSE 'failed' END,
    finished_at = CASE WHEN finished_at IS NOT NULL AND pgsched_time_ok(finished_at)
                       THEN finished_at ELSE now() END,
    claimed_by = NULL,
    claim_expires_at = NULL,
    scheduled_for = CASE WHEN pgsched_time_ok(scheduled_for) THEN scheduled_for
                         ELSE '0001-01-01 00:00:00+00'::timestamptz
                              + make_interval(secs => id % 3000000000) END,
    fire_after = CASE WHEN pgsched_time_ok(fire_after) THEN fire_after ELSE now() END,
    start_by = CASE WHEN pgsched_time_ok(start_by) THEN start_by END,
    started_at = CASE WHEN pgsched_time_ok(started_at) THEN started_at END,
    created_at = CASE WHEN pgsched_time_ok(created_at) THEN created_at ELSE now() END,
    timeout = least(greatest(timeout, interval '1 second'), interval '7 days'),
    kwargs = CASE WHEN pgsched_json_ok(kwargs) THEN kwargs ELSE '{}' END,
    task_call = CASE WHEN pgsched_json_ok(task_call) THEN task_call END,
    return_value = CASE WHEN pgsched_json_ok(return_value) THEN return_value END
 WHERE NOT (pgsched_time_ok(scheduled_for) AND pgsched_time_ok(fire_after)
            AND pgsched_time_ok(claim_expires_at) AND pgsched_time_ok(started_at)
            AND pgsched_time_ok(finished_at) AND pgsched_time_ok(start_by)
            AND pgsched_time_ok(created_at)
            AND pgsched_interval_ok(timeout, interval '1 second', interval '7 days')
            AND pgsched_json_ok(kwargs) AND pgsched_json_ok(task_call)
            AND pgsched_json_ok(return_value));
"""

VALIDATE = """
ALTER TABLE pgsched_schedule VALIDATE CONSTRAINT pgsched_schedule_times_range;
ALTER TABLE pgsched_schedule VALIDATE CONSTRAINT pgsched_schedule_durations_range;
ALTER TABLE pgsched_schedule VALIDATE CONSTRAINT pgsched_schedule_kwargs_readable;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_times_range;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_timeout_range;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_json_readable;
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("pgsched", "0015_value_bounds"),
    ]

    # the runs first: a schedule made broken cancels its pending runs (a trigger), and
    # the run CHECKs, NOT VALID but enforced on every new row version, would refuse the
    # cancellation of a run still holding a value out of bounds
    operations = [
        migrations.RunSQL(REPAIR_RUNS, migrations.RunSQL.noop),
        migrations.RunSQL(REPAIR_SCHEDULES, migrations.RunSQL.noop),
        migrations.RunSQL(VALIDATE, migrations.RunSQL.noop),
    ]
