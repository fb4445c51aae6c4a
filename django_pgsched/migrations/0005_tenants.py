"""Tenants: ``Schedule.tenant`` and ``JobRun.tenant`` (text, empty = no tenant).

Adding a column with a constant default changes only the catalog (no table
rewrite); the CHECKs below read each table once.
"""

from django.db import migrations, models

CHECKS = r"""
ALTER TABLE pgsched_schedule
    ADD CONSTRAINT pgsched_schedule_tenant_text CHECK (tenant !~ '[\x01-\x1f\x7f]');
ALTER TABLE pgsched_job_run
    ADD CONSTRAINT pgsched_run_tenant_text CHECK (tenant !~ '[\x01-\x1f\x7f]');
"""
CHECKS_REVERSE = """
ALTER TABLE pgsched_job_run DROP CONSTRAINT pgsched_run_tenant_text;
ALTER TABLE pgsched_schedule DROP CONSTRAINT pgsched_schedule_tenant_text;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("pgsched", "0004_replica_view"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="tenant",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Whose run this is (empty: no tenant); copied from the schedule when "
                "planned.",
                max_length=200,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="tenant",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Whose schedule this is (empty: no tenant). Its runs carry it too.",
                max_length=200,
            ),
        ),
        migrations.RunSQL(CHECKS, CHECKS_REVERSE),
    ]
