"""A retrying run has an attempt left: the run's CHECK says so, and the runs that had none end.

A run written ``retrying`` with ``attempts = max_attempts`` (by hand, by an import,
with the CHECKs dropped) was never claimed (the claim wants an attempt left) and
never ended: it counted in ``pgsched_runs_due_backlog`` for ever. Such runs end
``failed`` here, with a note saying why, and ``pgsched_run_attempts_within_max``
now also refuses the state (one CHECK, as before: the claim path pays per CHECK,
not per condition). The engine never writes it: a run whose last attempt fails
ends ``failed`` (``claims.Outcome.run_status``, the reaper, ``executor_defer``).
"""

from __future__ import annotations

from django.db import migrations, models

REPAIR = """
UPDATE pgsched_job_run
   SET status = 'failed',
       finished_at = coalesce(finished_at, statement_timestamp()),
       note = left('no attempt left: written retrying with ' || attempts || ' of '
                   || max_attempts || ' attempts used (ended by migration 0025)', 2000)
 WHERE status = 'retrying' AND attempts >= max_attempts;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0024_run_key_unique_by_index"),
    ]

    operations = [
        migrations.RunSQL(REPAIR, migrations.RunSQL.noop),
        migrations.RemoveConstraint(
            model_name="jobrun",
            name="pgsched_run_attempts_within_max",
        ),
        migrations.AddConstraint(
            model_name="jobrun",
            constraint=models.CheckConstraint(
                condition=models.Q(attempts__lte=models.F("max_attempts"))
                & (
                    ~models.Q(status="retrying")
                    | models.Q(attempts__lt=models.F("max_attempts"))
                ),
                name="pgsched_run_attempts_within_max",
            ),
        ),
    ]
