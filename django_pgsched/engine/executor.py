"""The executor: claims due runs, runs their jobs, records the outcomes.

The three lease rules (``docs/explanation/leases.md``), as code:

1. **Claim no more than the pool can start.** A pass claims at most the number
   of idle slots (``slots.py``). A slot stays busy while its thread runs, even
   after the run timed out or its lease was lost; and an abandoned run keeps
   its slot until the database's lease on it has certainly expired, so the
   database never counts more live leases for this replica than it has slots.
2. **Renew while in flight, abandon when lost.** Each claim carries a fresh
   token and the lease the database granted (``LEASE_FACTOR × timeout``);
   leases are renewed in one statement when a third has passed. A renewal that
   no longer finds the token (the run was reaped or cancelled), or a lease whose
   local trust deadline passes (the database is unreachable), cancels the job's
   context and discards its result (``claims.py``: the claim's lifecycle).
3. **Every write carries the token.** Completion, retry and release predicate
   on ``claimed_by`` still being ours. Outcomes are written in batches, the
   run's new state and its attempt row in one statement; if that fails for a
   reason other than a lost connection, a minimal write still moves the run
   out of ``running`` (``recording.py``).

One pass records the finished outcomes and claims for the idle slots in one
statement (``executor_pass``; ``claiming.py`` builds its claim).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import events
from ..conf import Settings, get_settings
from ..limits import MAX_ERROR_CHARS
from ..outcomes import LeaseLost
from ..registry import all_jobs
from ..statuses import AttemptStatus
from . import db, failpoints, queries, recording
from .claiming import (
    ClaimCursor,
    NextDue,
    claim_params,
    default_max_running,
    default_weight,
    new_claim,
)
from .claims import Claim, ClaimState, Outcome
from .guard import Guard
from .rows import ExecutorPassResult
from .slots import Slots

if TYPE_CHECKING:
    from .ports import ClaimSource

logger = logging.getLogger(__name__)

# A pass with outcomes to record first waits this long (at most) for the jobs
# still running, so that jobs ending together are recorded, and their slots
# refilled, by one statement instead of one each.
GATHER_WINDOW = 0.002
# A pass that left a due run unclaimed (an overlap policy or a start deadline may
# hold it back for good) runs the guard first, at most this often (seconds).
GUARD_INTERVAL = 0.5
# How often (seconds) a replica reads again whether any tenant has a max_running,
# which decides whether its passes also run the held claim (executor_held_lock):
# a tenant given one waits at most this long for its first claim after that.
HELD_RECHECK = 2.0
# The fair claim visits at most this many tenants with unfinished runs per pass, in
# key order from where the last one stopped (one index probe each).
FAIR_TENANTS = 64
# How often a replica runs the fair claim while contended (seconds). While two or
# more tenants have more runs due than their share, at every contended pass: the
# claims are shared. While only one has (a tenant's burst beside others whose due
# runs all fit in their shares), the interval doubles from FAIR_STEP up to
# FAIR_INTERVAL and the passes between run the usual claim alone: a fair pass costs
# about two usual ones (bench/fairness.py), and a run of the others that falls due
# during the burst waits at most about FAIR_INTERVAL for the next fair pass.
FAIR_STEP = 0.025
FAIR_INTERVAL = 0.25
# The guarded claim (runs with an overlap policy or a start deadline: executor_guarded_pick)
# runs in every pass that left a due run unclaimed (such passes are paced by NextDue),
# and, while the passes fill every idle slot, before the usual claim: at every such
# pass while it finds runs, and once it finds none, after an interval that doubles
# from GUARDED_STEP up to GUARDED_INTERVAL (seconds).
GUARDED_STEP = 0.05
GUARDED_INTERVAL = 1.0


@dataclass(frozen=True)
class ExecutorPass:
    """What one executor pass did."""

    claimed: int = 0
    completed: int = 0
    renewed: int = 0
    lost: int = 0
    timed_out: int = 0
    next_due_in: float | None = None  # seconds until the next pending run is due, if known


@dataclass(frozen=True)
class Exchange:
    """What one ``executor_pass`` statement did: claims made, outcomes recorded."""

    claims: list[Claim]
    recorded: int
    next_due_in: float | None


class Executor:
    """Runs claimed jobs on ``concurrency`` slots. ``run_once()`` does one pass.

    With ``inline=True`` jobs run in the calling thread during ``run_once()``;
    otherwise on the slot threads that :meth:`start_threads` starts. To run due
    jobs in a test, use :func:`django_pgsched.testing.run_due`.
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        settings: Settings | None = None,
        using: str | None = None,
        inline: bool = False,
        shutdown: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        broker: ClaimSource | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        # a claim transport's claim source (engine/ports.py; the broker's: broker/consumer.py)
        self.broker = broker
        self.concurrency = concurrency or self.settings.CONCURRENCY
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.queues = list(queues) if queues else None
        self.worker_id = worker_id or db.default_worker_id()
        self.using = using or self.settings.DATABASE_ALIAS
        self.inline = inline
        self.clock = clock
        self.stopping = shutdown or threading.Event()
        self.wake = threading.Event()
        keep = self.settings.JOB_CONNECTION_MAX_AGE
        self.slots = Slots(
            self.concurrency,
            clock=clock,
            wake=self.wake,
            inline=inline,
            keep_connections_for=None if keep is None else keep.total_seconds(),
        )
        self._unwritten: list[Outcome] = []  # taken from the slots, not yet written
        self.claim_cursor = ClaimCursor(clock)
        self._next_due = NextDue(clock)
        self._claim_again = False  # a pass failed unreadable claims: claim for their slots now
        # where the months that may hold an unfinished run start (pgsched_run_horizon), as
        # the last pass read it; each pass reads only those months (None: every month)
        self._live_since: datetime | None = None
        self.lease_sessions = db.SessionPool(self.using, "executor")
        self.guard = Guard(settings=self.settings, using=self.using, role="executor")
        self._guard_wanted = False
        self._guard_after = 0.0  # monotonic
        self._held = False  # a tenant has a max_running (see _held_tenants)
        self._tenanted_runs = False  # an unfinished run has a tenant (see _tenanted)
        self._tenanted_checked_at = -HELD_RECHECK
        self._contended = False  # the last pass filled every idle slot
        self._fair_after = ""  # the fair claim's rotation: the last tenant it visited
        self._fair_next = 0.0  # monotonic: no fair claim before (FAIR_INTERVAL)
        self._fair_wait = 0.0  # the interval after the last fair claim
        self._held_checked_at = -HELD_RECHECK
        self._due_unclaimed = False  # the last pass left a due run unclaimed
        self._guarded_next = 0.0  # monotonic: no guarded claim before (GUARDED_INTERVAL)
        self._guarded_wait = 0.0  # the interval after the last guarded claim
        # where the usual claim's last full pass ended in the claim's order (-priority,
        # fire_after, id): the guarded claim of a contended pass goes no further
        self._passed: tuple[int, datetime, int] | None = None

    # -- public --------------------------------------------------------------------

    @property
    def in_flight(self) -> dict[Any, Claim]:
        """The claims this executor holds, by lease token."""
        return self.slots.claims

    def idle_slots(self) -> int:
        """Slots free for a claim (lease rule 1: a pass claims no more)."""
        return self.slots.idle()

    def run_once(self, now: datetime | None = None) -> ExecutorPass:
        """One pass: expire local deadlines, renew, then record outcomes and claim idle slots.

        Recording and claiming share one statement (one round trip, one commit).
        ``now`` overrides the database clock in the SQL (tests only).
        """
        timed_out, lost = self._expire_local()
        self._run_guard(now)
        self.slots.gather(GATHER_WINDOW)
        with db.session("executor", self.using) as conn:
            renewed, lost_renewing = self._renew(conn, now)
            limit = 0 if self.stopping.is_set() else self.idle_slots()
            fair = Exchange([], 0, None)
            if (
                limit
                and self._contended
                and self.clock() >= self._fair_next
                and self._tenanted(conn)
            ):
                fair = self._exchange_fair(conn, now, limit)
            guarded = Exchange([], 0, None)
            if (
                limit > len(fair.claims)
                and self._contended
                and self._passed is not None
                and self._guarded_wanted()
            ):  # every slot taken at each pass: the guarded runs the claim passed over
                guarded = self._exchange_guarded(
                    conn, now, limit - len(fair.claims), up_to=self._passed
                )
            exchange = self._exchange(conn, now, limit - len(fair.claims) - len(guarded.claims))
            exchange = Exchange(
                fair.claims + guarded.claims + exchange.claims,
                fair.recorded + guarded.recorded + exchange.recorded,
                exchange.next_due_in,
            )
            if limit:  # demand beyond supply: the next pass shares its claim by weight
                self._contended = len(exchange.claims) >= limit
            left = limit - len(exchange.claims)
            if left > 0 and self._due_unclaimed and self.broker is None:
                # a due run the claim left: perhaps one with an overlap policy or a deadline
                more = self._exchange_guarded(conn, now, left)
                exchange = Exchange(
                    exchange.claims + more.claims,
                    exchange.recorded + more.recorded,
                    exchange.next_due_in,
                )
                left -= len(more.claims)
            if left > 0 and self._held_tenants(conn):
                held = self._exchange_held(conn, now, left)
                exchange = Exchange(
                    exchange.claims + held.claims,
                    exchange.recorded + held.recorded,
                    exchange.next_due_in,
                )
            self.slots.submit(exchange.claims)
            completed = exchange.recorded
            if self.inline and exchange.claims:
                completed += self._exchange(conn, now, 0).recorded  # record what just ran
        if self.broker is not None:
            self.broker.settle(self.slots.claims)
        events.loop_ticked.send(sender=type(self), loop="executor")
        return ExecutorPass(
            claimed=len(exchange.claims),
            completed=completed,
            renewed=renewed,
            lost=lost + lost_renewing,
            timed_out=timed_out,
            next_due_in=exchange.next_due_in,
        )

    def _run_guard(self, now: datetime | None) -> None:
        """The guard, when the last pass left a due run unclaimed (see engine/guard.py)."""
        if not self._guard_wanted or self.stopping.is_set() or self.clock() < self._guard_after:
            return
        self._guard_wanted = False
        self._guard_after = self.clock() + GUARD_INTERVAL
        try:
            self.guard.run_once(now)
        except (OperationalError, InterfaceError):
            raise
        except DatabaseError:  # never let it stop the claims; the maintenance loop retries
            logger.exception("the guard pass failed")

    def seconds_until_next_pass(self) -> float:
        """How long the runner may sleep before the next pass is needed."""
        if self._unwritten or not self.slots.outcomes.empty() or self._claim_again:
            return 0.0
        now = self.clock()
        if self.broker is not None and self.broker.active and not self.stopping.is_set():
            if self.slots.idle():
                return 0.0  # the next pass's fetch waits for a message (FETCH_WAIT)
        deadlines = [now + self.settings.EXECUTOR_POLL_INTERVAL.total_seconds()]
        deadlines += self.slots.wake_times()
        due = self._next_due.at
        if due is not None and not self.slots.all_taken() and not self.stopping.is_set():
            deadlines.append(due)
        return max(0.0, min(deadlines) - now)

    def start_threads(self) -> None:
        """Start the slot threads (not needed with ``inline=True``)."""
        self.slots.start_threads()

    def stop_threads(self, timeout: float = 5.0) -> None:
        """End the slot threads, each closing the connections it kept for its jobs."""
        self.slots.stop_threads(timeout)

    def release_unstarted(self) -> int:
        """Give back claimed runs whose jobs have not started (shutdown), fenced on the token."""
        with self.slots.lock:
            unstarted = [c for c in self.slots.claims.values() if c.release()]
        if not unstarted:
            return 0
        with db.session("executor", self.using) as conn:
            released = db.fetch(
                conn,
                queries.EXECUTOR_RELEASE,
                {"ids": [c.run_id for c in unstarted], "tokens": [c.token for c in unstarted]},
            )
            payload = ",".join(str(row.id) for row in released)
            db.fetch(conn, queries.WAKE_EXECUTORS, {"payload": payload})
        self.slots.forget(unstarted)
        if self.broker is not None:
            self.broker.settle(self.slots.claims)
        logger.info("released %d claimed but unstarted run(s)", len(released))
        return len(released)

    def abandon_running(self, reason: str) -> list[Claim]:
        """Mark every started job's run as interrupted (shutdown past the grace period)."""
        with self.slots.lock:
            interrupted = [c for c in self.slots.claims.values() if c.interrupt(reason)]
        now = self.clock()
        for claim in interrupted:
            self.slots.outcomes.put(
                Outcome(claim, AttemptStatus.FAILED, reason, claim.elapsed(now))
            )
        return interrupted

    def busy(self) -> int:
        """Jobs still running on a thread (including ones timed out or abandoned)."""
        return self.slots.busy()

    def drained(self) -> bool:
        """Nothing left to run or record (threads of timed-out jobs may still be running)."""
        if self._unwritten or not self.slots.outcomes.empty():
            return False
        return self.slots.drained()

    def flush(self, now: datetime | None = None) -> int:
        """Write every finished outcome now, claiming nothing."""
        with db.session("executor", self.using) as conn:
            return self._exchange(conn, now, 0).recorded

    # -- recording and claiming ----------------------------------------------------------

    def _exchange(
        self,
        conn: BaseDatabaseWrapper,
        now: datetime | None,
        limit: int,
        held: list[int] | None = None,
        fair: list[int] | None = None,
        guarded: list[int] | None = None,
    ) -> Exchange:
        """Record finished outcomes and claim up to ``limit`` runs, in one statement.

        ``held``: claim these runs of held tenants by id (:meth:`_exchange_held`);
        ``fair``: these runs, by id (:meth:`_exchange_fair`); ``guarded``: these
        runs with an overlap policy or a start deadline (:meth:`_exchange_guarded`).
        """
        self._claim_again = False
        outcomes = self.slots.take_outcomes(self._unwritten)
        jobs = sorted(all_jobs())
        if not jobs:
            limit = 0
        if not outcomes and limit == 0:
            self._unwritten = []
            return Exchange([], 0, None)
        named = next((ids for ids in (held, fair, guarded) if ids is not None), None)
        by_id = named if named is not None else self._pull(limit, waiting=bool(outcomes))
        if by_id is not None:  # claim these runs by id (PGSCHED["CLAIMS"]: the broker's)
            limit = len(by_id)
            if not outcomes and not by_id:
                self._unwritten = []
                return Exchange([], 0, None)
        if outcomes:
            failpoints.hit("executor.before_record")
        deferred = [o for o in outcomes if o.defer is not None]
        if deferred:  # rare: their own statement, before the pass
            outcomes = [o for o in outcomes if o.defer is None]
            written = recording.record_defers(conn, now, deferred, self.settings)
            self._unwritten = [o for o in self._unwritten if o.defer is None]
            self.slots.forget_recorded(deferred)
            recording.announce(type(self), deferred, written)
            if not outcomes and limit == 0:
                return Exchange([], len(written), None)
        requested_at = self.clock()
        floor = self.claim_cursor.for_pass(limit) if by_id is None else None
        claiming = claim_params(
            limit=limit,
            jobs=jobs,
            queues=self.queues,
            worker=self.worker_id,
            settings=self.settings,
            floor=floor,
        )
        if by_id is not None:
            claiming["claim_ids"] = by_id
            claiming["held"] = held is not None
            claiming["own"] = named is not None
        try:
            result = self._pass(
                conn, now, recording.record_params(outcomes, self.settings), claiming
            )
        except (OperationalError, InterfaceError):
            self._give_back()
            raise  # connection trouble: outcomes stay unwritten; retried while leases are trusted
        except DatabaseError:
            if not outcomes:
                self._give_back()
                raise
            logger.exception("recording %d outcome(s) failed; recording one by one", len(outcomes))
            recorded = recording.record_one_by_one(conn, now, outcomes, self.settings, self.using)
            result = self._pass(conn, now, recording.NOTHING_TO_RECORD, claiming)
            result = ExecutorPassResult({**recorded, **result.recorded}, *_rest(result))
        answered_at = self.clock()
        self._unwritten = []
        if outcomes:
            failpoints.hit("executor.after_record")
            self.slots.forget_recorded(outcomes)
            recording.announce(type(self), outcomes, result.recorded)
        claims = [
            new_claim(
                row,
                requested_at=requested_at,
                answered_at=answered_at,
                settings=self.settings,
                worker=self.worker_id,
                shutdown=self.stopping,
                clock=self.clock,
            )
            for row in result.claimed
        ]
        if named is not None:
            pass  # not the broker's: its claims are this replica's own
        elif by_id is not None:
            self._claimed_by_id(claims)
        elif limit:
            self.claim_cursor.move(floor, result.claimed, full=len(claims) == limit)
            self._passed = (
                max((-row.priority, row.fire_after, row.id or 0) for row in result.claimed)
                if len(result.claimed) == limit
                else None
            )
            if self.broker is not None:
                self.broker.swept(claims)
        unreadable = [claim for claim in claims if claim.unreadable]
        self._claim_again = self._claim_again or bool(unreadable)
        if unreadable:  # each fails on its own; every other claim of the pass runs
            claims = [claim for claim in claims if not claim.unreadable]
            self._fail_unreadable(conn, now, unreadable)
            # their slots are free again: the next pass claims at once, from the start
            # (the claim cursor moved past runs they displaced, and no next due was said)
            self.claim_cursor.reset()
        for claim in claims:
            claim.context._lease_check = partial(self.ensure_lease, claim)
        if claims:
            self.slots.add(claims)
            failpoints.hit("executor.after_claim")
            self._next_due.claimed()
        next_due = None
        if limit and len(claims) < limit and by_id is None:
            next_due = self._next_due.note(result.next_due, result.db_now)
            if result.next_due is not None and result.next_due <= result.db_now:
                self._guard_wanted = True  # due, yet not claimed: perhaps never will be
                self._due_unclaimed = True
        elif by_id is None:
            self._due_unclaimed = False
        return Exchange(claims, len(result.recorded) + len(deferred), next_due)

    def _fail_unreadable(
        self, conn: BaseDatabaseWrapper, now: datetime | None, claims: list[Claim]
    ) -> None:
        """Fail claimed runs that cannot be run, for good, each fenced on its token.

        The attempt is recorded (an attempt row with the error, as evidence);
        the run is not retried: its row would read the same next time.
        """
        outcomes = []
        for claim in claims:
            claim.context._lease_check = None
            error = f"the run cannot be read: {claim.unreadable}"[:MAX_ERROR_CHARS]
            logger.error("run %s failed without running: %s", claim.run_id, error)
            outcomes.append(Outcome(claim, AttemptStatus.FAILED, error, 0.0, retry=False))
        recorded: dict[int, str] = {}
        for outcome in outcomes:
            recorded.update(
                recording.record_one_or_minimal(conn, now, outcome, self.settings, self.using)
            )
        recording.announce(type(self), outcomes, recorded)

    def _pass(
        self,
        conn: BaseDatabaseWrapper,
        now: datetime | None,
        record: Any,
        claim: Any,
    ) -> ExecutorPassResult:
        by_id = "claim_ids" in claim
        # a run named by the broker is looked up in every month: a horizon that moved
        # since the last pass never hides it
        live_since = None if by_id else self._live_since
        params = {"now": now, "live_since": live_since, **record, **claim}
        if claim.get("own"):
            statement = queries.EXECUTOR_PASS_BY_ID
        elif by_id and self.broker is not None:
            statement = self.broker.statement
        else:
            statement = queries.EXECUTOR_PASS
        result = ExecutorPassResult.from_rows(db.fetch(conn, statement, params))
        self._live_since = result.live_since
        if result.held_tenants is not None:  # read by the pass itself: no statement of its own
            self._held, self._held_checked_at = result.held_tenants, self.clock()
        if live_since is not None and (result.live_since is None or result.live_since < live_since):
            # an unfinished run was written into an older month since the last pass read
            # the horizon (a backfill, a retried old run): this pass did not look there
            self._claim_again = True
        return result

    # -- tenants with a max_running (held tenants) ------------------------------------------

    def _held_tenants(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether a tenant has a ``max_running`` (read again every HELD_RECHECK seconds).

        The claim never takes such a tenant's runs whatever this says (the database
        decides); this only decides whether a pass also runs the held claim.
        """
        if default_max_running(self.settings) is not None:
            return True  # every tenant without a record is held
        at = self.clock()
        if at >= self._held_checked_at + HELD_RECHECK:
            self._held_checked_at = at
            self._held = bool(db.fetch(conn, queries.HELD_TENANTS_EXIST, {})[0].held)
        return self._held

    def _tenanted(self, conn: BaseDatabaseWrapper) -> bool:
        """Whether an unfinished run has a tenant (read again every HELD_RECHECK seconds).

        Only then does a contended pass run the fair claim; with the broker's
        claims (``PGSCHED["CLAIMS"]``) it never does: the broker orders the claims.
        """
        if self.broker is not None:
            return False
        at = self.clock()
        if at >= self._tenanted_checked_at + HELD_RECHECK:
            self._tenanted_checked_at = at
            rows = db.fetch(conn, queries.TENANTED_RUNS_EXIST, {})
            self._tenanted_runs = bool(rows[0].tenanted)
        return self._tenanted_runs

    def _exchange_fair(
        self, conn: BaseDatabaseWrapper, now: datetime | None, limit: int
    ) -> Exchange:
        """Claim up to ``limit`` runs shared among tenants by weight (the fair claim).

        Run when the last pass filled every idle slot: one tenant's burst would
        otherwise take every claim until it is done. The picks are claimed by id
        in the transaction that picked (and locked) them; what they leave, the usual
        claim takes in its order.
        """
        if not all_jobs():
            return Exchange([], 0, None)
        with transaction.atomic(using=self.using):  # the picks stay locked until claimed
            return self._claim_fair(conn, now, limit)

    def _claim_fair(self, conn: BaseDatabaseWrapper, now: datetime | None, limit: int) -> Exchange:
        picked = db.fetch(
            conn,
            queries.EXECUTOR_FAIR_PICK,
            {
                **self._pick_params(now),
                "limit": limit,
                "after": self._fair_after,
                "tenants": FAIR_TENANTS,
                "default_weight": default_weight(self.settings),
                "default_held": default_max_running(self.settings) is not None,
            },
        )
        rotated = bool(picked) and picked[0].visited >= FAIR_TENANTS
        self._fair_after = (picked[0].last_visited or "") if rotated else ""
        if picked and picked[0].starved >= 2:  # tenants contend: share every pass
            self._fair_wait = 0.0
        else:  # at most one tenant wants more than its share: back off
            self._fair_wait = min(FAIR_INTERVAL, max(FAIR_STEP, 2 * self._fair_wait))
        self._fair_next = self.clock() + self._fair_wait
        if not picked:
            return Exchange([], 0, None)
        return self._exchange(conn, now, len(picked), fair=[row.id for row in picked])

    def _pick_params(self, now: datetime | None) -> dict[str, Any]:
        """What every pick of runs to claim by id reads (fair, guarded, held)."""
        return {
            "now": now,
            "live_since": self._live_since,
            "jobs": sorted(all_jobs()),
            "queues": self.queues,
        }

    def _guarded_wanted(self) -> bool:
        return (
            self.broker is None
            and not self.stopping.is_set()
            and (self.clock() >= self._guarded_next)
        )

    def _exchange_guarded(
        self,
        conn: BaseDatabaseWrapper,
        now: datetime | None,
        limit: int,
        up_to: tuple[int, datetime, int] | None = None,
    ) -> Exchange:
        """Claim up to ``limit`` runs with an overlap policy or a start deadline.

        Their rules are this step's, not the usual claim's (``executor_pass``
        leaves such runs out): ``executor_guarded_pick`` names the ones that may
        start now, and ``executor_pass_by_id`` claims them, checking the rules
        again under each run's lock. Without a broker only (the broker's claim
        by id checks the same rules for every run it names). ``up_to``: only runs
        at or before this place in the claim's order (a contended pass: the ones
        the usual claim passed over). A pick that does not fill ``limit`` backs
        off, so that under a backlog such runs are claimed a batch at a time.
        """
        self._due_unclaimed = False
        if not all_jobs():
            return Exchange([], 0, None)
        picked = db.fetch(
            conn,
            queries.EXECUTOR_GUARDED_PICK,
            {
                **self._pick_params(now),
                "default_held": default_max_running(self.settings) is not None,
                "limit": limit,
                "ceil_rank": up_to[0] if up_to else None,
                "ceil_at": up_to[1] if up_to else None,
                "ceil_id": up_to[2] if up_to else None,
            },
        )
        ids = [row.id for row in picked if row.id is not None]
        if up_to is None:  # after a pass that left a due run: is one held back?
            self._guard_wanted = picked[0].waiting > len(ids)
        if len(ids) >= limit:
            self._guarded_wait = 0.0
        else:
            self._guarded_wait = min(GUARDED_INTERVAL, max(GUARDED_STEP, 2 * self._guarded_wait))
        self._guarded_next = self.clock() + self._guarded_wait
        if not ids:
            return Exchange([], 0, None)
        return self._exchange(conn, now, len(ids), guarded=ids)

    def _exchange_held(
        self, conn: BaseDatabaseWrapper, now: datetime | None, limit: int
    ) -> Exchange:
        """Claim up to ``limit`` runs of held tenants, each within its ``max_running``.

        One transaction: each such tenant with a due run is locked (advisory, in key
        order), its live leases counted, its next runs picked, and those claimed by
        id; the commit releases the locks. Every replica does the same under the
        same locks, so the count is exact across replicas; a crashed replica's
        runs stop counting when their leases expire.
        """
        if self.stopping.is_set() or not all_jobs():
            return Exchange([], 0, None)
        base = {
            **self._pick_params(now),
            "default_max_running": default_max_running(self.settings),
        }
        with transaction.atomic(using=self.using):
            tenants = db.fetch(conn, queries.EXECUTOR_HELD_LOCK, base)
            if not tenants:
                return Exchange([], 0, None)
            picked = db.fetch(
                conn,
                queries.EXECUTOR_HELD_PICK,
                {
                    **base,
                    "keys": [t.key for t in tenants],
                    "maxes": [t.max_running for t in tenants],
                    "limit": limit,
                },
            )
            if not picked:
                return Exchange([], 0, None)
            return self._exchange(conn, now, len(picked), held=[row.id for row in picked])

    # -- a claim transport's claim step (PGSCHED["CLAIMS"], engine/ports.py) ---------------

    def _pull(self, limit: int, *, waiting: bool) -> list[int] | None:
        """Run ids to claim by id, from the broker; None: claim with SKIP LOCKED (as always)."""
        if self.broker is None or not limit:
            return None
        return self.broker.next_ids(limit, waiting=waiting)

    def _claimed_by_id(self, claims: list[Claim]) -> None:
        assert self.broker is not None
        self.broker.claimed(claims)

    def _give_back(self) -> None:
        if self.broker is not None:
            self.broker.give_back()

    # -- leases -------------------------------------------------------------------------

    def ensure_lease(self, claim: Claim, needed: float = 0.0) -> None:
        """Re-assert ``claim``'s lease now, from its job's thread (``RunContext.ensure_lease``).

        If this replica trusts the lease for ``needed`` more seconds, a fenced
        read (``executor_check``: the run still carries our token); else a
        fenced renewal (``executor_renew``). Either runs on a scheduler session
        of its own (``lease_sessions``), never on the job's connection. If the
        run is no longer ours, the claim is abandoned, as a renewal would, and
        :class:`LeaseLost` is raised; so it is if the lease cannot be trusted
        for ``needed`` more seconds (trust counts from when the renewal was
        sent: a slow answer does not stretch it).
        """
        failpoints.hit("executor.before_send")
        requested = self.clock()
        # trusted long enough already: a fenced read will do; else a fenced renewal
        renew = claim.lease.trust_until - requested < needed
        statement: Any = queries.EXECUTOR_RENEW if renew else queries.EXECUTOR_CHECK
        params = {
            "now": None,
            "ids": [claim.run_id],
            "tokens": [claim.token],
            "lease_factor": self.settings.LEASE_FACTOR,
        }
        try:
            if self.inline:  # the job runs in the loop's thread: its session (tests)
                rows = db.fetch(connections[self.using], statement, params)
            else:
                with self.lease_sessions.session() as conn:
                    rows = db.fetch(conn, statement, params)
        except DatabaseError as exc:
            raise LeaseLost(f"the lease could not be re-asserted: {exc}") from exc
        answered = self.clock()
        with self.slots.lock:
            if rows:
                if renew:
                    claim.lease.renewed(requested_at=requested, answered_at=answered)
            else:
                claim.lease.released()
                if claim.state.leased:
                    claim.abandon("the lease was lost (reaped or cancelled)")
        if not rows:
            logger.warning("run %s: lease lost before a request left; abandoning it", claim.run_id)
            events.lease_lost.send(sender=type(self), run_id=claim.run_id, reason="re-assert")
            raise LeaseLost("the run is no longer ours (reaped, cancelled or claimed again)")
        left = claim.lease.trust_until - self.clock()
        if left < needed:
            raise LeaseLost(f"the lease can be trusted {left:.3g}s more; {needed:.3g}s needed")

    def _expire_local(self) -> tuple[int, int]:
        """Timeouts and lost trust, by this replica's monotonic clock."""
        overdue, lost = self.slots.expire()
        for claim in overdue:
            logger.warning(
                "run %s passed its %gs timeout; asked it to stop",
                claim.run_id,
                claim.timeout.total_seconds(),
            )
        for claim in lost:
            logger.warning("run %s: lease no longer trusted; abandoning it", claim.run_id)
            events.lease_lost.send(sender=type(self), run_id=claim.run_id, reason="trust expired")
        return len(overdue), len(lost)

    def _renew(self, conn: BaseDatabaseWrapper, now: datetime | None) -> tuple[int, int]:
        mono = self.clock()
        due = self.slots.select(lambda c: c.state.leased and c.lease.due_for_renewal(mono))
        if not due:
            return 0, 0
        failpoints.hit("executor.before_renew")
        try:
            rows = db.fetch(
                conn,
                queries.EXECUTOR_RENEW,
                {
                    "now": now,
                    "ids": [c.run_id for c in due],
                    "tokens": [c.token for c in due],
                    "lease_factor": self.settings.LEASE_FACTOR,
                },
            )
        except (OperationalError, InterfaceError):
            for claim in due:
                claim.lease.renewal_failed(now=self.clock())
            raise
        answered = self.clock()
        kept = {row.id for row in rows}
        lost = [c for c in due if c.run_id not in kept]
        with self.slots.lock:
            for claim in due:
                if claim.run_id in kept:
                    claim.lease.renewed(requested_at=mono, answered_at=answered)
            for claim in lost:
                claim.lease.released()  # the database no longer counts it as ours
                if claim.state.leased:
                    claim.abandon("the lease was lost (reaped or cancelled)")
            self.slots.drop_settled()
        for claim in lost:
            logger.warning("run %s: lease lost; abandoning it", claim.run_id)
            events.lease_lost.send(sender=type(self), run_id=claim.run_id, reason="renewal refused")
        return len(kept), len(lost)


def _rest(result: ExecutorPassResult) -> tuple[Any, ...]:
    return result.claimed, result.next_due, result.db_now


__all__ = ["GATHER_WINDOW", "ClaimState", "Executor", "ExecutorPass", "Outcome"]
