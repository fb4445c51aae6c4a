"""Standard Webhooks signatures (https://www.standardwebhooks.com, version 1.0.0).

Every request carries ``webhook-id`` (the run's idempotency key: the same for
every attempt, so receivers can drop repeats), ``webhook-timestamp`` (integer
Unix seconds of this attempt) and, when the schedule names a signing secret,
``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``,
one per key of the secret (space-separated, newest first) so a secret can be
rotated without downtime.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence


class SigningError(ValueError):
    """The message cannot be signed safely (the id is unusable as a webhook-id)."""


def check_id(msg_id: str, *, signed: bool) -> str:
    """A webhook-id is printable ASCII; a signed one has no '.' (the signed content's delimiter)."""
    if not msg_id or not all(0x21 <= ord(c) < 0x7F for c in msg_id):
        raise SigningError(
            f"webhook-id {msg_id!r}: the run's idempotency key must be printable ASCII "
            "without spaces to be sent as a header"
        )
    if signed and "." in msg_id:
        raise SigningError(
            f"webhook-id {msg_id!r}: a signed webhook's id must not contain '.' "
            "(Standard Webhooks); choose an idempotency key without it"
        )
    return msg_id


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``{msg_id}.{timestamp}.{body}``."""
    content = b"%s.%d.%s" % (msg_id.encode("ascii"), timestamp, body)
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def webhook_headers(
    msg_id: str, timestamp: int, body: bytes, keys: Sequence[bytes] = ()
) -> list[tuple[str, str]]:
    """The Standard Webhooks headers of one attempt (no signature without keys)."""
    headers = [
        ("webhook-id", check_id(msg_id, signed=bool(keys))),
        ("webhook-timestamp", str(timestamp)),
    ]
    if keys:
        headers.append(
            ("webhook-signature", " ".join(signature(k, msg_id, timestamp, body) for k in keys))
        )
    return headers
