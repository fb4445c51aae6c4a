"""Fault-suite fixtures: a private PostgreSQL cluster per session, a database per scenario.

``@pytest.mark.full`` scenarios (bigger herds, soaks) are skipped unless
``PGSCHED_FULL_FAULTS=1`` (``scripts/faults`` sets it); the quick tier
(``@pytest.mark.faults``) runs with the normal suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pgcluster import find_bindir

from .cluster import Cluster, private_cluster
from .scenario import Scenario

FULL = os.environ.get("PGSCHED_FULL_FAULTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FULL:
        return
    skip = pytest.mark.skip(reason="full fault tier: run scripts/faults (PGSCHED_FULL_FAULTS=1)")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    if find_bindir() is None:
        pytest.skip("the fault scenarios need PostgreSQL server binaries (initdb, pg_ctl)")
    with private_cluster(faketime=True) as started:
        yield started


@pytest.fixture
def scenario(cluster: Cluster, tmp_path: Path) -> Iterator[Scenario]:
    current = Scenario(cluster, tmp_path)
    try:
        yield current
    finally:
        current.close()
