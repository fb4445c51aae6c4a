"""The replica's own view of a lease: when to renew it and how long to trust it.

The database holds the authoritative expiry (``claim_expires_at``), but a
replica cut off from the database cannot see it move. So each lease also has a
local deadline on the monotonic clock, measured from the moment the claim or
renewal *request was sent* (River's elector rule): a slow but successful
renewal therefore never stretches trust beyond what the database granted.
Past ``trust_until`` the executor abandons the run even if it cannot reach
the database to find out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Lease:
    duration: float  # seconds the database grants per claim or renewal
    margin: float  # stop trusting this long before the database would expire it
    trust_until: float  # monotonic
    renew_at: float  # monotonic

    @classmethod
    def granted(cls, *, requested_at: float, duration: float, margin: float) -> Lease:
        """A lease the database granted for a request sent at ``requested_at``."""
        margin = min(margin, duration / 4)
        return cls(
            duration=duration,
            margin=margin,
            trust_until=requested_at + duration - margin,
            renew_at=requested_at + duration / 3,
        )

    def renewed(self, *, requested_at: float) -> None:
        """The database extended the lease for a request sent at ``requested_at``."""
        self.trust_until = max(self.trust_until, requested_at + self.duration - self.margin)
        self.renew_at = requested_at + self.duration / 3

    def renewal_failed(self, *, now: float, retry_in: float = 1.0) -> None:
        """The renewal could not reach the database; try again soon, trust unchanged."""
        self.renew_at = min(now + retry_in, self.trust_until)

    def due_for_renewal(self, now: float) -> bool:
        return now >= self.renew_at

    def trusted(self, now: float) -> bool:
        return now < self.trust_until
