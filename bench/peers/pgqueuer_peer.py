"""pgqueuer (asyncpg driver): ``setup DSN``, ``fill DSN N``, ``work DSN BATCH`` (one manager)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.models import Job


async def fill(dsn: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    for start in range(0, count, 5000):
        n = min(5000, count - start)
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
    await conn.close()


async def work(dsn: str, batch: int) -> None:
    qm = QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(dsn))))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    await qm.run(batch_size=batch)


def main(argv: list[str]) -> int:
    command, dsn, *rest = argv
    if command == "setup":  # its own CLI, durable tables (the default)
        pgq = Path(sys.executable).parent / "pgq"
        subprocess.run([str(pgq), "--pg-dsn", dsn, "install"], check=True, capture_output=True)
    elif command == "fill":
        asyncio.run(fill(dsn, int(rest[0])))
    else:
        asyncio.run(work(dsn, int(rest[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
