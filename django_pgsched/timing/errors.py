"""What both the cron parser and the timetables raise, below both of them."""

from __future__ import annotations

MAX_CRON_LENGTH = 128


class TimetableError(ValueError):
    """An invalid cron, interval or anchor, or a result outside years 1 to 9999.

    ``field`` is ``"cron"``, ``"interval"`` or ``"anchor"``; ``code`` is stable.
    """

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.code = code
        self.message = message
