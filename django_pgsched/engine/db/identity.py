"""The worker id that names this process's scheduler sessions."""

from __future__ import annotations

import os
import socket


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_worker_id: str | None = None


def set_worker_id(worker_id: str) -> None:
    """Name this process's scheduler sessions (``application_name``) after its replica.

    The admin's replica page and ``pg_stat_activity`` show live replicas by
    this name; a name longer than PostgreSQL's 63 bytes is cut.
    """
    global _worker_id
    _worker_id = worker_id


def worker_id() -> str:
    return _worker_id or default_worker_id()
