"""Host lookups shared fairly: one tenant's hanging names never take every lookup thread,
and time spent waiting for a thread is never blamed on the destination.

Before, all tenants shared one 8-thread pool first come first served, and a lookup that
only waited in its queue failed as "took longer" (a failure of the destination for its
circuit breaker).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from django_pgsched.delivery import vetting
from tests import resolver


@pytest.fixture
def blocked() -> Iterator[threading.Event]:
    resolver.reset()
    release = threading.Event()
    yield release
    release.set()
    resolver.reset()


def _hang(pool: ThreadPoolExecutor, host: str, tenant: str, release: threading.Event) -> None:
    resolver.BLOCK[host] = release
    resolver.NAMES[host] = [["127.0.0.1"]]
    pool.submit(vetting._lookup, resolver.resolve, host, 80, 10.0, tenant)


def _wait_for_calls(n: int) -> None:
    for _ in range(200):
        if len(resolver.CALLS) >= n:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{len(resolver.CALLS)} lookups started, expected {n}")


def test_a_tenant_holds_at_most_its_share_and_others_still_resolve(blocked):
    with ThreadPoolExecutor(max_workers=8) as callers:
        for i in range(vetting.LOOKUPS_PER_TENANT):
            _hang(callers, f"slow{i}.test", "slowpoke", blocked)
        _wait_for_calls(vetting.LOOKUPS_PER_TENANT)
        with pytest.raises(vetting.ResolveError) as third:
            vetting._lookup(resolver.resolve, "hooks.test", 80, 0.2, "slowpoke")
        assert third.value.waited and "share" in str(third.value)
        # another tenant is not held up
        assert vetting._lookup(resolver.resolve, "hooks.test", 80, 2.0, "other") == ["127.0.0.1"]
        blocked.set()


def test_waiting_for_a_thread_is_not_the_destinations_failure(blocked):
    tenants = vetting.LOOKUP_THREADS // vetting.LOOKUPS_PER_TENANT
    with ThreadPoolExecutor(max_workers=vetting.LOOKUP_THREADS) as callers:
        for t in range(tenants):
            for i in range(vetting.LOOKUPS_PER_TENANT):
                _hang(callers, f"slow{t}-{i}.test", f"tenant{t}", blocked)
        _wait_for_calls(vetting.LOOKUP_THREADS)
        with pytest.raises(vetting.ResolveError) as queued:
            vetting._lookup(resolver.resolve, "hooks.test", 80, 0.2, "late")
        assert queued.value.waited and "lookup thread" in str(queued.value)
        assert "hooks.test" not in resolver.CALLS  # it never ran
        blocked.set()


def test_a_lookup_that_ran_and_hung_is_the_destinations(blocked):
    resolver.BLOCK["hang.test"] = blocked
    resolver.NAMES["hang.test"] = [["127.0.0.1"]]
    with pytest.raises(vetting.ResolveError) as slow:
        vetting._lookup(resolver.resolve, "hang.test", 80, 0.2, "acme")
    assert not slow.value.waited and "took longer" in str(slow.value)
