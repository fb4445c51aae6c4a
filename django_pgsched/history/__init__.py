"""Run history as a product: one tenant's runs, page by page.

:func:`runs` is the Python API; :mod:`.views` serves it as read-only JSON
(mounted with ``path("scheduler/", include("django_pgsched.urls"))``). Pages
are keyset pages, newest first by ``(scheduled_for, id)``: a cursor names the
last run of a page, so runs added while a reader pages through appear neither
twice nor in place of others, and no page ever counts the table.
"""

from __future__ import annotations

from .cursors import InvalidParameter
from .queries import ALL_TENANTS, MAX_LIMIT, Page, runs

__all__ = ["ALL_TENANTS", "MAX_LIMIT", "InvalidParameter", "Page", "runs"]
