"""The replica's own view of a lease: when to renew it, how long to trust it,
and how long the database may still count it as held.

The database holds the authoritative expiry (``claim_expires_at``), but a
replica cut off from the database cannot see it move. So each lease also has
local deadlines on the monotonic clock:

- ``trust_until`` is measured from the moment the claim or renewal *request
  was sent* (River's elector rule), less a margin: a slow but successful
  renewal never stretches trust beyond what the database granted. Past it the
  executor abandons the run even if it cannot reach the database to find out.
- ``held_until`` is measured from the moment the *answer came back* (or, for a
  renewal whose answer never came, from when it failed): no earlier than the
  database's expiry. Until then the database may still count the run as this
  replica's, so an abandoned run keeps its slot busy until then (lease rule 1
  as the database sees it: never more live leases than slots).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Lease:
    duration: float  # seconds the database grants per claim or renewal
    margin: float  # stop trusting this long before the database would expire it
    trust_until: float  # monotonic
    renew_at: float  # monotonic
    held_until: float  # monotonic: no earlier than the database's expiry

    @classmethod
    def granted(
        cls,
        *,
        requested_at: float,
        duration: float,
        margin: float,
        answered_at: float | None = None,
    ) -> Lease:
        """A lease the database granted for a request sent at ``requested_at``."""
        margin = min(margin, duration / 4)
        answered = requested_at if answered_at is None else max(answered_at, requested_at)
        return cls(
            duration=duration,
            margin=margin,
            trust_until=requested_at + duration - margin,
            renew_at=requested_at + duration / 3,
            held_until=answered + duration,
        )

    def renewed(self, *, requested_at: float, answered_at: float | None = None) -> None:
        """The database extended the lease for a request sent at ``requested_at``."""
        answered = requested_at if answered_at is None else max(answered_at, requested_at)
        self.trust_until = max(self.trust_until, requested_at + self.duration - self.margin)
        self.renew_at = requested_at + self.duration / 3
        self.held_until = max(self.held_until, answered + self.duration)

    def renewal_failed(self, *, now: float, retry_in: float = 1.0) -> None:
        """The renewal could not reach the database; try again soon, trust unchanged.

        The renewal may still have taken effect (sent, committed, answer lost),
        so the database may hold the lease until ``now + duration``.
        """
        self.renew_at = min(now + retry_in, self.trust_until)
        self.held_until = max(self.held_until, now + self.duration)

    def released(self) -> None:
        """The database said the lease is no longer ours (reaped, cancelled, re-claimed)."""
        self.held_until = float("-inf")

    def due_for_renewal(self, now: float) -> bool:
        return now >= self.renew_at

    def trusted(self, now: float) -> bool:
        return now < self.trust_until

    def maybe_held(self, now: float) -> bool:
        """Whether the database may still count this lease as live."""
        return now < self.held_until
