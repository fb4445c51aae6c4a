"""Test-only process shims for fault-suite replicas (on their PYTHONPATH; inert by default).

- ``PGSCHED_FAULT_SKEW=<seconds>``: shift this process's wall clock (``time.time()``,
  ``datetime.now()``) with time-machine, ticking; ``time.monotonic()`` is left
  alone, like a host whose NTP is off by that much.
- ``PGSCHED_FAULT_NOFENCE=1``: a negative control. Strip the lease-token
  predicates (``AND r.claimed_by = ...``) from the executor's renew, complete,
  release and minimal-fail SQL, so a replica that lost its lease can still write.
- ``PGSCHED_FAULT_NOSLOTS=1``: a negative control. Every pass claims as if all of
  the replica's slots were idle (lease rule 1 off).
"""

from __future__ import annotations

import os


def _skew(seconds: float) -> None:
    from datetime import UTC, datetime, timedelta

    import time_machine

    traveller = time_machine.travel(datetime.now(UTC) + timedelta(seconds=seconds), tick=True)
    traveller.start()


def _no_fencing() -> None:
    import functools

    from django_pgsched.engine import queries

    original = queries._load.__wrapped__

    @functools.cache
    def unfenced() -> dict[str, str]:
        loaded = dict(original())
        for name, text in loaded.items():
            if name.startswith("executor_"):
                loaded[name] = "\n".join(
                    line for line in text.splitlines() if "AND r.claimed_by = " not in line
                )
        return loaded

    queries._load = unfenced  # type: ignore[assignment]


def _no_slots() -> None:
    from django_pgsched.engine.executor import Executor

    Executor.idle_slots = lambda self: self.concurrency  # type: ignore[method-assign]


if os.environ.get("PGSCHED_FAULT_SKEW"):
    _skew(float(os.environ["PGSCHED_FAULT_SKEW"]))
if os.environ.get("PGSCHED_FAULT_NOFENCE") == "1":
    _no_fencing()
if os.environ.get("PGSCHED_FAULT_NOSLOTS") == "1":
    _no_slots()
