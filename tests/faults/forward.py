"""A plain TCP forwarder, run inside a network namespace by :mod:`tests.faults.netcut`.

``python -m tests.faults.forward LISTEN_HOST LISTEN_PORT UPSTREAM_HOST UPSTREAM_PORT``
prints ``ready`` once it listens, then forwards every connection until killed.
It imports nothing of the project: the namespace's side of the path only moves bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


async def main(listen: str, port: int, upstream: str, upstream_port: int) -> None:
    async def accept(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(upstream, upstream_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, up_w), _pipe(up_r, client_w))

    server = await asyncio.start_server(accept, listen, port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    host, port, up_host, up_port = sys.argv[1:5]
    asyncio.run(main(host, int(port), up_host, int(up_port)))
