"""Jobs of the bench.

``tests.noop`` (from the test app) is the job the throughput benchmarks run, as
the issue asks; it records each call in a module-level list for the unit tests,
which a memory soak would report as growth. The soak runs ``bench.noop``, which
keeps nothing.
"""

from __future__ import annotations

from typing import Any

from django_pgsched import job


@job(name="bench.noop")
def noop(**kwargs: Any) -> None:
    """Do nothing."""
