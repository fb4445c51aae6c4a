"""procrastinate 3.x: ``setup DSN``, ``fill DSN N``, ``work DSN CONCURRENCY`` (one worker).

Jobs are kept (``delete_jobs="never"``) so that the harness can count the
``succeeded`` events in ``procrastinate_events``.
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate

app: procrastinate.App | None = None


def make_app(dsn: str) -> procrastinate.App:
    new = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @new.task(name="noop")
    def noop(i: int) -> None:
        return None

    return new


async def run(command: str, dsn: str, value: int) -> None:
    app = make_app(dsn)
    async with app.open_async():
        if command == "setup":
            await app.schema_manager.apply_schema_async()
        elif command == "fill":
            task = app.tasks["noop"]
            for start in range(0, value, 5000):
                await task.batch_defer_async(
                    *[{"i": i} for i in range(start, min(value, start + 5000))]
                )
        else:
            await app.run_worker_async(concurrency=value, delete_jobs="never")


def main(argv: list[str]) -> int:
    command, dsn, *rest = argv
    asyncio.run(run(command, dsn, int(rest[0]) if rest else 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
