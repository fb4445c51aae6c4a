"""Jitter spreads a herd evenly: 10,000 schedules on ``0 * * * *`` with 60 s of jitter.

The planner plans them (20 passes of its batch); the offsets ``fire_after -
scheduled_for`` must look uniform on [0, 60 s): a Kolmogorov-Smirnov test and a
chi-square test over 60 one-second bins, both at the 0.1 % level. The offsets
are a hash of each run's idempotency key, so the result is fixed for given ids.
"""

from __future__ import annotations

import math
from datetime import timedelta

from django_pgsched.engine.planner import Planner
from django_pgsched.models import JobRun, Schedule
from tests.conftest import at

N = 10_000
T = at("2026-03-01 12:00:00")


KS_CRITICAL = 1.95 / math.sqrt(N)  # Kolmogorov-Smirnov, 0.1 %
CHI2_CRITICAL = 98.3  # chi-square, 59 degrees of freedom, 0.1 %


def ks(sorted_offsets: list[float]) -> float:
    """The Kolmogorov-Smirnov distance of a sorted sample of [0, 1) from U(0, 1)."""
    n = len(sorted_offsets)
    return max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(sorted_offsets))


def chi2(offsets: list[float]) -> float:
    bins = [0] * 60
    for x in offsets:
        bins[int(x * 60)] += 1
    expected = len(offsets) / 60
    return sum((b - expected) ** 2 / expected for b in bins)


def test_ten_thousand_schedules_spread_evenly_over_the_jitter(db):
    Schedule.objects.bulk_create(
        Schedule(
            name=f"herd-{i}",
            job="tests.noop",
            cron="0 * * * *",
            jitter=timedelta(seconds=60),
            next_fire_at=T,
        )
        for i in range(N)
    )
    while Planner().run_once(now=T).schedules:
        pass
    offsets = sorted(
        (r.fire_after - r.scheduled_for).total_seconds() / 60
        for r in JobRun.objects.only("fire_after", "scheduled_for")
    )
    assert len(offsets) == N
    assert all(0 <= x < 1 for x in offsets)
    assert JobRun.objects.exclude(scheduled_for=T).count() == 0

    d, c = ks(offsets), chi2(offsets)
    print(f"\njitter herd: KS D = {d:.4f} (critical {KS_CRITICAL:.4f}), chi2 = {c:.1f}")
    assert d < KS_CRITICAL and c < CHI2_CRITICAL
    # the tests can fail: a herd without jitter, or jitter stuck in the first half, does
    assert ks([0.0] * N) > KS_CRITICAL and chi2([0.0] * N) > CHI2_CRITICAL
    half = sorted(x / 2 for x in offsets)
    assert ks(half) > KS_CRITICAL and chi2(half) > CHI2_CRITICAL
