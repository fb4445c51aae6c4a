"""Failpoints are inert unless armed, and armed ones act and witness."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from django_pgsched.engine import failpoints


@pytest.fixture
def armed(monkeypatch, tmp_path):
    log = tmp_path / "fp.log"

    def arm(spec: str) -> object:
        monkeypatch.setenv(failpoints.ENV, spec)
        monkeypatch.setenv(failpoints.LOG_ENV, str(log))
        failpoints.reload()
        return log

    yield arm
    monkeypatch.delenv(failpoints.ENV, raising=False)
    failpoints.reload()


def test_inert_by_default():
    assert not failpoints.enabled()
    failpoints.hit("planner.before_commit")  # nothing happens


def test_raise_on_the_nth_hit_and_witness(armed):
    log = armed("executor.before_record=raise@2")
    failpoints.hit("executor.before_record")
    with pytest.raises(failpoints.FailpointError):
        failpoints.hit("executor.before_record")
    failpoints.hit("executor.before_record")  # only the 2nd
    assert log.read_text().count("executor.before_record raise") == 1


@pytest.mark.parametrize(
    "spec", ["planner.nowhere=kill", "planner.after_claim=explode", "planner.after_claim"]
)
def test_bad_specs_are_refused(monkeypatch, spec):
    monkeypatch.setenv(failpoints.ENV, spec)
    with pytest.raises(ValueError, match="PGSCHED_FAILPOINTS: bad entry"):
        failpoints.reload()
    monkeypatch.delenv(failpoints.ENV)
    failpoints.reload()


def test_armed_failpoints_without_debug_fail_the_checks(armed):
    armed("planner.after_claim=sleep(0.01)")
    with override_settings(DEBUG=False):
        assert "pgsched.E007" in {m.id for m in checks.run_checks()}
    with override_settings(DEBUG=True):
        assert "pgsched.E007" not in {m.id for m in checks.run_checks()}
