"""Benchmarks of django-pgsched beside the raw-SQL limit and its peers, in one run.

``scripts/bench --quick`` (a few minutes) or ``scripts/bench --full``; see
``docs/performance.md`` for the method and the latest results. Nothing in the
engine or the test suite imports this package.
"""
