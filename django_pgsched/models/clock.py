"""The database clock, the scheduler's one time authority."""

from __future__ import annotations

from datetime import datetime

from django.db import connections

from ..conf import get_settings


def db_now(using: str | None = None) -> datetime:
    """The database's clock (``statement_timestamp()``): the one time authority."""
    alias = using or get_settings().DATABASE_ALIAS
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        value: datetime = cursor.fetchone()[0]
    return value
