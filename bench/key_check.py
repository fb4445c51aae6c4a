"""The idempotency key's check across months, when a month's statistics say it is empty.

The trigger function ``pgsched_run_key_unique()`` runs with ``enable_seqscan = off``
(its ``SET`` in ``migrations/sql/functions.sql``). This measures why: one statement
inserting N one-off runs (a key each) after ``VACUUM ANALYZE`` of the empty run table,
in a new session, with the function as migrated ("index") and with the setting reset
("reset")::

    python -m bench.key_check --runs 10000 20000 40000

It also inserts 50,000 runs where the statistics know the rows, both ways (the
setting costs nothing there). A private cluster (``bench/cluster.py``).
"""

from __future__ import annotations

import argparse
import time

RESET = "ALTER FUNCTION pgsched_run_key_unique() RESET enable_seqscan"
SET = "ALTER FUNCTION pgsched_run_key_unique() SET enable_seqscan = off"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.key_check", description=__doc__)
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000, 20_000, 40_000])
    args = parser.parse_args(argv)

    from datetime import timedelta

    from . import fixtures
    from .cluster import migrated_database, private_cluster

    with private_cluster() as cluster:
        migrated_database(cluster, "keys")
        with cluster.connect("keys") as conn:
            fixtures.ensure_months(conn, timedelta(days=366), timedelta(0))

        def insert(n: int, *, empty_stats: bool, setting: str) -> float:
            with cluster.connect("keys") as conn:
                conn.execute(setting)
                conn.execute("TRUNCATE pgsched_job_run CASCADE")
                if empty_stats:
                    conn.execute("VACUUM ANALYZE pgsched_job_run")
                else:  # statistics that know a table of n runs
                    fixtures._add_history_batch(conn, 1, n)
                    conn.execute("VACUUM ANALYZE pgsched_job_run")
                    conn.execute("TRUNCATE pgsched_job_run CASCADE")
            with cluster.connect("keys") as conn:  # a session with no cached plan
                started = time.perf_counter()
                fixtures._add_history_batch(conn, 1, n)
                return time.perf_counter() - started

        for n in args.runs:
            before = insert(n, empty_stats=True, setting=RESET)
            after = insert(n, empty_stats=True, setting=SET)
            print(
                f"{n:,} runs, statistics of an empty table: reset {before:.1f} s, "
                f"index {after:.1f} s",
                flush=True,
            )
        before = insert(50_000, empty_stats=False, setting=RESET)
        after = insert(50_000, empty_stats=False, setting=SET)
        print(
            f"50,000 runs, statistics that know the rows: reset {before:.1f} s, "
            f"index {after:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
