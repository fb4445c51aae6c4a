"""The executor's slots: the claims it holds, the threads that run their jobs.

A :class:`Slots` owns every claim of one executor (keyed by lease token: a
run abandoned here may be re-claimed here while its old claim still holds a
slot), the slot threads, and the queue of outcomes their jobs produced. It
moves claims through their lifecycle (``claims.py``) under one lock, and says
how many slots are idle (lease rule 1: a pass never claims more).

Jobs run in daemon threads. Python cannot kill a thread, so a timeout is a
request: past it the job's context reports cancelled, and when the function
returns (whatever it returns) the attempt is recorded ``timed_out``. Until then
the run stays leased and renewed and its slot stays busy, so a job that ignores
``is_cancelled()`` is never run a second time alongside itself.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import NamedTuple

from django.db import connections

from ..limits import MAX_ERROR_CHARS
from ..outcomes import Defer, Fail, LeaseLost
from ..registry import get_job
from ..statuses import AttemptStatus
from . import failpoints
from .claims import Claim, ClaimState, Outcome
from .job_connections import JobConnections

logger = logging.getLogger(__name__)


class Slots:
    """``concurrency`` slots; ``inline=True`` runs each job in the thread that submits it."""

    def __init__(
        self,
        concurrency: int,
        *,
        clock: Callable[[], float],
        wake: threading.Event,
        inline: bool = False,
        keep_connections_for: float | None = None,
    ) -> None:
        self.concurrency = concurrency
        # how long a slot thread keeps a job's connection (engine/job_connections.py)
        self.keep_connections_for = keep_connections_for
        self.clock = clock
        self.wake = wake  # set whenever a job returns: there is an outcome to record
        self.inline = inline
        self.claims: dict[uuid.UUID, Claim] = {}
        self.lock = threading.Lock()
        self._returned = threading.Condition(self.lock)  # a job's thread handed its claim back
        self.outcomes: queue.SimpleQueue[Outcome] = queue.SimpleQueue()
        # claims waiting for a slot thread (None: a thread is asked to end), and the idle
        # threads' wake-up locks, the last one to go idle on top (see _take)
        self._dispatch = threading.Lock()
        self._work: collections.deque[Claim | None] = collections.deque()
        self._idle_threads: list[threading.Lock] = []
        self._threads: list[threading.Thread] = []

    # -- counting ---------------------------------------------------------------------

    def idle(self) -> int:
        """Slots free for a claim.

        A slot whose job returned is free once its outcome is taken (the pass
        that claims for it records the outcome in the same statement). A slot
        whose run was abandoned is free once the job's thread is done with it
        and the database's lease has certainly expired.
        """
        with self.lock:
            self.drop_settled()
            now = self.clock()
            return self.concurrency - sum(1 for c in self.claims.values() if c.holds_slot(now))

    def drop_settled(self) -> None:
        """Forget abandoned claims that no longer occupy a slot (call with the lock held)."""
        now = self.clock()
        for token, claim in list(self.claims.items()):
            if claim.settled(now):
                del self.claims[token]

    def busy(self) -> int:
        """Jobs still running on a thread (including ones timed out or abandoned)."""
        with self.lock:
            return sum(1 for c in self.claims.values() if c.state is not ClaimState.RELEASED)

    def _jobs_pending(self) -> bool:
        """A claim's job has not returned and is not late (call with the lock held).

        Newest first: the claims of the last pass are the ones still pending, and
        the ones before them mostly wait to be recorded (one look, not one per claim).
        """
        return any(c.state.job_pending for c in reversed(self.claims.values()))

    def drained(self) -> bool:
        """Nothing left to run or record (threads of timed-out jobs may still be running)."""
        with self.lock:
            return not any(c.state.leased for c in self.claims.values())

    def wake_times(self) -> list[float]:
        """When a claim needs the executor next (renewal, trust, timeout, a slot freeing)."""
        with self.lock:
            return [t for claim in self.claims.values() for t in claim.wake_times()]

    def all_taken(self) -> bool:
        """Every slot has a claim (in any state): no run coming due can be claimed now."""
        with self.lock:
            return len(self.claims) >= self.concurrency

    # -- claims in and out ------------------------------------------------------------

    def add(self, claims: Iterable[Claim]) -> None:
        with self.lock:
            for claim in claims:
                self.claims[claim.token] = claim

    def submit(self, claims: Iterable[Claim]) -> None:
        """Run the claims' jobs: now in this thread (inline), else on free slot threads.

        One idle thread is woken for the lot; each thread that takes a claim wakes
        the next idle one while claims are left (see :meth:`_take`). Every claim
        starts as soon as with a wake-up per claim, and jobs that return at once
        are run one after another by the threads already awake instead of by a
        thread woken for each (two context switches a run fewer).
        """
        if self.inline:
            for claim in claims:
                self._run(claim)
        else:
            self._hand_over(list(claims))

    def _hand_over(self, items: list[Claim | None]) -> None:
        if not items:
            return
        with self._dispatch:
            self._work.extend(items)
            waking = self._idle_threads.pop() if self._idle_threads else None
        if waking is not None:
            waking.release()

    def forget_recorded(self, outcomes: Iterable[Outcome]) -> None:
        """The outcomes were written (or refused): their claims are over."""
        with self.lock:
            for outcome in outcomes:
                if outcome.claim.state is ClaimState.DONE:
                    self.claims.pop(outcome.claim.token, None)

    def forget(self, claims: Iterable[Claim]) -> None:
        with self.lock:
            for claim in claims:
                self.claims.pop(claim.token, None)

    def select(self, predicate: Callable[[Claim], bool]) -> list[Claim]:
        with self.lock:
            return [c for c in self.claims.values() if predicate(c)]

    # -- outcomes ---------------------------------------------------------------------

    def take_outcomes(self, into: list[Outcome]) -> list[Outcome]:
        """Move the queued outcomes into ``into``; those still to record (not abandoned)."""
        while True:
            try:
                into.append(self.outcomes.get_nowait())
            except queue.Empty:
                break
        return [o for o in into if o.claim.state is not ClaimState.ABANDONED]

    def gather(self, window: float) -> None:
        """With an outcome to record, wait up to ``window`` seconds for the other jobs to end.

        Real time, not ``self.clock``: the wait is bounded whatever clock tests inject.
        """
        if self.inline or self.outcomes.empty():
            return
        deadline = time.monotonic() + window
        with self._returned:
            while self._jobs_pending():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._returned.wait(remaining)
        # The wake-ups of the jobs gathered here are served by this pass (and a
        # NOTIFY that arrived meanwhile by its claim, which reads after it).
        self.wake.clear()

    # -- local deadlines ----------------------------------------------------------------

    def expire(self) -> tuple[list[Claim], list[Claim]]:
        """Timeouts and lost trust, by this replica's monotonic clock: (overdue, abandoned)."""
        now = self.clock()
        overdue: list[Claim] = []
        lost: list[Claim] = []
        with self.lock:
            for claim in list(self.claims.values()):
                if claim.state.in_progress and not claim.lease.trusted(now):
                    claim.abandon("the lease could not be renewed in time")
                    lost.append(claim)
                elif claim.time_out(now):  # stays leased until its thread returns
                    overdue.append(claim)
        return overdue, lost

    # -- threads ------------------------------------------------------------------------

    def start_threads(self) -> None:
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._slot, name=f"pgsched-slot-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop_threads(self, timeout: float) -> None:
        """Let each slot thread close its connections and end (one still in a job: after it)."""
        threads, self._threads = self._threads, []
        self._hand_over([None] * len(threads))
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _slot(self) -> None:
        job_connections = JobConnections(self.keep_connections_for)
        wake = threading.Lock()  # held while this thread has nothing to do
        wake.acquire()
        try:
            while True:
                claim = self._take(wake)
                if claim is None:
                    return
                self._run(claim, job_connections)
        finally:
            connections.close_all()  # the connections this thread kept across its jobs

    def _take(self, wake: threading.Lock) -> Claim | None:
        """The next claim (None: end), waiting idle for one; wakes another thread if more wait.

        An idle thread waits on its own lock, on a stack: a hand-over wakes the
        thread that went idle last, and a thread that finds claims left after its
        own wakes the next, before it runs its job. So a claim never waits behind
        another's job while a thread is idle, and no thread is woken for nothing.
        """
        while True:
            more: threading.Lock | None = None
            with self._dispatch:
                found = bool(self._work)
                if found:
                    claim = self._work.popleft()
                    if self._work and self._idle_threads:
                        more = self._idle_threads.pop()
                else:
                    self._idle_threads.append(wake)
            if found:
                if more is not None:
                    more.release()
                return claim
            wake.acquire()  # released by the hand-over or the thread that pops this lock

    def _run(self, claim: Claim, job_connections: JobConnections | None = None) -> None:
        with self.lock:
            if not claim.start(self.clock()):
                return  # released while waiting for a slot
        invoked = invoke(claim, connections=job_connections)
        failpoints.hit("executor.after_job")
        with self.lock:
            now = self.clock()
            was = claim.job_returned(now)
            if was in (ClaimState.RUNNING, ClaimState.OVERDUE):
                # Queued before the slot shows idle: a pass that counts this slot as
                # free also records this outcome, so the run's attempt ends in the
                # statement that claims its successor (never one run too many).
                self.outcomes.put(_outcome(claim, was, invoked, now))
            elif (
                was is ClaimState.ABANDONED
            ):  # the result is discarded; the slot frees with the lease
                self.drop_settled()
            else:  # interrupted at shutdown (its outcome is already queued): the slot frees
                self.claims.pop(claim.token, None)
            if not self._jobs_pending():
                # the last job a gathering pass waits for (one wake-up, not one per job)
                self._returned.notify_all()
        if (
            was not in (ClaimState.RUNNING, ClaimState.OVERDUE)
            and invoked.status == AttemptStatus.SUCCEEDED
        ):
            logger.warning(
                "run %s finished after its lease was lost or the replica gave it "
                "up; its result was discarded",
                claim.run_id,
            )
        self.wake.set()


