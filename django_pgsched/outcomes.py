"""What a job can say about its attempt besides "done" or an exception.

A job normally returns (the attempt succeeded) or raises (it failed and is
retried with backoff until ``max_attempts``). Two exceptions say more:

- :class:`Defer` — "not now, try again at this time". Raised (or returned) by
  a job, it ends the attempt without failing it: the run goes back to
  ``retrying`` with ``fire_after`` at the given time. An attempt that did
  something (``attempted=True``, the default: a request went out and the
  server said "later") is recorded with the status ``deferred`` and does not
  use up a retry; one that did nothing (``attempted=False``, e.g. a circuit
  breaker kept it back) leaves no attempt row and gives its attempt back.
- :class:`Fail` — "this attempt failed", with control over what follows:
  ``retry=False`` fails the run at once; ``not_before`` sets the earliest
  time of the next attempt (the retry backoff still applies if it is later).

Both are plain data; the executor turns them into fenced writes (every write
on a leased run carries its lease token).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["Defer", "Fail", "LeaseLost"]


def _aware(value: datetime, field: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field}: timezone offset required (times are UTC), got {value!r}")
    return value.astimezone(UTC)


class Defer(Exception):
    """End this attempt without failing it; try again at ``until`` (or after ``delay``).

    Give exactly one of ``until`` (an aware datetime) or ``delay`` (a
    ``timedelta`` or seconds). The executor caps the time at
    ``PGSCHED['DEFER_MAX']`` from now; a time in the past means "as soon as
    possible". ``reason`` goes on the attempt (or, for an attempt that did
    nothing, on the run's note).
    """

    def __init__(
        self,
        until: datetime | None = None,
        *,
        delay: timedelta | float | None = None,
        reason: str = "",
        attempted: bool = True,
    ) -> None:
        if (until is None) == (delay is None):
            raise ValueError("Defer: give exactly one of until= and delay=")
        if until is not None:
            self.until: datetime | None = _aware(until, "until")
            self.delay: float | None = None
        else:
            seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
            if not isinstance(seconds, (int, float)) or seconds != seconds:
                raise ValueError(f"Defer: delay must be a number of seconds, got {delay!r}")
            self.until = None
            self.delay = float(seconds)
        self.reason = reason
        self.attempted = attempted
        super().__init__(reason or "deferred")

    def seconds_from(self, now: datetime) -> float:
        """Seconds from ``now`` (aware) until the deferred attempt; never negative."""
        if self.until is not None:
            return max(0.0, (self.until - now).total_seconds())
        return max(0.0, self.delay or 0.0)


class Fail(Exception):
    """This attempt failed. ``retry=False``: fail the run now, whatever attempts remain.

    ``not_before`` (an aware datetime or seconds from now): the next attempt
    is no earlier than this (the usual backoff applies if it is later).
    """

    def __init__(
        self,
        message: str,
        *,
        retry: bool = True,
        not_before: datetime | float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry = retry
        if isinstance(not_before, datetime):
            not_before = _aware(not_before, "not_before")
        self.not_before = not_before

    def seconds_from(self, now: datetime) -> float | None:
        """Seconds from ``now`` until the earliest next attempt, if one was given."""
        if self.not_before is None:
            return None
        if isinstance(self.not_before, datetime):
            return max(0.0, (self.not_before - now).total_seconds())
        return max(0.0, float(self.not_before))


class LeaseLost(Exception):
    """The run's lease is no longer ours: stop, the result will be discarded.

    Raised by :meth:`RunContext.ensure_lease` when the fenced renewal finds
    the run reaped, cancelled or claimed again, or when this replica can no
    longer trust its lease for as long as the job still needs it.
    """
