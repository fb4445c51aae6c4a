"""What django.tasks needs of a run (django_pgsched.tasks): a priority, the call, the return value;
and, for every attempt, the class of the exception it raised.

The new columns have constant defaults (or none), so adding them rewrites nothing. The CHECKs
are added NOT VALID and then validated: validation reads the table without blocking the
scheduler's inserts and updates, where a plain ADD CONSTRAINT would hold them all while it
scans a large history.
"""

from django.db import migrations, models

CHECKS = """
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_run_priority_range CHECK (priority BETWEEN -100 AND 100) NOT VALID,
    ADD CONSTRAINT pgsched_run_task_call_object
        CHECK (task_call IS NULL OR (jsonb_typeof(task_call) = 'object'
                                     AND octet_length(task_call::text) <= 1048576)) NOT VALID,
    ADD CONSTRAINT pgsched_run_return_value_size
        CHECK (return_value IS NULL OR octet_length(return_value::text) <= 1048576) NOT VALID;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_priority_range;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_task_call_object;
ALTER TABLE pgsched_job_run VALIDATE CONSTRAINT pgsched_run_return_value_size;
"""
CHECKS_REVERSE = """
ALTER TABLE pgsched_job_run
    DROP CONSTRAINT pgsched_run_priority_range,
    DROP CONSTRAINT pgsched_run_task_call_object,
    DROP CONSTRAINT pgsched_run_return_value_size;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0008_delivery"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="error_class",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The class of the exception the attempt raised (module.QualifiedName).",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="priority",
            field=models.SmallIntegerField(
                db_default=0,
                default=0,
                help_text="-100 to 100: among due runs of a queue, higher priorities are claimed "
                "first.",
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="return_value",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="What a task returned (JSON), recorded with its succeeded attempt.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="task_call",
            field=models.JSONField(
                blank=True,
                editable=False,
                help_text="For a task enqueued through django.tasks: its positional arguments, "
                "backend alias and run_after.",
                null=True,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name="pgsched_run_priority_range",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(CHECKS, CHECKS_REVERSE)],
        ),
    ]
