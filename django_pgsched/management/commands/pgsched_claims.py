"""``manage.py pgsched_claims``: the claim transport's state, and the outbox switched on or off.

Without options it prints the transport this process is configured with, the
outbox triggers' state and how far the outbox lags. ``--enable`` creates the
outbox triggers if missing and enables them (a ``nats`` replica does this at
start when its role may; run it as the tables' owner otherwise); ``--disable``
stops writing outbox rows, once every replica is back on ``postgres``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connections

from django_pgsched.broker.publisher import outbox_lag
from django_pgsched.broker.schema import TRIGGER_NAMES, disable_outbox, ensure_outbox, outbox_state
from django_pgsched.conf import get_settings


class Command(BaseCommand):
    help = "Show the claim transport and the outbox; enable or disable the outbox triggers."

    def add_arguments(self, parser: CommandParser) -> None:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--enable", action="store_true", help="create and enable the triggers")
        group.add_argument("--disable", action="store_true", help="disable the triggers")

    def handle(self, *args: Any, enable: bool, disable: bool, **options: Any) -> None:
        settings = get_settings()
        conn = connections[settings.DATABASE_ALIAS]
        if enable:
            ensure_outbox(conn)
        elif disable:
            disable_outbox(conn)
        enabled, present = outbox_state(conn)
        lag, due = outbox_lag(conn)
        claims = settings.claims
        self.stdout.write(f"transport: {claims.TRANSPORT}")
        if claims.nats:
            urls = ", ".join(claims.NATS_URL)
            self.stdout.write(f"broker: {urls} stream {claims.STREAM} ({claims.SUBJECT_PREFIX})")
        state = "enabled" if enabled == len(TRIGGER_NAMES) else "disabled" if present else "missing"
        self.stdout.write(f"outbox triggers: {state}")
        self.stdout.write(f"outbox: {due} row(s) due, the oldest waiting {lag:.1f}s")
