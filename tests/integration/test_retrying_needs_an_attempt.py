"""A retrying run has an attempt left: the database refuses one with none
(``pgsched_run_attempts_within_max``)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from django_pgsched import enqueue


def test_the_database_refuses_a_retrying_run_with_no_attempt_left(db):
    run = enqueue("tests.noop", max_attempts=2)
    with connection.cursor() as cursor:  # one left: allowed
        cursor.execute(
            "UPDATE pgsched_job_run SET status = 'retrying', attempts = 1 WHERE id = %s", [run.pk]
        )
    with pytest.raises(IntegrityError, match="pgsched_run_attempts_within_max"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE pgsched_job_run SET attempts = 2 WHERE id = %s", [run.pk])
