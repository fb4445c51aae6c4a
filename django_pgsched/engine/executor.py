"""The executor: claims due runs, runs their jobs, records the outcomes.

The seed's three lease rules, as code:

1. **Claim no more than the pool can start.** A pass claims at most the number
   of idle slots. A slot stays busy while its thread runs, even after the run
   timed out or its lease was lost; and an abandoned run keeps its slot until
   the database's lease on it has certainly expired, so the database never
   counts more live leases for this replica than it has slots.
2. **Renew while in flight, abandon when lost.** Each claim carries a fresh
   token and a lease of ``LEASE_FACTOR × timeout``; leases are renewed in one
   statement when a third has passed. A renewal that no longer finds the token
   (the run was reaped or cancelled), or a lease whose local trust deadline
   passes (the database is unreachable), cancels the job's context and
   discards its result.
3. **Every write carries the token.** Completion, retry and release predicate
   on ``claimed_by`` still being ours. Outcomes are written in batches, the
   run's new state and its attempt row in one statement; if that fails for a
   reason other than a lost connection, a minimal write still moves the run
   out of ``running``.

Jobs run in daemon threads. Python cannot kill a thread, so a timeout is a
request: past it the job's context reports cancelled, and when the function
returns (whatever it returns) the attempt is recorded ``timed_out``. Until then
the run stays leased and renewed and its slot stays busy, so a job that ignores
``is_cancelled()`` is never run a second time alongside itself.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError

from .. import events
from ..conf import Settings, get_settings
from ..context import RunContext
from ..registry import all_jobs
from . import db, failpoints
from .claims import Claim, Outcome, clean_text, invoke
from .leases import Lease
from .policies import retry_delay

logger = logging.getLogger(__name__)

MAX_ERROR_CHARS = 8000
CLAIM_FULL_SCAN_INTERVAL = 1.0  # seconds between claims that read the claim index from the start
# A pass with outcomes to record first waits this long (at most) for the jobs
# still running, so that jobs ending together are recorded, and their slots
# refilled, by one statement instead of one each.
GATHER_WINDOW = 0.002


@dataclass(frozen=True)
class ExecutorPass:
    """What one executor pass did."""

    claimed: int = 0
    completed: int = 0
    renewed: int = 0
    lost: int = 0
    timed_out: int = 0
    next_due_in: float | None = None  # seconds until the next pending run is due, if known


@dataclass
class _Flags:
    stopping: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)


class Executor:
    """Runs claimed jobs on ``concurrency`` slots. ``run_once()`` does one pass.

    With ``inline=True`` jobs run in the calling thread during ``run_once()``
    (tests, ``--concurrency 0`` is not allowed); otherwise on daemon threads.
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
    ) -> None:
        self.settings = settings or get_settings()
        self.concurrency = concurrency or self.settings.CONCURRENCY
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.queues = list(queues) if queues else None
        self.worker_id = worker_id or db.default_worker_id()
        self.using = using or self.settings.DATABASE_ALIAS
        self.inline = inline
        self.clock = clock
        self.flags = _Flags(stopping=shutdown or threading.Event())
        # keyed by token: a run abandoned here may be re-claimed here while its old
        # claim still holds a slot
        self.in_flight: dict[uuid.UUID, Claim] = {}
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)  # a job's thread handed its claim back
        self._outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        self._unwritten: list[Outcome] = []
        self._work: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._next_due_mono: float | None = None
        self._due_retry = 0.05
        # The claim cursor: (fire_after, id) of the first run the last claim took.
        self._claim_floor: tuple[datetime, int] | None = None
        self._next_full_scan = 0.0

    # -- public --------------------------------------------------------------------

    @property
    def wake(self) -> threading.Event:
        return self.flags.wake

    def idle_slots(self) -> int:
        """Slots free for a claim.

        A slot whose job returned is free once its outcome is taken (the pass
        that claims for it records the outcome in the same statement). A slot
        whose run was abandoned is free once the job's thread is done with it
        and the database's lease has certainly expired.
        """
        with self._lock:
            self._drop_settled()
            return self.concurrency - sum(1 for c in self.in_flight.values() if c.state != "done")

    def _drop_settled(self) -> None:
        """Forget abandoned claims that no longer occupy a slot (call with the lock held)."""
        now = self.clock()
        for token, claim in list(self.in_flight.items()):
            if claim.state == "abandoned" and claim.returned and not claim.lease.maybe_held(now):
                del self.in_flight[token]

    def run_once(self, now: datetime | None = None) -> ExecutorPass:
        """One pass: expire local deadlines, renew, then record outcomes and claim idle slots.

        Recording and claiming share one statement (one round trip, one commit).
        ``now`` overrides the database clock in the SQL (tests only).
        """
        timed_out, lost = self._expire_local()
        self._gather()
        with db.session("executor", self.using) as conn:
            renewed, lost_renewing = self._renew(conn, now)
            limit = 0 if self.flags.stopping.is_set() else self.idle_slots()
            claimed, completed, next_due = self._exchange(conn, now, limit)
            for claim in claimed:
                self._submit(claim)
            if self.inline and claimed:
                completed += self._exchange(conn, now, 0)[1]  # record what just ran
        events.loop_ticked.send(sender=type(self), loop="executor")
        return ExecutorPass(
            claimed=len(claimed),
            completed=completed,
            renewed=renewed,
            lost=lost + lost_renewing,
            timed_out=timed_out,
            next_due_in=next_due,
        )

    def _gather(self) -> None:
        """With an outcome to record, wait up to ``GATHER_WINDOW`` for the other jobs to end.

        Real time, not ``self.clock``: the wait is bounded whatever clock tests inject.
        """
        if self.inline or self._outcomes.empty():
            return
        deadline = time.monotonic() + GATHER_WINDOW
        with self._returned:
            while any(c.state in ("queued", "running") for c in self.in_flight.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._returned.wait(remaining)
        # The wake-ups of the jobs gathered here are served by this pass (and a
        # NOTIFY that arrived meanwhile by its claim, which reads after it).
        self.flags.wake.clear()

    def seconds_until_next_pass(self) -> float:
        """How long the runner may sleep before the next pass is needed."""
        now = self.clock()
        deadlines = [now + self.settings.EXECUTOR_POLL_INTERVAL.total_seconds()]
        if self._unwritten or not self._outcomes.empty():
            return 0.0
        with self._lock:
            for claim in self.in_flight.values():
                if claim.state in ("queued", "running", "overdue"):
                    deadlines.append(claim.lease.renew_at)
                    deadlines.append(claim.lease.trust_until)
                    deadlines.append(claim.context.deadline)
                elif claim.state == "abandoned" and claim.returned:
                    deadlines.append(claim.lease.held_until)  # when its slot frees
            idle = self.concurrency - len(self.in_flight)
        if idle > 0 and self._next_due_mono is not None and not self.flags.stopping.is_set():
            deadlines.append(self._next_due_mono)
        return max(0.0, min(deadlines) - now)

    def start_threads(self) -> None:
        """Start the slot threads (not needed with ``inline=True``)."""
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._slot, name=f"pgsched-slot-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def release_unstarted(self) -> int:
        """Give back claimed runs whose jobs have not started (shutdown), fenced on the token."""
        with self._lock:
            unstarted = [c for c in self.in_flight.values() if c.state == "queued"]
            for claim in unstarted:
                claim.state = "released"
        if not unstarted:
            return 0
        with db.session("executor", self.using) as conn:
            released = db.fetchall(
                conn,
                "executor_release",
                {"ids": [c.run_id for c in unstarted], "tokens": [c.token for c in unstarted]},
            )
            db.fetchall(conn, "wake_executors", {"payload": ",".join(str(r[0]) for r in released)})
        with self._lock:
            for claim in unstarted:
                self.in_flight.pop(claim.token, None)
        logger.info("released %d claimed but unstarted run(s)", len(released))
        return len(released)

    def abandon_running(self, reason: str) -> list[Claim]:
        """Mark every started job's run as interrupted (shutdown past the grace period)."""
        interrupted: list[Claim] = []
        with self._lock:
            for claim in self.in_flight.values():
                if claim.state in ("running", "overdue"):
                    claim.state = "interrupted"
                    claim.context.cancel(reason)
                    interrupted.append(claim)
        for claim in interrupted:
            self._outcomes.put(Outcome(claim, "failed", reason, self._elapsed(claim)))
        return interrupted

    def busy(self) -> int:
        """Jobs still running on a thread (including ones timed out or abandoned)."""
        with self._lock:
            return sum(1 for c in self.in_flight.values() if c.state != "released")

    def drained(self) -> bool:
        """Nothing left to run or record (threads of timed-out jobs may still be running)."""
        if self._unwritten or not self._outcomes.empty():
            return False
        with self._lock:
            return not any(
                c.state in ("queued", "running", "overdue", "done") for c in self.in_flight.values()
            )

    def flush(self, now: datetime | None = None) -> int:
        """Write every finished outcome now, claiming nothing."""
        with db.session("executor", self.using) as conn:
            return self._exchange(conn, now, 0)[1]

    # -- recording and claiming ----------------------------------------------------------

    def _take_outcomes(self) -> list[Outcome]:
        while True:
            try:
                self._unwritten.append(self._outcomes.get_nowait())
            except queue.Empty:
                break
        return [o for o in self._unwritten if o.claim.state != "abandoned"]

    def _exchange(
        self, conn: Any, now: datetime | None, limit: int
    ) -> tuple[list[Claim], int, float | None]:
        """Record finished outcomes and claim up to ``limit`` runs, in one statement.

        Returns (claims, outcomes recorded, seconds until the next run is due).
        """
        outcomes = self._take_outcomes()
        jobs = sorted(all_jobs())
        if not jobs:
            limit = 0
        if not outcomes and limit == 0:
            self._unwritten = []
            return [], 0, None
        if outcomes:
            failpoints.hit("executor.before_record")
        requested_at = self.clock()
        try:
            floor = self._floor_for_this_pass(limit)
            rows = db.fetchall(
                conn, "executor_pass", self._pass_params(now, outcomes, limit, jobs, floor)
            )
        except (OperationalError, InterfaceError):
            raise  # connection trouble: outcomes stay unwritten; retried while leases are trusted
        except DatabaseError:
            if not outcomes:
                raise
            logger.exception("recording %d outcome(s) failed; recording one by one", len(outcomes))
            rows = []
            for outcome in outcomes:
                rows += [
                    ("f", r[0], *([None] * 12), r[1])
                    for r in self._write_one_or_minimal(conn, now, outcome)
                ]
            rows += db.fetchall(
                conn, "executor_pass", self._pass_params(now, [], limit, jobs, floor)
            )
        answered_at = self.clock()
        self._unwritten = []
        finished = [(row[1], row[14]) for row in rows if row[0] == "f"]
        if outcomes:
            failpoints.hit("executor.after_record")
            self._finish(outcomes, finished)
        claims = [self._new_claim(row, requested_at, answered_at) for row in rows if row[0] == "c"]
        if limit:
            self._move_claim_floor(rows, floor, full=len(claims) == limit)
        if claims:
            with self._lock:
                for claim in claims:
                    self.in_flight[claim.token] = claim
            failpoints.hit("executor.after_claim")
            self._due_retry = 0.05
        next_due = None
        if limit and len(claims) < limit:
            for row in rows:
                if row[0] == "n":
                    next_due = self._note_next_due(row[12], row[13])
        return claims, len(finished), next_due

    def _floor_for_this_pass(self, limit: int) -> tuple[datetime, int] | None:
        """Where this pass's claim starts reading ``pgsched_run_claimable_idx``.

        Each claim leaves the claimed runs' old versions in the claim index until
        vacuum removes them, and vacuum cannot while a transaction anywhere in
        the database holds an old snapshot: a claim that always read from the
        start would walk every run claimed since then, and slow down the longer
        that transaction stays open. So a claim reads from where the last one
        started. A run that falls due behind that point (planned late, or
        released by a stopping replica) is found by a full read, which happens
        at least every ``CLAIM_FULL_SCAN_INTERVAL`` seconds and whenever a read
        from the cursor did not fill the idle slots.
        """
        if not limit or self._claim_floor is None or self.clock() >= self._next_full_scan:
            return None
        return self._claim_floor

    def _move_claim_floor(
        self, rows: Sequence[tuple[Any, ...]], floor: tuple[datetime, int] | None, *, full: bool
    ) -> None:
        if floor is None:
            self._next_full_scan = self.clock() + CLAIM_FULL_SCAN_INTERVAL
        if not full:  # the slots were not all filled: read from the start next time
            self._claim_floor = None
            return
        self._claim_floor = min((row[12], row[1]) for row in rows if row[0] == "c")

    def _pass_params(
        self,
        now: datetime | None,
        outcomes: Sequence[Outcome],
        limit: int,
        jobs: list[str],
        floor: tuple[datetime, int] | None = None,
    ) -> dict[str, Any]:
        s = self.settings
        return {
            "now": now,
            "floor_at": floor[0] if floor else None,
            "floor_id": floor[1] if floor else None,
            "ids": [o.claim.run_id for o in outcomes],
            "tokens": [o.claim.token for o in outcomes],
            "results": [o.result for o in outcomes],
            "errors": [o.error for o in outcomes],
            "delays": [self._delay(o) for o in outcomes],
            "limit": limit,
            "jobs": jobs,
            "queues": self.queues,
            "worker": self.worker_id,
            "lease_factor": s.LEASE_FACTOR,
        }

    def _delay(self, outcome: Outcome) -> float | None:
        """Seconds before a retry; None means "do not retry"."""
        if not outcome.retry:
            return None
        s = self.settings
        return retry_delay(
            outcome.claim.attempt,
            base=s.RETRY_BACKOFF_BASE,
            cap=s.RETRY_BACKOFF_MAX,
            jitter=random.random(),
        )

    def _new_claim(self, row: tuple[Any, ...], requested_at: float, answered_at: float) -> Claim:
        (
            _kind,
            run_id,
            token,
            attempt,
            max_attempts,
            timeout,
            job,
            queue_name,
            raw_kwargs,
            schedule_name,
            scheduled_for,
            key,
            fire_after,
            started_at,
            _status,
        ) = row
        s = self.settings
        kwargs = json.loads(raw_kwargs) if isinstance(raw_kwargs, str) else raw_kwargs
        lease = Lease.granted(
            requested_at=requested_at,
            answered_at=answered_at,
            duration=timeout.total_seconds() * s.LEASE_FACTOR,
            margin=s.LEASE_TRUST_MARGIN.total_seconds(),
        )
        context = RunContext(
            job_run_id=run_id,
            job=job,
            schedule_name=schedule_name,
            scheduled_for=scheduled_for,
            attempt=attempt,
            max_attempts=max_attempts,
            idempotency_key=key,
            worker=self.worker_id,
            _shutdown=self.flags.stopping,
            _clock=self.clock,
        )
        return Claim(
            run_id,
            token,
            attempt,
            max_attempts,
            timeout,
            job,
            queue_name,
            kwargs,
            schedule_name,
            scheduled_for,
            key,
            fire_after,
            started_at,
            lease,
            context,
        )

    def _note_next_due(self, due: datetime | None, db_clock: datetime) -> float | None:
        """Remember when the next pending run is due (database clock -> local clock)."""
        if due is None:
            self._next_due_mono = None
            return None
        wait: float = (due - db_clock).total_seconds()
        if wait <= 0:
            # due but not claimable: another replica holds it for a moment; back off briefly
            wait = self._due_retry
            self._due_retry = min(self._due_retry * 2, 1.0)
        else:
            self._due_retry = 0.05
        self._next_due_mono = self.clock() + wait
        return wait

    # -- running -----------------------------------------------------------------------

    def _submit(self, claim: Claim) -> None:
        if self.inline:
            self._run(claim)
        else:
            self._work.put(claim)

    def _slot(self) -> None:
        while True:
            claim = self._work.get()
            if claim is None:
                return
            self._run(claim)

    def _run(self, claim: Claim) -> None:
        with self._lock:
            if claim.state != "queued":
                return  # released while waiting for a slot
            claim.state = "running"
            claim.started_mono = self.clock()
            claim.context.deadline = claim.started_mono + claim.timeout.total_seconds()
        result, error, retry = invoke(claim, like_a_request=not self.inline)
        failpoints.hit("executor.after_job")
        with self._lock:
            state = claim.state
            if state == "running" and self.clock() >= claim.context.deadline:
                state = "overdue"  # returned, but too late
            if state in ("running", "overdue"):
                # Queued before the slot shows idle: a pass that counts this slot as
                # free also records this outcome, so the run's attempt ends in the
                # statement that claims its successor (never one run too many).
                self._outcomes.put(self._outcome(claim, state, result, error, retry))
                claim.state = "done"
            elif state == "abandoned":  # the result is discarded; the slot frees with the lease
                claim.returned = True
                self._drop_settled()
            else:  # interrupted at shutdown (its outcome is already queued): the slot frees
                self.in_flight.pop(claim.token, None)
            self._returned.notify_all()
        if state not in ("running", "overdue") and result == "succeeded":
            logger.warning(
                "run %s finished after its lease was lost or the replica gave it "
                "up; its result was discarded",
                claim.run_id,
            )
        self.flags.wake.set()

    def _outcome(self, claim: Claim, state: str, result: str, error: str, retry: bool) -> Outcome:
        if state == "overdue":
            error = (
                f"timed out: still running {claim.timeout.total_seconds():g}s after it "
                f"started; returned after {self._elapsed(claim):.3g}s\n{error}"
            ).rstrip()
            return Outcome(claim, "timed_out", error, self._elapsed(claim))
        return Outcome(claim, result, error, self._elapsed(claim), retry)

    def _elapsed(self, claim: Claim) -> float:
        return self.clock() - claim.started_mono if claim.started_mono is not None else 0.0

    # -- leases -------------------------------------------------------------------------

    def _expire_local(self) -> tuple[int, int]:
        """Timeouts and lost trust, by this replica's monotonic clock."""
        now = self.clock()
        overdue: list[Claim] = []
        lost: list[Claim] = []
        with self._lock:
            for claim in list(self.in_flight.values()):
                if claim.state in ("queued", "running", "overdue") and not claim.lease.trusted(now):
                    claim.context.cancel("the lease could not be renewed in time")
                    if claim.state == "queued":
                        claim.returned = True  # its job never starts
                    claim.state = "abandoned"
                    lost.append(claim)
                elif claim.state == "running" and now >= claim.context.deadline:
                    claim.state = "overdue"  # stays leased until its thread returns
                    claim.context.cancel("the timeout passed")
                    overdue.append(claim)
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

    def _renew(self, conn: Any, now: datetime | None) -> tuple[int, int]:
        mono = self.clock()
        with self._lock:
            due = [
                c
                for c in self.in_flight.values()
                if c.state in ("queued", "running", "overdue", "done")
                and c.lease.due_for_renewal(mono)
            ]
        if not due:
            return 0, 0
        failpoints.hit("executor.before_renew")
        try:
            rows = db.fetchall(
                conn,
                "executor_renew",
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
        kept = {row[0] for row in rows}
        lost = [c for c in due if c.run_id not in kept]
        with self._lock:
            for claim in due:
                if claim.run_id in kept:
                    claim.lease.renewed(requested_at=mono, answered_at=answered)
            for claim in lost:
                claim.context.cancel("the lease was lost (reaped or cancelled)")
                claim.lease.released()  # the database no longer counts it as ours
                if claim.state in ("queued", "done"):
                    claim.returned = True  # never started, or its outcome will be refused
                claim.state = "abandoned"
            self._drop_settled()
        for claim in lost:
            logger.warning("run %s: lease lost; abandoning it", claim.run_id)
            events.lease_lost.send(sender=type(self), run_id=claim.run_id, reason="renewal refused")
        return len(kept), len(lost)

    # -- recording ----------------------------------------------------------------------

    def _write(
        self, conn: Any, now: datetime | None, outcomes: Sequence[Outcome]
    ) -> list[tuple[Any, ...]]:
        """Record outcomes alone (the fallback path): rows of (id, status)."""
        rows = db.fetchall(conn, "executor_pass", self._pass_params(now, outcomes, 0, []))
        return [(row[1], row[14]) for row in rows if row[0] == "f"]

    def _write_one_or_minimal(
        self, conn: Any, now: datetime | None, outcome: Outcome
    ) -> list[tuple[Any, ...]]:
        from django.db import transaction

        try:
            with transaction.atomic(using=self.using):
                return self._write(conn, now, [outcome])
        except (OperationalError, InterfaceError):
            raise
        except DatabaseError as exc:
            logger.error(
                "run %s: outcome could not be recorded (%s); failing it minimally",
                outcome.claim.run_id,
                exc,
            )
            rows = db.fetchall(
                conn,
                "executor_fail_minimal",
                {
                    "now": now,
                    "id": outcome.claim.run_id,
                    "token": outcome.claim.token,
                    "delay": self._delay(outcome),
                    "note": clean_text(f"outcome could not be recorded: {exc}")[:2000],
                },
            )
            return [(r[0], r[1]) for r in rows]

    def _finish(self, outcomes: Sequence[Outcome], rows: Sequence[tuple[Any, ...]]) -> None:
        status_by_id = {row[0]: row[1] for row in rows}
        with self._lock:
            for outcome in outcomes:
                if outcome.claim.state == "done":
                    self.in_flight.pop(outcome.claim.token, None)
        for outcome in outcomes:
            claim = outcome.claim
            status = status_by_id.get(claim.run_id)
            if status is None:
                logger.warning(
                    "run %s: lease lost before its outcome was recorded; discarded", claim.run_id
                )
                events.lease_lost.send(
                    sender=type(self), run_id=claim.run_id, reason="completion refused"
                )
                continue
            events.attempt_finished.send(
                sender=type(self),
                run_id=claim.run_id,
                job=claim.job,
                queue=claim.queue,
                attempt=claim.attempt,
                outcome=outcome.result,
                status=status,
                duration=outcome.duration,
            )
