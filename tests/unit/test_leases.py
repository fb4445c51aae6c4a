"""The replica's local view of a lease: renewal time, trust and how long it may be held."""

from __future__ import annotations

import pytest

from django_pgsched.engine.leases import Lease


def test_trust_is_measured_from_the_request_and_holding_from_the_answer():
    lease = Lease.granted(requested_at=100.0, answered_at=100.5, duration=20.0, margin=1.0)
    assert lease.renew_at == pytest.approx(100.0 + 20 / 3)
    assert lease.trusted(118.9) and not lease.trusted(119.0)  # request + duration - margin
    assert lease.maybe_held(120.4) and not lease.maybe_held(120.5)  # answer + duration


def test_the_margin_is_at_most_a_quarter_of_the_lease():
    lease = Lease.granted(requested_at=0.0, duration=4.0, margin=10.0)
    assert lease.margin == 1.0 and lease.trust_until == 3.0 and lease.held_until == 4.0


def test_a_renewal_extends_trust_and_holding_but_never_shortens_them():
    lease = Lease.granted(requested_at=0.0, answered_at=0.1, duration=30.0, margin=1.0)
    lease.renewed(requested_at=10.0, answered_at=12.0)
    assert lease.trust_until == 39.0 and lease.held_until == 42.0 and lease.renew_at == 20.0
    lease.renewed(requested_at=-5.0, answered_at=-4.0)  # a late answer to an older request
    assert lease.trust_until == 39.0 and lease.held_until == 42.0


def test_a_renewal_that_failed_may_still_have_committed():
    lease = Lease.granted(requested_at=0.0, answered_at=0.0, duration=30.0, margin=1.0)
    lease.renewal_failed(now=15.0)
    assert lease.trust_until == 29.0  # trust is not extended by an unanswered request
    assert lease.renew_at == 16.0
    assert lease.held_until == 45.0  # but the database may hold it a full lease from now


def test_a_released_lease_is_held_no_longer():
    lease = Lease.granted(requested_at=0.0, duration=30.0, margin=1.0)
    lease.released()
    assert not lease.maybe_held(0.0)
