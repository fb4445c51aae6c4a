"""Opaque, tamper-evident cursors bound to the query they continue.

A cursor holds the key of the last run of a page, ``(scheduled_for, id)``,
and a digest of the query it belongs to (tenant and filters), signed with
``SECRET_KEY`` (:mod:`django.core.signing`, a salt of its own). A cursor that
was altered, forged, or issued for another tenant or other filters is refused
(:class:`InvalidParameter` naming ``cursor``). Isolation does not rest on it:
every page is filtered by the tenant anyway.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core import signing

SALT = "django_pgsched.history.cursor"
VERSION = 1


class InvalidParameter(ValueError):
    """A parameter of a history query is not acceptable; ``parameter`` names it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter


@dataclass(frozen=True)
class Position:
    """Where the next page starts: strictly before this ``(scheduled_for, id)``."""

    scheduled_for: datetime
    id: int


def query_digest(query: dict[str, Any]) -> str:
    """A digest of a query's tenant and filters (what a cursor is bound to)."""
    text = json.dumps(query, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def encode(position: Position, digest: str) -> str:
    payload = {
        "v": VERSION,
        "q": digest,
        "at": position.scheduled_for.astimezone(UTC).isoformat(),
        "id": position.id,
    }
    return signing.dumps(payload, salt=SALT, compress=True)


def decode(cursor: str, digest: str) -> Position:
    """The position in ``cursor``, if it was issued by us for this very query."""
    refused = InvalidParameter(
        "cursor", "not a cursor of this query (altered, or issued for other filters)"
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > 1000:
        raise refused
    try:
        payload = signing.loads(cursor, salt=SALT)
    except (signing.BadSignature, ValueError, UnicodeError):
        raise refused from None
    if not isinstance(payload, dict) or payload.get("v") != VERSION or payload.get("q") != digest:
        raise refused
    try:
        at = datetime.fromisoformat(payload["at"])
        run_id = payload["id"]
    except (KeyError, TypeError, ValueError):
        raise refused from None
    if at.tzinfo is None or not isinstance(run_id, int) or isinstance(run_id, bool):
        raise refused
    return Position(at, run_id)
