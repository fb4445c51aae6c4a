"""The schema of django_pgsched 0.1.0, in one migration.

The tables are made by the SQL of ``sql/`` (domains, functions, tables, indexes,
triggers, grants, loaded in that order), since Django's operations cannot make what
they hold: the domains that bound a column's values, the run history partitioned by
month, the triggers that keep the schedules, the runs and the audit in step. The
models' state is declared beside it (``state_operations``), and ``makemigrations
--check`` holds the two together. The current month of the run history and the three
ahead are made here; the replicas' upkeep makes the months after them.

``tests/integration/test_schema.py`` compares what this migration builds with the
models and the SQL files, object by object.
"""

from pathlib import Path

import datetime
import django.db.models.deletion
import django.db.models.expressions
import django.db.models.functions.datetime
import django_pgsched.models.schedules

from django.db import migrations, models

SQL = Path(__file__).with_name("sql")
ROOMS = ("domains", "functions", "tables", "indexes", "triggers", "grants")

FORWARD = "\n".join(
    [
        # a function of language sql reads tables made after it
        "SET LOCAL check_function_bodies = off;",
        *((SQL / f"{room}.sql").read_text() for room in ROOMS),
        """
-- the SECURITY DEFINER functions find their tables in the migration's schema only
-- (never a caller's temporary table of the same name)
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = current_schema()::regnamespace
                AND p.prosecdef AND p.proname LIKE 'pgsched\\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;

-- the one row of the live runs' horizon: none yet
INSERT INTO pgsched_run_horizon (live_since) VALUES (NULL);

-- the current month of the run history and the three ahead (UTC)
SELECT pgsched_create_month(
           (date_trunc('month', statement_timestamp() AT TIME ZONE 'UTC') + k * interval '1 month')
           AT TIME ZONE 'UTC')
  FROM generate_series(0, 3) k;
""",
    ]
)

