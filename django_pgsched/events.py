"""What the engine did, as Django signals: the seam for metrics and logs.

Each signal is sent after the transaction that did the work has committed,
with counts taken from the statement's ``RETURNING`` rows, so a subscriber
(for example the Prometheus metrics) moves by exactly what the database
recorded. Receivers must be quick and must not raise.
"""

from __future__ import annotations

from django.dispatch import Signal

#: A planner batch committed. ``created``: {(queue, job, kind): runs inserted};
#: ``skipped``: {(queue, job, kind, policy): occurrences discarded};
#: ``broken``: ids of schedules marked broken; ``ledgered``: {(queue, job, kind,
#: reason): occurrences recorded in the ledger of occurrences that did not run}.
occurrences_planned = Signal()

#: A backfill committed (``django_pgsched.backfill``). ``schedule``: its name;
#: ``labels``: (queue, job, kind) of the runs; ``created``: runs created;
#: ``taken``: {ledger reason: occurrences taken out of the ledger, now runs}.
occurrences_backfilled = Signal()

#: The guard (engine/guard.py) committed: ``missed``: {(queue, job): runs marked
#: missed at their start deadline}; ``ledgered``: {(queue, job, kind, reason):
#: occurrences recorded in the ledger (reasons ``overlap`` and ``deadline``)};
#: ``missed_tenants``: the runs marked missed by {(queue, job, tenant): count}.
runs_guarded = Signal()

#: An attempt finished and its outcome committed. Arguments: ``run_id``, ``job``,
#: ``queue``, ``attempt`` (number), ``outcome`` (attempt status), ``status``
#: (the run's status after it), ``duration`` (seconds, the replica's clock),
#: ``tenant`` (the run's; ``""``: none).
attempt_finished = Signal()

#: This replica found that it no longer holds a lease (``run_id``, ``reason``).
lease_lost = Signal()

#: The reaper recovered expired leases: ``runs`` is a list of (run_id, status, job, queue);
#: ``tenants`` maps each run_id to its tenant.
leases_reaped = Signal()

#: The retention pass deleted ``deleted`` terminal runs.
runs_pruned = Signal()

#: A loop finished a pass (``loop``: "planner", "executor" or "maintenance"). Health uses it.
loop_ticked = Signal()

#: A ``pgsched.http`` attempt ended (sent by the job, before its outcome is
#: recorded). ``outcome``: ``succeeded``, ``deferred``, ``failed``, ``refused``
#: (nothing sent: the SSRF rules), ``held_back`` (the circuit breaker),
#: ``lease_lost``; ``status``: the HTTP status or None; ``destination``.
http_delivered = Signal()

#: A circuit breaker changed state (``destination``, ``tenant``, ``state``).
breaker_changed = Signal()
