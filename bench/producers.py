"""Enqueue N no-op tasks from T threads and time each ``enqueue()`` call.

``python -m bench.producers ours DSN N T OUT`` uses the project's Django
(``bench.settings``, ``PgschedBackend``); the django-tasks-db peer has the same
loop (``bench.peers.dtdb_peer produce``), in its own venv. Each thread has its
own connection, in autocommit, as a web worker would: one ``enqueue()`` is one
transaction. Writes ``{"count", "seconds", "rate", "latencies_ms": {...}, "cpu_ms"}``
to OUT (``cpu_ms``: the process's CPU time per ``enqueue()``).
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def produce(enqueue: Callable[[int], Any], count: int, threads: int) -> dict[str, Any]:
    from django.db import connections

    latencies: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def work(index: int) -> None:
        mine = latencies[index]
        start.wait()
        try:
            for i in range(index, count, threads):
                t0 = time.perf_counter()
                enqueue(i)
                mine.append((time.perf_counter() - t0) * 1000)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.join()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    every = sorted(v for lat in latencies for v in lat)
    return {
        "count": len(every),
        "seconds": seconds,
        "rate": len(every) / seconds if seconds else None,
        "latencies_ms": latency_summary(every),
        # the producer process's CPU (every thread, the driver included) per enqueue()
        "cpu_ms": cpu / len(every) * 1000 if every else None,
    }


def latency_summary(ordered: list[float]) -> dict[str, float]:
    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "p50": q(0.50),
        "p90": q(0.90),
        "p99": q(0.99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def main(argv: list[str]) -> int:
    system, dsn, count, threads, out = argv
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["PGSCHED_BENCH_DSN"] = dsn
    import django

    django.setup()
    if system != "ours":
        raise SystemExit(f"unknown system {system!r}")
    from bench.benchapp.tasks import noop

    result = produce(noop.enqueue, int(count), int(threads))
    with open(out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
