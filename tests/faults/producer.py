"""A django.tasks producer for the chaos soak: enqueue a task at a steady rate, log every outcome.

``python -m tests.faults.producer OUT EVERY`` (settings ``tests.faults.replica_settings``,
``DATABASE_URL`` the scenario's) calls ``noop.enqueue()`` every ``EVERY`` seconds until
SIGTERM, and appends one line per call to ``OUT``: ``ok <result id>`` or
``error <exception>``. An ``error`` is an enqueue whose fate the producer does not know (the
server went away before or after its commit), so the checker counts at most one run for it.
"""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

import django


def main(out: str, every: float) -> None:
    django.setup()
    from django.db import connection

    from tests.testapp.tasks import noop

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    with open(out, "a", buffering=1) as log:
        while not stopping:
            started = time.monotonic()
            try:
                result = noop.enqueue()
                log.write(f"ok {result.id}\n")
            except Exception as exc:  # the server restarted, a backend was terminated
                log.write(f"error {type(exc).__name__}\n")
                connection.close()  # the next call connects afresh
            time.sleep(max(0.0, every - (time.monotonic() - started)))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
