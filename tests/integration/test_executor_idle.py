"""An idle executor pass is one statement: the held-tenant check rides in the pass.

Whether a tenant has a ``max_running`` decides whether a pass also runs the held
claim. The pass reads it itself (``held_tenants``), so an idle replica's poll is one
implicit transaction, not two; the check's own statement runs only when no pass has
read it for ``HELD_RECHECK`` seconds.
"""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_pgsched import enqueue
from django_pgsched.engine.executor import Executor
from django_pgsched.tenants.models import Tenant


def test_an_idle_pass_runs_one_statement_and_reads_the_held_tenants(db):
    now = [1000.0]
    executor = Executor(concurrency=2, inline=True, clock=lambda: now[0])
    executor.run_once()
    now[0] += 5.0  # an idle replica's next poll (EXECUTOR_POLL_INTERVAL), past HELD_RECHECK
    with CaptureQueriesContext(connection) as ctx:
        executor.run_once()
    # one statement (its text is not captured on every Django: 5.2 keeps None for it)
    assert len(ctx.captured_queries) == 1, [q["sql"] for q in ctx.captured_queries]
    # ... which read the held tenants: at this pass's time, with no statement of its own
    assert executor._held is False and executor._held_checked_at == now[0]


def test_a_tenant_given_a_max_running_is_seen_by_the_next_pass(db):
    executor = Executor(concurrency=2, inline=True)
    executor.run_once()
    assert executor._held is False
    Tenant.objects.create(key="acme", max_running=1)
    runs = [enqueue("tests.noop", tenant="acme") for _ in range(2)]
    first = executor.run_once()  # the pass reads held_tenants, then the held claim runs
    assert executor._held is True
    assert first.claimed == 1  # one slot of acme's, by the held claim
    assert {r.pk for r in runs}
