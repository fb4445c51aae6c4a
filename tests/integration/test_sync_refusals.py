"""Declared schedules the database would refuse: named by the checks, refused by the sync.

Before: a 300-character name or an integer key passed ``check``; an empty name
was reported "unchanged" (its CHECK violation taken for another replica's
insert); ``runscheduler`` retried a ``DataError`` forever.
"""

from __future__ import annotations

from unittest import mock

import pytest
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import DataError, OperationalError, connection
from django.test import override_settings

from django_pgsched.engine.runner import Runner
from django_pgsched.management.commands.runscheduler import Command
from django_pgsched.ops.checks import check_settings
from django_pgsched.ops.sync import sync_schedules

CRON = {"job": "tests.noop", "cron": "* * * * *"}
BAD_NAMES = [("x" * 300, "at most 200 characters"), (5, "must be text"), ("", "blank")]


@pytest.mark.parametrize(("name", "text"), BAD_NAMES, ids=["300 chars", "int", "empty"])
def test_the_checks_name_a_declared_name_the_model_refuses(name, text):
    with override_settings(PGSCHED={"SCHEDULES": {name: CRON}}):
        errors = [m for m in check_settings() if m.id == "pgsched.E005"]
    assert len(errors) == 1 and text in errors[0].msg
    assert f"SCHEDULES[{name!r}"[:20] in errors[0].msg  # the key, as declared


@pytest.mark.parametrize(("name", "text"), BAD_NAMES, ids=["300 chars", "int", "empty"])
def test_the_sync_refuses_it_instead_of_calling_it_unchanged(db, name, text):
    with pytest.raises(ValidationError, match=text):
        sync_schedules({name: CRON})


def test_a_refusal_by_the_database_names_the_schedule_and_the_constraint(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE pgsched_schedule ADD CONSTRAINT test_no_forbidden"
            " CHECK (queue IS DISTINCT FROM 'forbidden')"
        )
    with pytest.raises(ValidationError) as info:
        sync_schedules({"nightly": {**CRON, "queue": "forbidden"}})
    message = info.value.messages[0]
    assert "SCHEDULES['nightly']" in message and "test_no_forbidden" in message
    sync_schedules({"nightly": CRON})
    with pytest.raises(ValidationError) as info:
        sync_schedules({"nightly": {**CRON, "queue": "forbidden"}})  # an update this time
    assert "SCHEDULES['nightly']" in info.value.messages[0]


def test_runscheduler_retries_connection_errors_and_fails_fast_on_others(db):
    runner = Runner(loops=["planner"], listen=False)
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("connection refused")
        return mock.Mock(created=[], updated=[], deleted=[])

    target = "django_pgsched.management.commands.runscheduler.sync_schedules"
    with mock.patch(target, flaky), mock.patch.object(runner.stopping, "wait"):
        Command()._sync(runner)
    assert len(calls) == 2  # retried once, then done
    refused = DataError("value too long for type character varying(200)")
    with mock.patch(target, side_effect=refused) as permanent:
        with pytest.raises(CommandError, match="value too long"):
            Command()._sync(runner)
    assert permanent.call_count == 1  # no retry
