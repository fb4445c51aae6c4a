"""System checks. Ids are stable; ``docs/reference/checks.md`` lists them all.

=============  ==============================================================
pgsched.E001   ``USE_TZ`` must be True.
pgsched.E002   The scheduler's database must be PostgreSQL (14 or newer: checked
               by ``runscheduler`` and ``check --database``).
pgsched.E003   ``PGSCHED`` has an unknown key or a bad value.
pgsched.E004   The lease must outlast the timeout (``LEASE_FACTOR`` > 1) and
               the trust margin must leave room to renew.
pgsched.E005   A schedule in ``PGSCHED["SCHEDULES"]`` is invalid.
pgsched.E006   A database router sends the scheduler's models away from
               ``DATABASE_ALIAS`` (claims must go to the primary).
pgsched.E007   Failpoints (``PGSCHED_FAILPOINTS``) are set while ``DEBUG`` is off.
pgsched.E008   The unique occurrence index is missing or invalid (database check).
pgsched.W004   An active schedule went quiet: not planned, or no run started for
               two occurrences (deployment and database check: ``check --deploy
               --database default``; django_pgsched.ledger.stalls).
pgsched.E030   ``PGSCHED["CLAIMS"]`` is ``"nats"`` but ``nats-py`` (the ``nats``
               extra) is not installed.
pgsched.W003   The schedule audit trigger does not cover every column of
               ``pgsched_schedule`` (database check): changes to those columns
               alone are not recorded.
pgsched.W005   Active schedules name a job this code does not register (database
               check, at ``runscheduler``'s start): unless another replica
               registers it, their runs are stranded.
pgsched.W001   ``IDLE_IN_TRANSACTION_TIMEOUT`` is longer than the shortest
               lease, so a frozen replica could hold rows past it.
pgsched.W002   ``RETENTION`` is shorter than a day: replans could refire deleted
               occurrences.
pgsched.W006   No month of the run history is ready after the current one (database
               check): the maintenance loop has not made the months ahead.
=============  ==============================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connections, router

from .. import sqlfiles
from ..conf import Settings, get_settings
from ..partitions import layout


def _settings() -> tuple[Settings | None, list[checks.CheckMessage]]:
    try:
        return get_settings(), []
    except ImproperlyConfigured as exc:
        return None, [
            checks.Error(str(exc), hint="See docs/reference/settings.md.", id="pgsched.E003")
        ]


@checks.register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    if not getattr(django_settings, "USE_TZ", False):
        messages.append(
            checks.Error(
                "django-pgsched requires USE_TZ = True: schedules and runs are stored in UTC.",
                hint="Set USE_TZ = True in your settings.",
                id="pgsched.E001",
            )
        )
    s, errors = _settings()
    messages += errors
    if s is None:
        return messages
    if s.DATABASE_ALIAS not in connections.settings:
        messages.append(
            checks.Error(
                f"PGSCHED['DATABASE_ALIAS'] is {s.DATABASE_ALIAS!r}, which is not in DATABASES.",
                id="pgsched.E003",
            )
        )
        return messages
    vendor = connections[s.DATABASE_ALIAS].vendor
    if vendor != "postgresql":
        messages.append(
            checks.Error(
                f"django-pgsched needs PostgreSQL; database {s.DATABASE_ALIAS!r} uses {vendor!r}.",
                hint="Point PGSCHED['DATABASE_ALIAS'] at a PostgreSQL database.",
                id="pgsched.E002",
            )
        )
    if s.LEASE_FACTOR <= 1:
        messages.append(
            checks.Error(
                f"PGSCHED['LEASE_FACTOR'] is {s.LEASE_FACTOR}: a lease must be longer than the "
                "timeout it covers, or running jobs are reaped and run twice.",
                hint="Use a value above 1 (the default is 2).",
                id="pgsched.E004",
            )
        )
    if (
        s.LEASE_TRUST_MARGIN.total_seconds() * 4
        > s.DEFAULT_TIMEOUT.total_seconds() * s.LEASE_FACTOR
    ):
        messages.append(
            checks.Error(
                "PGSCHED['LEASE_TRUST_MARGIN'] is more than a quarter of the default lease "
                f"({s.DEFAULT_TIMEOUT} x {s.LEASE_FACTOR}).",
                hint="Lower the margin or raise DEFAULT_TIMEOUT.",
                id="pgsched.E004",
            )
        )
    shortest_lease = s.DEFAULT_TIMEOUT.total_seconds() * s.LEASE_FACTOR
    if s.IDLE_IN_TRANSACTION_TIMEOUT.total_seconds() > shortest_lease:
        messages.append(
            checks.Warning(
                "PGSCHED['IDLE_IN_TRANSACTION_TIMEOUT'] "
                f"({s.IDLE_IN_TRANSACTION_TIMEOUT}) is longer "
                f"than the default lease ({shortest_lease:g}s).",
                hint="Keep it short so a frozen replica cannot hold locked rows.",
                id="pgsched.W001",
            )
        )
    if s.RETENTION is not None and s.RETENTION < timedelta(days=1):
        messages.append(
            checks.Warning(
                f"PGSCHED['RETENTION'] is {s.RETENTION}: runs are the evidence that an occurrence "
                "already fired, so moving a schedule's next_fire_at back further than that would "
                "fire deleted occurrences again.",
                hint="Keep at least a day of history (the default is 30 days).",
                id="pgsched.W002",
            )
        )
    if s.TENANT_RESOLVER is not None:
        from ..history.access import load_resolver

        try:
            load_resolver(s.TENANT_RESOLVER)
        except ImproperlyConfigured as exc:
            messages.append(checks.Error(str(exc), id="pgsched.E003"))
    if s.TENANT_DEFAULTS is not None:
        from ..tenants.limits import build_defaults

        try:
            build_defaults(s.TENANT_DEFAULTS)
        except ImproperlyConfigured as exc:
            messages.append(checks.Error(str(exc), id="pgsched.E003"))
    messages += _check_schedules()
    messages += _check_routers(s)
    messages += _check_failpoints()
    messages += _check_claims(s)
    return messages


def _check_claims(s: Settings) -> list[checks.CheckMessage]:
    import importlib.util

    if s.claims.nats and importlib.util.find_spec("nats") is None:
        return [
            checks.Error(
                "PGSCHED['CLAIMS']['TRANSPORT'] is 'nats' but nats-py is not installed.",
                hint="pip install 'django-pgsched[nats]'",
                id="pgsched.E030",
            )
        ]
    return []


def _check_failpoints() -> list[checks.CheckMessage]:
    from ..engine import failpoints

    if failpoints.enabled() and not django_settings.DEBUG:
        return [
            checks.Error(
                f"{failpoints.ENV} is set: fault-injection failpoints are armed in this process.",
                hint="Failpoints are for the test suite only; unset the variable (or use DEBUG).",
                id="pgsched.E007",
            )
        ]
    return []


def _check_schedules() -> list[checks.CheckMessage]:
    from .sync import build

    s = get_settings()
    messages: list[checks.CheckMessage] = []
    for name, options in s.SCHEDULES.items():
        try:
            build(name, options)
        except ValidationError as exc:
            messages.append(checks.Error("; ".join(exc.messages), id="pgsched.E005"))
    return messages


def _check_routers(s: Settings) -> list[checks.CheckMessage]:
    from ..models import Attempt, JobRun, Schedule

    messages: list[checks.CheckMessage] = []
    for model in (Schedule, JobRun, Attempt):
        for direction, alias in (
            ("reads", router.db_for_read(model)),
            ("writes", router.db_for_write(model)),
        ):
            if alias not in (None, s.DATABASE_ALIAS):
                messages.append(
                    checks.Error(
                        f"A database router sends {direction} of {model.__name__} to {alias!r}, "
                        f"but the scheduler uses {s.DATABASE_ALIAS!r}.",
                        hint="Claims and their reads must go to the primary: route pgsched models "
                        "to PGSCHED['DATABASE_ALIAS'].",
                        id="pgsched.E006",
                    )
                )
    return messages


@checks.register(checks.Tags.database)
def check_database_version(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    s, errors = _settings()
    if s is None or not databases or s.DATABASE_ALIAS not in databases:
        return errors
    conn = connections[s.DATABASE_ALIAS]
    if conn.vendor != "postgresql":
        return []
    conn.ensure_connection()
    version = conn.pg_version  # type: ignore[attr-defined]
    if version < 140000:
        return [
            checks.Error(
                f"django-pgsched needs PostgreSQL 14 or newer; {s.DATABASE_ALIAS!r} runs "
                f"{version // 10000}.{version % 10000}.",
                id="pgsched.E002",
            )
        ]
    return (
        _check_occurrence_index(conn)
        + _check_audit_trigger(conn)
        + _check_unregistered_jobs(conn)
        + _check_partitions(conn)
    )


def _check_partitions(conn: Any) -> list[checks.CheckMessage]:
    """The months ahead: without the next month, the first runs of each month would wait for
    the planner to make it (on demand, taking locks a maintenance loop takes in advance)."""
    if "pgsched_job_run" not in conn.introspection.table_names():
        return []
    with conn.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
    state = layout.read(conn)
    if not state.complete():
        return []  # a table not partitioned: a schema not made by these migrations
    ahead = state.months_ahead(now)
    if ahead >= 1:
        return []
    return [
        checks.Warning(
            f"The run history has {max(ahead, 0)} month(s) of partitions ready after the current "
            f"one{'' if ahead >= 0 else ', and none for the current month'}.",
            hint="Run the scheduler's maintenance loop (runscheduler): it makes "
            "PGSCHED['PARTITIONS_AHEAD'] months ahead. Until then, inserts make their month "
            "when they need it.",
            id="pgsched.W006",
        )
    ]


@checks.register(checks.Tags.database, deploy=True)
def check_stalls(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """W004, a deployment check (``check --deploy --database``; not at ``runscheduler``'s start,
    when right after an outage every schedule is behind until the planner catches up)."""
    s, _errors = _settings()  # check_settings reports them
    if s is None or not databases or s.DATABASE_ALIAS not in databases:
        return []
    conn = connections[s.DATABASE_ALIAS]
    if conn.vendor != "postgresql":
        return []
    return _check_stalls(conn)


def _check_stalls(conn: Any) -> list[checks.CheckMessage]:
    """Active schedules that went quiet (:mod:`django_pgsched.ledger.stalls`)."""
    from ..ledger.stalls import stalled

    if "pgsched_schedule" not in conn.introspection.table_names():
        return []  # not migrated yet
    found = stalled(limit=11, using=conn.alias)
    if not found:
        return []
    more = " (and more)" if len(found) > 10 else ""
    return [
        checks.Warning(
            f"{len(found[:10])} active schedule(s) went quiet{more}: "
            + "; ".join(str(stall) for stall in found[:10]),
            hint="not planned: is a replica running its planner loop? no run started: look "
            "at the schedule's timeline in the admin (a run holding back an overlap policy, "
            "a queue no replica serves, a job no replica has, every run missed).",
            id="pgsched.W004",
        )
    ]


def _check_occurrence_index(conn: Any) -> list[checks.CheckMessage]:
    """The unique occurrence index is the hard guard against duplicate fires: it must be there."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisunique AND i.indisvalid AND i.indisready"
            "  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname = 'pgsched_one_run_per_occurrence'"
        )
        row = cursor.fetchone()
    if row is None:
        table_exists = "pgsched_job_run" in conn.introspection.table_names()
        if not table_exists:
            return []  # not migrated yet: migrate creates it
        problem = "is missing"
    elif not row[0]:
        problem = "is not a valid unique index (a failed concurrent build?)"
    else:
        return []
    return [
        checks.Error(
            f"The unique index pgsched_one_run_per_occurrence on pgsched_job_run {problem}; "
            "without it nothing stops a second run of the same occurrence.",
            hint="Drop an invalid one and recreate it as migrations/sql/indexes.sql does: "
            "CREATE UNIQUE INDEX pgsched_one_run_per_occurrence ON pgsched_job_run "
            "(schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL.",
            id="pgsched.E008",
        )
    ]


