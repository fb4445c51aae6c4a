"""The planner holds a tenant's min_interval for schedules written past clean().

clean() refuses a schedule whose occurrences come closer than its tenant's
min_interval wherever it is defined (tests/integration/test_tenants.py); a schedule
written by SQL, or one whose tenant's quota was lowered after, meets the planner:
it is broken with the quota's message and plans nothing.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule, Tenant, db_now


def _written_past_clean(tenant: str, cron: str) -> Schedule:
    due = db_now() - timedelta(seconds=1)
    (schedule,) = Schedule.objects.bulk_create(
        [Schedule(name=f"{tenant}-{cron}", job="tests.noop", cron=cron, next_fire_at=due,
                  tenant=tenant)]
    )  # fmt: skip
    return schedule


@pytest.mark.parametrize("recorded", [True, False])
def test_a_schedule_closer_than_its_tenants_min_interval_is_broken(db, settings, recorded):
    if recorded:
        Tenant.objects.create(key="acme", min_interval=timedelta(minutes=1))
    else:
        settings.PGSCHED = {"TENANT_DEFAULTS": {"min_interval": 60}}
    fast = _written_past_clean("acme", "* * * * * *")
    slow = _written_past_clean("acme", "0 * * * * *")
    Planner().run_once()
    fast.refresh_from_db()
    slow.refresh_from_db()
    assert fast.status == "broken"
    assert "min_interval: two occurrences of this schedule are 1s apart" in fast.last_error
    assert "allows at least 60s" in fast.last_error
    assert not JobRun.objects.filter(schedule_name=fast.name).exists()
    assert slow.status == "active"  # every minute: within the quota, planned as usual


def test_a_record_without_min_interval_is_not_held_to_the_defaults(db, settings):
    settings.PGSCHED = {"TENANT_DEFAULTS": {"min_interval": 60}}
    Tenant.objects.create(key="acme", min_interval=None)
    fast = _written_past_clean("acme", "* * * * * *")
    untenanted = _written_past_clean("", "* * * * * *")
    Planner().run_once()
    fast.refresh_from_db()
    untenanted.refresh_from_db()
    assert fast.status == "active" and untenanted.status == "active"
    assert JobRun.objects.filter(schedule_name=fast.name).exists()
