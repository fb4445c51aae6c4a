"""How long a loop waits after a failure before it tries again.

Every retry loop of the scheduler (the planner, executor and maintenance
loops, the listener, the settings sync at start) waits 0.5 s after its first
failure, doubles the wait after each further one up to 10 s, and starts again
from 0.5 s after a success. The numbers live here, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FIRST = 0.5  # seconds after the first failure
CAP = 10.0  # never longer than this


@dataclass
class Backoff:
    """Doubling waits between ``first`` and ``cap`` seconds; :meth:`reset` after a success."""

    first: float = FIRST
    cap: float = CAP
    current: float = field(init=False)

    def __post_init__(self) -> None:
        self.current = self.first

    def next(self) -> float:
        """The wait before the next try; the one after it doubles (up to ``cap``)."""
        wait = self.current
        self.current = min(self.current * 2, self.cap)
        return wait

    def reset(self) -> None:
        self.current = self.first
