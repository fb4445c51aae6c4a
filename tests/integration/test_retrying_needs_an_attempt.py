"""A retrying run has an attempt left (migration 0025): refused by the CHECK, repaired by it."""

from __future__ import annotations

import importlib

import pytest
from django.db import IntegrityError, connection, transaction

from django_pgsched import enqueue
from django_pgsched.models import JobRun

migration = importlib.import_module("django_pgsched.migrations.0025_retrying_has_an_attempt_left")


def test_the_database_refuses_a_retrying_run_with_no_attempt_left(db):
    run = enqueue("tests.noop", max_attempts=2)
    with connection.cursor() as cursor:  # one left: allowed
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', attempts = 1 WHERE id = %s", [run.pk]
        )
    with pytest.raises(IntegrityError, match="pgsched_run_attempts_within_max"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE pgsched_job_run SET attempts = 2 WHERE id = %s", [run.pk])


def test_migration_0025_ends_the_retrying_runs_that_had_no_attempt_left(db):
    stuck, waiting, done = (enqueue("tests.noop", max_attempts=8) for _ in range(3))
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE pgsched_job_run DROP CONSTRAINT pgsched_run_attempts_within_max"
        )
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', attempts = 8 WHERE id = %s", [stuck.pk]
        )
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', attempts = 7 WHERE id = %s",
            [waiting.pk],
        )
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'succeeded', attempts = 8,"
            " finished_at = statement_timestamp() WHERE id = %s",
            [done.pk],
        )
        (repair, _remove, add) = migration.Migration.operations
        cursor.execute(repair.sql)
    with connection.schema_editor() as editor:
        editor.add_constraint(JobRun, add.constraint)  # validates every row
    stuck.refresh_from_db()
    waiting.refresh_from_db()
    done.refresh_from_db()
    assert stuck.status == "failed" and stuck.finished_at is not None
    assert "no attempt left: written retrying with 8 of 8 attempts used" in stuck.note
    assert waiting.status == "retrying" and waiting.finished_at is None
    assert done.status == "succeeded" and done.note == ""
