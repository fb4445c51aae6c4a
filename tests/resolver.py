"""The test suite's resolver (``PGSCHED["HTTP"]["RESOLVER"]``): no test asks real DNS.

``NAMES`` maps a host name to the answers of each successive lookup (the last
answer repeats); ``CALLS`` records every lookup. ``BLOCK`` names hosts whose
lookup waits for an event (a test does something meanwhile).
"""

from __future__ import annotations

import socket
import threading

NAMES: dict[str, list[list[str]]] = {}
CALLS: list[str] = []
BLOCK: dict[str, threading.Event] = {}


def reset() -> None:
    NAMES.clear()
    CALLS.clear()
    BLOCK.clear()
    NAMES.update(
        {
            "hooks.test": [["127.0.0.1"]],
            "internal.test": [["127.0.0.1"]],
            "metadata.test": [["169.254.169.254"]],
            "private.test": [["10.1.2.3"]],
            "mixed.test": [["127.0.0.1", "10.1.2.3"]],
            "mapped.test": [["::ffff:127.0.0.1"]],
            # the first lookup gives the allowed address, any later one a refused one
            "rebind.test": [["127.0.0.1"], ["127.0.0.2"]],
        }
    )


reset()


def resolve(host: str, port: int) -> list[str]:
    CALLS.append(host)
    event = BLOCK.get(host)
    if event is not None:
        event.wait(30)
    answers = NAMES.get(host)
    if answers is None:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: no such name (test resolver)")
    seen = CALLS.count(host)
    return list(answers[min(seen, len(answers)) - 1])