AUDIT_COVERAGE_SQL = sqlfiles.get("ops", "audit_coverage")


def _check_audit_trigger(conn: Any) -> list[checks.CheckMessage]:
    """The audit trigger's function names each column it compares: none may be missing."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT to_regprocedure('pgsched_schedule_after_update()') IS NOT NULL"
            " AND to_regclass('pgsched_schedule') IS NOT NULL"
        )
        if not cursor.fetchone()[0]:
            return []  # not migrated yet
        cursor.execute(AUDIT_COVERAGE_SQL)
        missing = [row[0] for row in cursor.fetchall()]
    if not missing:
        return []
    return [
        checks.Warning(
            "The schedule audit trigger does not watch column(s) "
            f"{', '.join(missing)} of pgsched_schedule: a change to only those is not recorded.",
            hint="A migration that adds a column to pgsched_schedule must run "
            "SELECT pgsched_schedule_audit_install(); (it regenerates the trigger's function).",
            id="pgsched.W003",
        )
    ]


def _check_unregistered_jobs(conn: Any) -> list[checks.CheckMessage]:
    """W005: active schedules whose job this process does not register."""
    from ..registry import all_jobs

    if "pgsched_schedule" not in conn.introspection.table_names():
        return []  # not migrated yet
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT job, count(*) FROM pgsched_schedule WHERE status = 'active'"
            " GROUP BY job ORDER BY job"
        )
        known = all_jobs()
        missing = [(job, n) for job, n in cursor.fetchall() if job not in known]
    if not missing:
        return []
    shown = ", ".join(f"{job} ({n} schedule{'s' if n != 1 else ''})" for job, n in missing[:10])
    more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
    return [
        checks.Warning(
            f"Active schedules name job(s) this code does not register: {shown}{more}. "
            "Unless another replica registers them, their runs are stranded: counted by "
            "pgsched_runs_stranded and coalesced to one per schedule after STRANDED_GRACE.",
            hint="Deploy the code that defines the job, pause or delete the schedules, or "
            "point them at a registered job.",
            id="pgsched.W005",
        )
    ]
