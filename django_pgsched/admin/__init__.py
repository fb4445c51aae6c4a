"""The operator's view: schedules (edit, pause, resume, run now) and runs (read, retry, cancel).

Three rules keep it honest and fast:

* **Every write goes through the library or a fenced statement.** An edit
  saves only the fields the form changed (never the planner's
  ``next_fire_at``, ``last_fire_at`` or ``skipped_occurrences`` as they were
  when the page loaded). Pause and resume are one ``UPDATE`` predicated on the
  current status; the database's triggers NOTIFY the replicas and cancel
  unstarted runs, so they take effect at once. Run now is
  :func:`~django_pgsched.api.run_schedule_now`, retry is
  :func:`~django_pgsched.api.retry_run`, and cancel is
  :func:`~django_pgsched.api.cancel_runs`, which writes a running run only
  while it still carries the lease token that was read, so the executor's next
  renewal finds its lease gone and abandons the job.
* **A page costs a fixed number of queries**, whatever the row count: the
  strip of recent runs for a whole page of schedules is one ``LATERAL``
  query, and nothing in a run row touches a related object.
* **Nothing scans the run table.** The run list counts at most
  :attr:`~django_pgsched.admin.common.BoundedCountPaginator.exact_limit` rows
  and estimates beyond; its order and each of its filters have an index
  (``migrations/sql/indexes.sql``); filter choices come from settings, the
  registry and the schedules table, never from ``SELECT DISTINCT`` over runs;
  search is by exact id or idempotency key; facet counts are off.

Modules: :mod:`~django_pgsched.admin.common` (what both pages share),
:mod:`~django_pgsched.admin.schedules`, :mod:`~django_pgsched.admin.runs`,
:mod:`~django_pgsched.admin.replicas`, :mod:`~django_pgsched.admin.changes`
(the audit trail), :mod:`~django_pgsched.admin.breakers` (HTTP delivery's
circuit breakers) and :mod:`~django_pgsched.admin.tenants` (quotas, pause and
usage); each registers its model admin when imported, as Django's
autodiscovery imports this package. The templates are
in ``templates/admin/pgsched/``.
"""

from __future__ import annotations

from . import breakers, changes, common, replicas, runs, schedules, tenants

__all__ = ["breakers", "changes", "common", "replicas", "runs", "schedules", "tenants"]
