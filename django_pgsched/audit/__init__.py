"""The audit trail of schedule changes (table ``pgsched_schedule_change``).

* :class:`~django_pgsched.audit.models.ScheduleChange`: one row per change
  (who, when, the before and after of each field), written by a database
  trigger whatever made the change.
* :func:`actor`: say who your code acts for (``with actor("user:alice"): ...``).
* :func:`changes`: the latest changes of a schedule, newest first.
"""

from __future__ import annotations

from .actor import actor, for_user
from .queries import changes

__all__ = ["actor", "changes", "for_user"]