def _outcome(claim: Claim, was: ClaimState, invoked: Invoked, now: float) -> Outcome:
    elapsed = claim.elapsed(now)
    detail = claim.context.detail or None
    if was is ClaimState.OVERDUE:
        error = (
            f"timed out: still running {claim.timeout.total_seconds():g}s after it "
            f"started; returned after {elapsed:.3g}s\n{invoked.error}"
        ).rstrip()
        return Outcome(
            claim,
            AttemptStatus.TIMED_OUT,
            error,
            elapsed,
            error_class=invoked.error_class,
            detail=detail,
        )
    if invoked.lease_lost:
        # It stopped because the lease could not be re-asserted in time, yet the
        # lease is still ours (a lost one is abandoned, and its result discarded):
        # give the attempt back, and try again shortly.
        defer = Defer(delay=1.0, attempted=False, reason=invoked.error)
        return Outcome(claim, AttemptStatus.DEFERRED, invoked.error, elapsed, defer=defer)
    return Outcome(
        claim,
        invoked.status,
        invoked.error,
        elapsed,
        invoked.retry,
        invoked.value,
        invoked.error_class,
        defer=invoked.defer,
        not_before=invoked.not_before,
        detail=detail,
    )


class Invoked(NamedTuple):
    """What calling a job did."""

    status: AttemptStatus  # succeeded, failed or deferred
    error: str = ""
    retry: bool = True  # whether a failure may be retried
    value: str | None = None  # JSON text of the return value (registry entries with a runner)
    error_class: str = ""
    defer: Defer | None = None  # it raised (or returned) Defer
    not_before: datetime | float | None = None  # Fail(not_before=...)
    lease_lost: bool = False  # it raised LeaseLost: it stopped, having done nothing more


