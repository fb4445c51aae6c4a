"""The delivery bench's receiver: a minimal asyncio HTTP/1.1 server on 127.0.0.1.

``python -m bench.sink PORT`` answers every request at once: ``/fail`` with
500, anything else with 200 ``ok``; it keeps connections alive when the client
asks (HTTP/1.1 without ``Connection: close``). It counts requests and prints the
count on SIGTERM. Small on purpose: the bench measures the sender.
"""

from __future__ import annotations

import asyncio
import signal
import sys

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n"
FAIL = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n"


class Sink(asyncio.Protocol):
    count = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if not sep:
                return
            length = 0
            close = False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip())
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            Sink.count += 1
            path = head.split(b" ", 2)[1] if b" " in head else b"/"
            status = FAIL if path.startswith(b"/fail") else OK
            body = b"fail" if status is FAIL else b"ok"
            closing = b"Connection: close\r\n" if close else b""
            self.transport.write(status + closing + b"\r\n" + body)
            if close:
                self.transport.close()
                return


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Sink, "127.0.0.1", port, backlog=1024, reuse_address=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await stop.wait()
    print(f"requests {Sink.count}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
