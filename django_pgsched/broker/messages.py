"""What goes through the broker: subjects, message ids and payloads.

A message names one claimable run: its subject is
``<SUBJECT_PREFIX>.<queue>.<tenant>`` (a tenant's flood is visible, and can be
limited, per subject), its payload ``{"run": <id>}``, and its ``Nats-Msg-Id``
``<idempotency key>#<outbox row id>``: the run's idempotency key, and which time
it became claimable (a retry or a released run is a new message; the same
outbox row published twice, after a publisher died between the broker's
acknowledgement and its commit, is dropped by the stream's de-duplication).
The broker carries nothing else: the run's row is the truth.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# A subject token may not be empty nor hold whitespace, '.', '*' or '>'. Tokens are
# percent-encoded beyond [A-Za-z0-9_-]; the empty tenant is "_".
_SAFE = re.compile(r"[A-Za-z0-9_-]")


def token(value: str) -> str:
    """``value`` as one subject token (reversible; "" is "_")."""
    if value == "":
        return "_"
    out = []
    for char in value:
        if (_SAFE.fullmatch(char) and char != "_") or char == "-":
            out.append(char)
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode())
    return "".join(out)


def subject(prefix: str, queue: str, tenant: str) -> str:
    """The subject a run of ``queue`` and ``tenant`` is published on."""
    return f"{prefix}.{token(queue)}.{token(tenant)}"


def queue_filter(prefix: str, queue: str | None) -> str:
    """The subjects of one queue (``None``: of every queue)."""
    return f"{prefix}.>" if queue is None else f"{prefix}.{token(queue)}.*"


def message_id(idempotency_key: str, outbox_id: int) -> str:
    return f"{idempotency_key}#{outbox_id}"


def payload(run_id: int) -> bytes:
    return b'{"run":%d}' % run_id


class Malformed(ValueError):
    """A message that does not name a run (a poison message): acknowledged and dropped."""


@dataclass(frozen=True)
class RunMessage:
    run_id: int


def parse(data: bytes) -> RunMessage:
    """The run a message names; :class:`Malformed` if it names none."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Malformed(f"not JSON: {data[:80]!r}") from exc
    run = body.get("run") if isinstance(body, dict) else None
    if not isinstance(run, int) or isinstance(run, bool) or not 0 < run < 2**63:
        raise Malformed(f"no run id: {data[:80]!r}")
    return RunMessage(run)