REVERSE = """
DROP VIEW IF EXISTS pgsched_replica;
DROP TABLE pgsched_attempt, pgsched_job_run, pgsched_claim_outbox, pgsched_run_horizon,
           pgsched_skipped_range, pgsched_schedule_change, pgsched_breaker, pgsched_schedule,
           pgsched_tenant CASCADE;
DO $$
DECLARE
    object record;
BEGIN
    FOR object IN SELECT p.oid::regprocedure AS f FROM pg_proc p
                   WHERE p.pronamespace = current_schema()::regnamespace
                     AND p.proname LIKE 'pgsched\\_%'
    LOOP
        EXECUTE format('DROP FUNCTION %s CASCADE', object.f);
    END LOOP;
    FOR object IN SELECT t.typname FROM pg_type t
                   WHERE t.typnamespace = current_schema()::regnamespace
                     AND t.typtype = 'd' AND t.typname LIKE 'pgsched\\_%'
    LOOP
        EXECUTE format('DROP DOMAIN %I CASCADE', object.typname);
    END LOOP;
END
$$;
"""


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, REVERSE)],
            state_operations=[
                migrations.CreateModel(
                    name="Replica",
                    fields=[
                        (
                            "worker",
                            models.CharField(max_length=200, primary_key=True, serialize=False),
                        ),
                        (
                            "loops",
                            models.TextField(
                                help_text="The loops with a session open: planner, executor, ..."
                            ),
                        ),
                        ("sessions", models.IntegerField()),
                        ("connected_since", models.DateTimeField()),
                        ("address", models.TextField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "pgsched_replica",
                        "ordering": ("worker",),
                        "managed": False,
                    },
                ),
                migrations.CreateModel(
                    name="Breaker",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "tenant",
                            models.CharField(blank=True, db_default="", default="", max_length=200),
                        ),
                        ("destination", models.CharField(max_length=300)),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("closed", "closed (deliveries go through)"),
                                    ("open", "open (deliveries held back)"),
                                    ("half_open", "half-open (one probe in flight)"),
                                ],
                                db_default="closed",
                                default="closed",
                                max_length=16,
                            ),
                        ),
                        (
                            "failures",
                            models.PositiveIntegerField(
                                db_default=0, default=0, help_text="Failed deliveries in a row."
                            ),
                        ),
                        (
                            "since",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now(),
                                help_text="When the state last changed.",
                            ),
                        ),
                        (
                            "retry_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="Open: when a probe may go. Half-open: when a silent probe is given up.",
                                null=True,
                            ),
                        ),
                        (
                            "cooldown",
                            models.DurationField(
                                blank=True, help_text="The current cool-down.", null=True
                            ),
                        ),
                        ("probe_run_id", models.BigIntegerField(blank=True, null=True)),
                        (
                            "park_until",
                            models.DateTimeField(
                                blank=True,
                                help_text="Runs held back by this breaker wait until then at most.",
                                null=True,
                            ),
                        ),
                        (
                            "opened_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When it last opened (closed -> open).",
                                null=True,
                            ),
                        ),
                        (
                            "opened",
                            models.PositiveIntegerField(
                                db_default=0, default=0, help_text="Times it opened."
                            ),
                        ),
                        ("last_error", models.TextField(blank=True, db_default="", default="")),
                        ("last_failure_at", models.DateTimeField(blank=True, null=True)),
                        ("last_success_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name": "circuit breaker",
                        "db_table": "pgsched_breaker",
                        "ordering": ("tenant", "destination"),
                        "permissions": (("reset_breaker", "Can reset circuit breakers"),),
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "destination"), name="pgsched_breaker_destination"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("state__in", ["closed", "open", "half_open"])),
                                name="pgsched_breaker_state_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("state", "closed"),
                                    ("retry_at__isnull", False),
                                    _connector="OR",
                                ),
                                name="pgsched_breaker_open_has_retry_at",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Schedule",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "name",
                            models.CharField(
                                help_text="Unique within its tenant (constraint pgsched_schedule_tenant_name).",
                                max_length=200,
                            ),
                        ),
                        (
                            "job",
                            models.CharField(
                                help_text="Name of a registered @job.", max_length=200
                            ),
                        ),
                        (
                            "kwargs",
                            models.JSONField(
                                blank=True,
                                db_default={},
                                default=dict,
                                help_text="Keyword arguments (JSON object).",
                            ),
                        ),
                        (
                            "cron",
                            models.CharField(
                                blank=True,
                                help_text="5 fields (min hour dom month dow) or 6 with seconds first, read in the zone.",
                                max_length=128,
                                null=True,
                            ),
                        ),
                        (
                            "interval",
                            models.DurationField(
                                blank=True,
                                help_text="Fire every this many whole seconds (instead of cron).",
                                null=True,
                            ),
                        ),
                        (
                            "anchor",
                            models.DateTimeField(
                                blank=True,
                                help_text="Interval schedules fire at anchor + k x interval. Default: creation time.",
                                null=True,
                            ),
                        ),
                        (
                            "timezone",
                            models.CharField(
                                db_default="UTC",
                                default="UTC",
                                help_text="IANA time zone the cron fields are read in (Europe/Berlin). Cron only.",
                                max_length=64,
                            ),
                        ),
                        (
                            "dst_gap",
                            models.CharField(
                                choices=[
                                    ("shift", "shift: run at the first instant after the gap"),
                                    ("skip", "skip: do not run (counted as skipped)"),
                                ],
                                db_default="shift",
                                default="shift",
                                help_text="A wall-clock time the clocks skip (spring forward).",
                                max_length=8,
                                verbose_name="DST gap",
                            ),
                        ),
                        (
                            "dst_fold",
                            models.CharField(
                                choices=[
                                    ("first", "first: run at the first of the two instants"),
                                    ("second", "second: run at the second of the two instants"),
                                    ("both", "both: run at both instants"),
                                ],
                                db_default="first",
                                default="first",
                                help_text="A wall-clock time that happens twice (fall back).",
                                max_length=8,
                                verbose_name="DST fold",
                            ),
                        ),
                        (
                            "jitter",
                            models.DurationField(
                                db_default=datetime.timedelta(0),
                                default=datetime.timedelta(0),
                                help_text="Spread each run over [0, jitter) after its occurrence, the same on every replica; never past the next occurrence.",
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("active", "active"),
                                    ("paused", "paused"),
                                    ("broken", "broken (see last error)"),
                                ],
                                db_default="active",
                                default="active",
                                max_length=16,
                            ),
                        ),
                        ("next_fire_at", models.DateTimeField(blank=True, null=True)),
                        ("last_fire_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "misfire_policy",
                            models.CharField(
                                choices=[
                                    ("skip", "skip: run nothing that was missed"),
                                    ("latest", "latest: run the most recent missed occurrence"),
                                    (
                                        "catch_up",
                                        "catch up: run up to catch_up_limit missed occurrences",
                                    ),
                                ],
                                db_default="latest",
                                default=django_pgsched.models.schedules._default_policy,
                                max_length=16,
                            ),
                        ),
                        (
                            "catch_up_limit",
                            models.PositiveIntegerField(
                                db_default=10,
                                default=django_pgsched.models.schedules._default_catch_up_limit,
                            ),
                        ),
                        (
                            "misfire_grace",
                            models.DurationField(
                                blank=True,
                                help_text="An occurrence later than this is missed. Empty: PGSCHED['MISFIRE_GRACE'].",
                                null=True,
                            ),
                        ),
                        ("skipped_occurrences", models.BigIntegerField(db_default=0, default=0)),
                        (
                            "overlap",
                            models.CharField(
                                choices=[
                                    ("allow", "allow: runs may overlap"),
                                    (
                                        "skip",
                                        "skip: not started while the previous run is unfinished",
                                    ),
                                    (
                                        "buffer_one",
                                        "buffer one: at most one waits for the previous run",
                                    ),
                                ],
                                db_default="allow",
                                default="allow",
                                help_text="While an earlier run of this schedule is unfinished: start anyway (allow), skip the occurrence (skip), or let one wait for it (buffer_one).",
                                max_length=16,
                            ),
                        ),
                        (
                            "start_deadline",
                            models.DurationField(
                                blank=True,
                                help_text="A run not started this long after it was due ends 'missed' without running. Empty: no deadline.",
                                null=True,
                            ),
                        ),
                        (
                            "max_attempts",
                            models.PositiveSmallIntegerField(
                                blank=True, help_text="1 to 8. Empty: the job's default.", null=True
                            ),
                        ),
                        (
                            "timeout",
                            models.DurationField(
                                blank=True, help_text="Empty: the job's default.", null=True
                            ),
                        ),
                        (
                            "queue",
                            models.CharField(
                                blank=True,
                                help_text="Empty: the job's default.",
                                max_length=100,
                                null=True,
                            ),
                        ),
                        (
                            "tenant",
                            models.CharField(
                                blank=True,
                                db_default="",
                                default="",
                                help_text="Whose schedule this is (empty: no tenant). Its runs carry it too.",
                                max_length=200,
                            ),
                        ),
                        (
                            "source",
                            models.CharField(
                                db_default="database",
                                default="database",
                                editable=False,
                                help_text="'settings' for schedules declared in PGSCHED['SCHEDULES'].",
                                max_length=16,
                            ),
                        ),
                        (
                            "last_error",
                            models.TextField(blank=True, db_default="", default="", editable=False),
                        ),
                        (
                            "pause_reason",
                            models.TextField(
                                blank=True,
                                db_default="",
                                default="",
                                help_text="Why it is paused (shown to its tenant).",
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now(), editable=False
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "db_table": "pgsched_schedule",
                        "ordering": ("name",),
                        "permissions": (
                            ("pause_schedule", "Can pause and resume schedules"),
                            ("run_schedule_now", "Can run a schedule now"),
                            ("backfill_schedule", "Can backfill schedules"),
                        ),
                        "indexes": [
                            models.Index(fields=["name"], name="pgsched_schedule_name_idx")
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "name"),
                                name="pgsched_schedule_tenant_name",
                                violation_error_message="A schedule of this tenant has this name.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("cron__isnull", False), ("interval__isnull", True)),
                                    models.Q(("cron__isnull", True), ("interval__isnull", False)),
                                    _connector="OR",
                                ),
                                name="pgsched_schedule_cron_xor_interval",
                                violation_error_message="Set exactly one of cron and interval.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("status__in", ["active", "paused", "broken"])),
                                name="pgsched_schedule_status_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("misfire_policy__in", ["skip", "latest", "catch_up"])
                                ),
                                name="pgsched_schedule_policy_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("overlap__in", ["allow", "skip", "buffer_one"])
                                ),
                                name="pgsched_schedule_overlap_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("start_deadline__isnull", True),
                                    models.Q(
                                        ("start_deadline__gte", datetime.timedelta(seconds=1)),
                                        ("start_deadline__lte", datetime.timedelta(days=366)),
                                    ),
                                    _connector="OR",
                                ),
                                name="pgsched_schedule_start_deadline_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("catch_up_limit__gte", 1), ("catch_up_limit__lte", 1000)
                                ),
                                name="pgsched_schedule_catch_up_limit_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("max_attempts__isnull", True),
                                    models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 8)),
                                    _connector="OR",
                                ),
                                name="pgsched_schedule_max_attempts_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("skipped_occurrences__gte", 0)),
                                name="pgsched_schedule_skipped_non_negative",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("dst_gap__in", ["shift", "skip"])),
                                name="pgsched_schedule_dst_gap_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("dst_fold__in", ["first", "second", "both"])),
                                name="pgsched_schedule_dst_fold_valid",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("jitter__gte", datetime.timedelta(0)),
                                    ("jitter__lte", datetime.timedelta(days=1)),
                                ),
                                name="pgsched_schedule_jitter_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("cron__isnull", False), ("timezone", "UTC"), _connector="OR"
                                ),
                                name="pgsched_schedule_zone_needs_cron",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="JobRun",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("schedule_name", models.CharField(blank=True, max_length=200, null=True)),
                        ("scheduled_for", models.DateTimeField()),
                        ("idempotency_key", models.CharField(max_length=200)),
                        ("job", models.CharField(max_length=200)),
                        ("kwargs", models.JSONField(blank=True, db_default={}, default=dict)),
                        ("queue", models.CharField(max_length=100)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "pending"),
                                    ("running", "running"),
                                    ("retrying", "retrying"),
                                    ("succeeded", "succeeded"),
                                    ("failed", "failed"),
                                    ("cancelled", "cancelled"),
                                    ("missed", "missed (not started by its start deadline)"),
                                ],
                                db_default="pending",
                                default="pending",
                                max_length=16,
                            ),
                        ),
                        ("fire_after", models.DateTimeField()),
                        ("attempts", models.SmallIntegerField(db_default=0, default=0)),
                        ("max_attempts", models.SmallIntegerField()),
                        ("timeout", models.DurationField()),
                        (
                            "claimed_by",
                            models.UUIDField(
                                blank=True, help_text="Lease token of the claim.", null=True
                            ),
                        ),
                        (
                            "worker",
                            models.CharField(
                                blank=True,
                                help_text="Who holds the lease.",
                                max_length=200,
                                null=True,
                            ),
                        ),
                        ("claim_expires_at", models.DateTimeField(blank=True, null=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("note", models.TextField(blank=True, db_default="", default="")),
                        (
                            "is_backfill",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="Created by a backfill, not by the planner.",
                            ),
                        ),
                        (
                            "overlap",
                            models.CharField(
                                blank=True,
                                choices=[
                                    ("allow", "allow: runs may overlap"),
                                    (
                                        "skip",
                                        "skip: not started while the previous run is unfinished",
                                    ),
                                    (
                                        "buffer_one",
                                        "buffer one: at most one waits for the previous run",
                                    ),
                                ],
                                help_text="Its schedule's overlap policy when it was created; empty: allow.",
                                max_length=16,
                                null=True,
                            ),
                        ),
                        (
                            "start_by",
                            models.DateTimeField(
                                blank=True,
                                help_text="Its start deadline: not started by then, it ends 'missed' without running.",
                                null=True,
                            ),
                        ),
                        (
                            "tenant",
                            models.CharField(
                                blank=True,
                                db_default="",
                                default="",
                                help_text="Whose run this is (empty: no tenant); copied from the schedule when planned.",
                                max_length=200,
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now(), editable=False
                            ),
                        ),
                        (
                            "priority",
                            models.SmallIntegerField(
                                db_default=0,
                                default=0,
                                help_text="-100 to 100: among due runs of a queue, higher priorities are claimed first.",
                            ),
                        ),
                        (
                            "task_call",
                            models.JSONField(
                                blank=True,
                                editable=False,
                                help_text="For a task enqueued through django.tasks: its positional arguments, backend alias and run_after.",
                                null=True,
                            ),
                        ),
                        (
                            "return_value",
                            models.JSONField(
                                blank=True,
                                editable=False,
                                help_text="What a task returned (JSON), recorded with its succeeded attempt.",
                                null=True,
                            ),
                        ),
                        (
                            "schedule",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="runs",
                                to="pgsched.schedule",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "run",
                        "db_table": "pgsched_job_run",
                        "ordering": ("-scheduled_for", "-id"),
                        "permissions": (
                            ("retry_jobrun", "Can retry runs"),
                            ("cancel_jobrun", "Can cancel runs"),
                        ),
                    },
                ),
                migrations.CreateModel(
                    name="ScheduleChange",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
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
                        (
                            "changes",
                            models.JSONField(default=dict, help_text="{field: [before, after]}"),
                        ),
                        (
                            "at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
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
                                fields=["schedule_id", "at", "id"],
                                name="pgsched_change_schedule_idx",
                            ),
                            models.Index(fields=["at", "id"], name="pgsched_change_at_idx"),
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("action__in", ["created", "changed", "deleted"])
                                ),
                                name="pgsched_change_action_valid",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="SkippedRange",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "first",
                            models.DateTimeField(help_text="The first occurrence of the range."),
                        ),
                        (
                            "last",
                            models.DateTimeField(
                                help_text="The last occurrence of the range (inclusive)."
                            ),
                        ),
                        (
                            "count",
                            models.BigIntegerField(
                                help_text="Occurrences of the timetable in [first, last]."
                            ),
                        ),
                        (
                            "reason",
                            models.CharField(
                                choices=[
                                    ("misfire_skip", "missed: later than the grace, policy skip"),
                                    (
                                        "misfire_latest",
                                        "missed: policy latest ran only the most recent",
                                    ),
                                    ("catch_up_limit", "missed: beyond the catch-up limit"),
                                    (
                                        "dst_gap",
                                        "its local time did not exist (the clocks went forward)",
                                    ),
                                    ("paused", "the schedule was paused"),
                                    ("broken", "the schedule was broken"),
                                    (
                                        "overlap",
                                        "the previous run had not finished (overlap policy)",
                                    ),
                                    (
                                        "deadline",
                                        "not started by its start deadline (the run is missed)",
                                    ),
                                    ("tenant_paused", "its tenant was paused"),
                                ],
                                max_length=16,
                            ),
                        ),
                        (
                            "recorded_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now(), editable=False
                            ),
                        ),
                        (
                            "schedule",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="skipped_ranges",
                                to="pgsched.schedule",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "skipped range",
                        "db_table": "pgsched_skipped_range",
                        "ordering": ("schedule_id", "first"),
                    },
                ),
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "key",
                            models.CharField(
                                help_text="The tenant string of its schedules and runs.",
                                max_length=200,
                                unique=True,
                            ),
                        ),
                        (
                            "paused",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="Nothing of a paused tenant is planned or claimed; its occurrences go to the ledger (tenant_paused).",
                            ),
                        ),
                        ("pause_reason", models.TextField(blank=True, db_default="", default="")),
                        (
                            "max_schedules",
                            models.PositiveIntegerField(
                                blank=True, help_text="Empty: no limit.", null=True
                            ),
                        ),
                        (
                            "min_interval",
                            models.DurationField(
                                blank=True,
                                help_text="The shortest gap allowed between two occurrences of one schedule. Empty: no limit.",
                                null=True,
                            ),
                        ),
                        (
                            "max_running",
                            models.PositiveIntegerField(
                                blank=True,
                                help_text="Runs running at once, all replicas together.",
                                null=True,
                            ),
                        ),
                        (
                            "weight",
                            models.PositiveIntegerField(
                                db_default=1,
                                default=1,
                                help_text="Its share of claims when tenants contend.",
                            ),
                        ),
                        (
                            "allowed_jobs",
                            models.JSONField(
                                blank=True,
                                help_text="Job names the tenant may schedule (a list). Empty: PGSCHED['TENANT_DEFAULTS']['allowed_jobs'].",
                                null=True,
                            ),
                        ),
                        (
                            "updated_at",
                            models.DateTimeField(
                                auto_now=True, db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pgsched_tenant",
                        "ordering": ("key",),
                        "indexes": [
                            models.Index(
                                condition=models.Q(
                                    ("paused", True),
                                    ("max_running__isnull", False),
                                    _connector="OR",
                                ),
                                fields=["key"],
                                name="pgsched_tenant_held_idx",
                            )
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("weight__gte", 1)), name="pgsched_tenant_weight"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("min_interval__isnull", True),
                                    ("min_interval__gt", datetime.timedelta(0)),
                                    _connector="OR",
                                ),
                                name="pgsched_tenant_min_interval_positive",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("key", ""), _negated=True),
                                name="pgsched_tenant_key_not_empty",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Attempt",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "run_scheduled_for",
                            models.DateTimeField(
                                editable=False,
                                help_text="Its run's scheduled_for: the partition key, so that a month's attempts detach with its runs.",
                            ),
                        ),
                        ("number", models.PositiveSmallIntegerField()),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("succeeded", "succeeded"),
                                    ("failed", "failed"),
                                    ("timed_out", "timed out"),
                                    ("lost", "lost (lease expired)"),
                                    ("cancelled", "cancelled"),
                                    ("deferred", "deferred (try again later)"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField()),
                        (
                            "worker",
                            models.CharField(blank=True, db_default="", default="", max_length=200),
                        ),
                        ("error", models.TextField(blank=True, db_default="", default="")),
                        (
                            "detail",
                            models.JSONField(
                                blank=True,
                                help_text="What the job recorded about this attempt (an HTTP delivery's evidence).",
                                null=True,
                            ),
                        ),
                        (
                            "error_class",
                            models.CharField(
                                blank=True,
                                db_default="",
                                default="",
                                help_text="The class of the exception the attempt raised (module.QualifiedName).",
                                max_length=300,
                            ),
                        ),
                        (
                            "job_run",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                to="pgsched.jobrun",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pgsched_attempt",
                        "ordering": ("job_run_id", "number"),
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("job_run", "number", "run_scheduled_for"),
                                name="pgsched_attempt_once",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("number__gte", 1), ("number__lte", 8)),
                                name="pgsched_attempt_number_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    (
                                        "status__in",
                                        [
                                            "succeeded",
                                            "failed",
                                            "timed_out",
                                            "lost",
                                            "cancelled",
                                            "deferred",
                                        ],
                                    )
                                ),
                                name="pgsched_attempt_status_valid",
                            ),
                        ],
                    },
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("status__in", ("pending", "retrying"))),
                        fields=["fire_after", "id"],
                        name="pgsched_run_claimable_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        django.db.models.expressions.CombinedExpression(
                            models.F("priority"), "*", models.Value(-1)
                        ),
                        models.F("fire_after"),
                        models.F("id"),
                        condition=models.Q(("status__in", ("pending", "retrying"))),
                        name="pgsched_run_claim_order_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("status", "running")),
                        fields=["started_at"],
                        name="pgsched_run_running_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        fields=["scheduled_for", "id"], name="pgsched_run_recent_idx"
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("status__in", ("failed", "cancelled"))),
                        fields=["scheduled_for", "id"],
                        name="pgsched_run_unsuccessful_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("overlap__isnull", False)),
                        fields=["schedule", "finished_at"],
                        name="pgsched_run_exclusive_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        django.db.models.expressions.CombinedExpression(
                            models.F("priority"), "*", models.Value(-1)
                        ),
                        models.F("fire_after"),
                        models.F("id"),
                        condition=models.Q(
                            ("status__in", ("pending", "retrying")),
                            models.Q(
                                ("overlap__isnull", False),
                                ("start_by__isnull", False),
                                _connector="OR",
                            ),
                        ),
                        name="pgsched_run_guarded_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("queue", "default"), _negated=True),
                        fields=["queue", "scheduled_for", "id"],
                        name="pgsched_run_by_queue_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("schedule__isnull", True)),
                        fields=["schedule_name", "scheduled_for", "id"],
                        name="pgsched_run_one_off_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        models.F("tenant"),
                        django.db.models.expressions.CombinedExpression(
                            models.F("priority"), "*", models.Value(-1)
                        ),
                        models.F("fire_after"),
                        models.F("id"),
                        condition=models.Q(
                            ("status__in", ("pending", "retrying")),
                            models.Q(("tenant", ""), _negated=True),
                        ),
                        name="pgsched_run_tenant_due_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(
                            ("status", "running"), models.Q(("tenant", ""), _negated=True)
                        ),
                        fields=["tenant", "claim_expires_at"],
                        name="pgsched_run_tenant_running_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="jobrun",
                    index=models.Index(
                        condition=models.Q(("tenant", ""), _negated=True),
                        fields=["tenant", "scheduled_for", "id"],
                        name="pgsched_run_tenant_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("schedule__isnull", False)),
                        fields=("schedule", "scheduled_for"),
                        name="pgsched_one_run_per_occurrence",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key", "tenant", "scheduled_for"),
                        name="pgsched_run_idempotency_key",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "running",
                                    "retrying",
                                    "succeeded",
                                    "failed",
                                    "cancelled",
                                    "missed",
                                ],
                            )
                        ),
                        name="pgsched_run_status_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("overlap__isnull", True),
                            ("overlap__in", ("skip", "buffer_one")),
                            _connector="OR",
                        ),
                        name="pgsched_run_overlap_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("attempts__gte", 0), ("attempts__lte", 8)),
                        name="pgsched_run_attempts_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 8)),
                        name="pgsched_run_max_attempts_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("attempts__lte", models.F("max_attempts")),
                            models.Q(
                                models.Q(("status", "retrying"), _negated=True),
                                ("attempts__lt", models.F("max_attempts")),
                                _connector="OR",
                            ),
                        ),
                        name="pgsched_run_attempts_within_max",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("claim_expires_at__isnull", False),
                                ("claimed_by__isnull", False),
                                ("status", "running"),
                            ),
                            models.Q(
                                models.Q(("status", "running"), _negated=True),
                                ("claim_expires_at__isnull", True),
                                ("claimed_by__isnull", True),
                            ),
                            _connector="OR",
                        ),
                        name="pgsched_run_lease_iff_running",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("status__in", ("succeeded", "failed", "cancelled", "missed")),
                                _negated=True,
                            ),
                            ("finished_at__isnull", False),
                            _connector="OR",
                        ),
                        name="pgsched_run_terminal_has_finished_at",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="jobrun",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name="pgsched_run_priority_range",
                    ),
                ),
                migrations.AddIndex(
                    model_name="skippedrange",
                    index=models.Index(
                        fields=["schedule", "last"], name="pgsched_skipped_schedule_idx"
                    ),
                ),
                migrations.AddIndex(
                    model_name="skippedrange",
                    index=models.Index(fields=["last"], name="pgsched_skipped_last_idx"),
                ),
                migrations.AddConstraint(
                    model_name="skippedrange",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "reason__in",
                                [
                                    "misfire_skip",
                                    "misfire_latest",
                                    "catch_up_limit",
                                    "dst_gap",
                                    "paused",
                                    "broken",
                                    "overlap",
                                    "deadline",
                                    "tenant_paused",
                                ],
                            )
                        ),
                        name="pgsched_skipped_reason_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="skippedrange",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("count__gte", 1)), name="pgsched_skipped_count_positive"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="skippedrange",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("first__lte", models.F("last"))),
                        name="pgsched_skipped_ordered",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="skippedrange",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("count", 1), ("first", models.F("last"))),
                            models.Q(("count__gt", 1), ("first__lt", models.F("last"))),
                            _connector="OR",
                        ),
                        name="pgsched_skipped_one_iff_single",
                    ),
                ),
            ],
        ),
    ]
