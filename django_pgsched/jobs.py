"""The built-in jobs (found like every app's ``jobs`` module): ``pgsched.http``."""

from __future__ import annotations

from .delivery.job import http

__all__ = ["http"]