def invoke(claim: Claim, *, connections: JobConnections | None) -> Invoked:
    """Run ``claim``'s job and say what happened.

    Returning is success; raising is a failure, retried. Raising (or
    returning) :class:`~django_pgsched.outcomes.Defer` defers the run;
    :class:`~django_pgsched.outcomes.Fail` fails it with options;
    :class:`~django_pgsched.outcomes.LeaseLost` says it stopped because the
    lease could not be re-asserted. A job's failure is data: every exception
    (even ``SystemExit``) becomes a failed attempt with its traceback and its
    class, never a crash. A registry entry with a ``runner`` (django.tasks'
    tasks) is handed the claim itself and returns the JSON text of its return
    value, recorded with a succeeded attempt. On a slot thread the job's
    database connections are tidied before and after it by ``connections``
    (:class:`~.job_connections.JobConnections`: as Django tidies a request's,
    but kept across jobs for ``JOB_CONNECTION_MAX_AGE``).
    """
    spec = get_job(claim.job)
    try:
        if connections is not None:
            connections.tidy()
        failpoints.hit("executor.before_job")
        if spec is None:
            return Invoked(AttemptStatus.FAILED, f"job {claim.job!r} is not registered here", False)
        if spec.runner is not None:
            return Invoked(AttemptStatus.SUCCEEDED, value=spec.runner(claim))
        if spec.takes_context:
            returned = spec.func(claim.context, **claim.kwargs)
        else:
            returned = spec.func(**claim.kwargs)
        if isinstance(returned, Defer):
            return Invoked(AttemptStatus.DEFERRED, clean_text(returned.reason), defer=returned)
        return Invoked(AttemptStatus.SUCCEEDED)
    except Defer as exc:
        return Invoked(AttemptStatus.DEFERRED, clean_text(exc.reason), defer=exc)
    except Fail as exc:
        return Invoked(
            AttemptStatus.FAILED,
            clean_text(exc.message)[:MAX_ERROR_CHARS],
            exc.retry,
            error_class=class_path(type(exc)),
            not_before=exc.not_before,
        )
    except LeaseLost as exc:
        return Invoked(AttemptStatus.FAILED, clean_text(f"lease lost: {exc}"), lease_lost=True)
    except BaseException as exc:
        # one line for the replica's log; the traceback is the attempt's (the admin shows it)
        text = str(exc).strip()
        message = text.splitlines()[0][:200] if text else ""
        logger.warning(
            "run %s (%s), attempt %s, failed: %s%s",
            claim.run_id,
            claim.job,
            claim.attempt,
            type(exc).__name__,
            f": {message}" if message else "",
        )
        return Invoked(AttemptStatus.FAILED, format_error(exc), True, None, class_path(type(exc)))
    finally:
        if connections is not None:
            try:
                connections.tidy()
            except Exception:  # pragma: no cover
                logger.debug("closing the job's connections failed", exc_info=True)


def class_path(cls: type) -> str:
    """``module.QualifiedName`` of a class (an exception's, for its attempt)."""
    return f"{cls.__module__}.{cls.__qualname__}"[:300]


def clean_text(text: str) -> str:
    return text.replace("\x00", "\\x00")


def format_error(exc: BaseException) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=20)
    text = "".join(lines)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n…\n" + text[-(MAX_ERROR_CHARS * 3) // 4 :]
    return clean_text(text)
