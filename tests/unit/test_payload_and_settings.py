"""Payload validation, settings parsing and the job registry: no database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from django_pgsched.conf import Settings, build_settings
from django_pgsched.payload import validate_kwargs
from django_pgsched.registry import get_job, job, require_job


def check(value, **limits):
    return validate_kwargs(
        value, max_bytes=limits.get("max_bytes", 65536), max_depth=limits.get("max_depth", 32)
    )


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"x": float("nan")}, "NaN/Infinity"),
        ({"x": float("inf")}, "NaN/Infinity"),
        ({"x": "a\x00b"}, "NUL characters"),
        ({"x\x00": 1}, "NUL characters"),
        ({"x": "\ud800"}, "unpaired surrogate"),
        ({"x": {1, 2}}, "set at .x is not a JSON type"),
        ({"x": b"bytes"}, "bytes at .x is not a JSON type"),
        ({"x": __import__("decimal").Decimal("1.5")}, "Decimal"),
        ({"x": "y" * 70000}, "exceeds the limit of 65,536 bytes"),
        (nested(40), "nesting deeper than 32"),
        ([1, 2], "must be a JSON object"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "must be JSON"),
        ({"class": 1}, "not a valid keyword-argument name"),
        ({"not valid": 1}, "not a valid keyword-argument name"),
        ({str(i): i for i in range(1001)}, "more than 1000 keys"),
    ],
)
def test_bad_payloads_are_rejected_with_a_clear_message(value, message):
    with pytest.raises(ValidationError) as info:
        check(value)
    assert message in info.value.messages[0]
    assert info.value.messages[0].startswith("payload:")


def test_good_payloads():
    assert check({"a": [1, 2.5, None, True, {"b": "ü"}]}) == {"a": [1, 2.5, None, True, {"b": "ü"}]}
    assert check('{"n": 1}') == {"n": 1}
    assert check(None) == {}


def test_settings_defaults_and_durations():
    s = build_settings({"PLANNER_LOOKAHEAD": 10, "SHUTDOWN_GRACE": timedelta(seconds=3)})
    assert s.PLANNER_LOOKAHEAD == timedelta(seconds=10)
    assert s.SHUTDOWN_GRACE == timedelta(seconds=3)
    assert s.PLANNER_BATCH == Settings().PLANNER_BATCH == 500


def test_job_connection_max_age_defaults_to_a_minute_and_may_be_none_or_zero():
    assert Settings().JOB_CONNECTION_MAX_AGE == timedelta(seconds=60)
    assert build_settings({"JOB_CONNECTION_MAX_AGE": None}).JOB_CONNECTION_MAX_AGE is None
    assert build_settings({"JOB_CONNECTION_MAX_AGE": 0}).JOB_CONNECTION_MAX_AGE == timedelta(0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"PLANER_BATCH": 5}, "unknown key(s) 'PLANER_BATCH'"),
        ({"PLANNER_BATCH": 0}, "PLANNER_BATCH"),
        ({"PLANNER_BATCH": "500"}, "PLANNER_BATCH"),
        ({"PLANNER_INTERVAL": -1}, "must be positive"),
        ({"PLANNER_INTERVAL": "1s"}, "expected a timedelta or a number of seconds"),
        ({"MISFIRE_GRACE": float("nan")}, "not a finite duration"),
        ({"DEFAULT_MISFIRE_POLICY": "all"}, "is not one of skip, latest, catch_up"),
        ({"DEFAULT_MAX_ATTEMPTS": 9}, "from 1 to 8"),
        ({"LISTEN": "yes"}, "LISTEN"),
        ({"JOB_CONNECTION_MAX_AGE": -1}, "PGSCHED['JOB_CONNECTION_MAX_AGE']: must not be negative"),
        ({"JOB_CONNECTION_MAX_AGE": "60"}, "expected a timedelta or a number of seconds"),
    ],
)
def test_bad_settings_are_rejected(raw, message):
    with pytest.raises(ImproperlyConfigured, match=__import__("re").escape(message)):
        build_settings(raw)


def test_job_decorator_registers_defaults():
    @job(name="unit.sample", timeout=timedelta(seconds=9), max_attempts=2, queue="q1")
    def sample(**kwargs):
        return None

    spec = get_job("unit.sample")
    assert spec is not None and spec.func is sample
    assert (spec.timeout, spec.max_attempts, spec.queue) == (timedelta(seconds=9), 2, "q1")


def test_job_default_name_is_module_and_qualname():
    @job
    def plain(**kwargs):
        return None

    assert get_job(f"{__name__}.test_job_default_name_is_module_and_qualname.<locals>.plain")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": "bad name"}, "not a valid job name"),
        ({"max_attempts": 9}, "from 1 to 8"),
        ({"timeout": timedelta(0)}, "between 1 second and 7 days"),
        ({"queue": ""}, "not a valid queue name"),
    ],
)
def test_job_decorator_rejects_bad_options(options, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        job(**options)(lambda **kw: None)


def test_takes_context_needs_a_positional_parameter():
    with pytest.raises(ImproperlyConfigured, match="first positional argument"):
        job(name="unit.ctx", takes_context=True)(lambda **kw: None)


def test_two_functions_cannot_share_a_name():
    job(name="unit.dup")(lambda **kw: None)
    with pytest.raises(ImproperlyConfigured, match="registered twice"):

        @job(name="unit.dup")
        def other(**kwargs):
            return None


def test_unknown_job_is_a_validation_error_naming_it():
    with pytest.raises(ValidationError, match=r"unknown job 'os\.system'"):
        require_job("os.system")
