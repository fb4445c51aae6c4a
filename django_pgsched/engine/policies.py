"""Policies as pure functions: misfire (which due occurrences become runs) and retry backoff.

Pure functions over a :class:`~django_pgsched.timing.timetable.Timetable`; the planner
calls :func:`decide` once per distinct (timetable, from-time) in a batch.

Given the database time ``now``, the due occurrences of a schedule are
``D = grid ∩ [next_fire_at, now + lookahead]``. An occurrence ``t`` is
*missed* when ``t < now − grace``, otherwise *on time*.

========  ====================  ==============================================
policy    on-time occurrences   missed occurrences
========  ====================  ==============================================
skip      run                   all discarded and counted
latest    run                   the most recent runs; the rest are counted
catch_up  run                   the most recent ``limit`` run; older counted
========  ====================  ==============================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..statuses import COUNTED_REASONS, MISFIRE_REASONS, MisfirePolicy, SkipReason
from ..timing.spans import Skipped as Skipped  # the planner's spans, re-exported
from ..timing.timetable import GapSkip, Timetable

SECOND = timedelta(seconds=1)
POLICIES: tuple[str, ...] = tuple(MisfirePolicy.values)


@dataclass(frozen=True)
class Decision:
    """What to do with one schedule in one planner pass."""

    runs: tuple[datetime, ...]  # occurrences to materialise, ascending
    skipped: int  # missed occurrences discarded by the policy
    next_fire_at: datetime  # first occurrence not yet decided
    # wall-clock times a zone's clocks skipped in the decided range (dst_gap), not runs
    gap_skips: tuple[GapSkip, ...] = ()
    # what did not run, and why: the ledger's new ranges (the misfire span, the gaps)
    spans: tuple[Skipped, ...] = ()

    @property
    def gap_skipped(self) -> int:
        return sum(g.count for g in self.gap_skips)


def span(grid: Timetable, start: datetime, end: datetime, reason: str) -> Skipped | None:
    """The occurrences in ``[start, end)`` as one span (None if there are none)."""
    count = grid.count(start, end) if end > start else 0
    if count == 0:
        return None
    first = next(iter(grid.occurrences(start, end)))
    (last,) = grid.latest(start, end, 1)
    return Skipped(first, last, count, reason)


def counted(spans: tuple[Skipped, ...]) -> int:
    """Occurrences of ``spans`` that ``skipped_occurrences`` counts."""
    return sum(s.count for s in spans if s.reason in COUNTED_REASONS)


def floor_second(t: datetime) -> datetime:
    return t.replace(microsecond=0)


def ceil_second(t: datetime) -> datetime:
    return t if t.microsecond == 0 else t.replace(microsecond=0) + SECOND


def decide(
    grid: Timetable,
    *,
    next_fire_at: datetime | None,
    now: datetime,
    lookahead: timedelta,
    grace: timedelta,
    policy: str,
    catch_up_limit: int,
    max_runs: int = 2000,
) -> Decision:
    """Apply ``policy`` to the occurrences due by ``now + lookahead``.

    ``next_fire_at=None`` means "new, resumed or re-timed": the schedule starts
    with its first occurrence after ``now`` and nothing counts as missed.
    At most ``max_runs`` runs are returned; the rest are decided next pass
    (``next_fire_at`` is then the first occurrence not materialised).

    Each pass decides the occurrences in ``[start, next_fire_at)`` (for a new
    schedule, those after ``now``), so consecutive passes cover time exactly
    once; the wall-clock times a zone's clocks skipped in that range
    (``dst_gap``) come back in ``gap_skips``, counted at the transition.

    What does not run comes back in ``spans`` for the ledger: the discarded
    missed occurrences as one span (they are the oldest missed ones, so they
    are consecutive) with the policy's reason, and each gap as a ``dst_gap`` span.
    """
    decision = _decide(
        grid,
        next_fire_at=next_fire_at,
        now=now,
        lookahead=lookahead,
        grace=grace,
        policy=policy,
        catch_up_limit=catch_up_limit,
        max_runs=max_runs,
    )
    start = next_fire_at if next_fire_at is not None else floor_second(now) + SECOND
    gaps = grid.gap_skips(start, decision.next_fire_at)
    if not gaps:
        return decision
    gap_spans = tuple(Skipped(g.first, g.last, g.count, SkipReason.DST_GAP) for g in gaps)
    return Decision(
        decision.runs,
        decision.skipped,
        decision.next_fire_at,
        tuple(gaps),
        (*decision.spans, *gap_spans),
    )


def _decide(
    grid: Timetable,
    *,
    next_fire_at: datetime | None,
    now: datetime,
    lookahead: timedelta,
    grace: timedelta,
    policy: str,
    catch_up_limit: int,
    max_runs: int,
) -> Decision:
    if policy not in POLICIES:
        raise ValueError(f"misfire_policy: {policy!r} is not one of {', '.join(POLICIES)}")
    # occurrences are whole seconds, so "t <= now + lookahead" is "t < end"
    end = floor_second(now + lookahead) + SECOND
    if next_fire_at is None:
        start = grid.next_after(now)
        missed_end = start
    else:
        start = next_fire_at
        # "t < now - grace" for whole-second t is "t < ceil(now - grace)"
        missed_end = max(start, min(ceil_second(now - grace), end))

    missed = grid.count(start, missed_end) if missed_end > start else 0
    if missed == 0 or policy == MisfirePolicy.SKIP:
        kept: list[datetime] = []
    elif policy == MisfirePolicy.LATEST:
        kept = grid.latest(start, missed_end, 1)
    else:
        kept = grid.latest(start, missed_end, catch_up_limit)
    skipped = missed - len(kept)
    discarded = span(grid, start, kept[0] if kept else missed_end, MISFIRE_REASONS[policy])
    spans = (discarded,) if skipped and discarded is not None else ()

    runs = kept
    budget = max_runs - len(runs)
    on_time_start = max(start, missed_end)
    if budget > 0:
        for t in grid.occurrences(on_time_start, end):
            if budget == 0:
                return Decision(tuple(runs), skipped, t, spans=spans)
            runs.append(t)
            budget -= 1
    elif on_time_start < end:
        following = grid.next_after(on_time_start - SECOND)
        if following < end:
            return Decision(tuple(runs), skipped, following, spans=spans)
    return Decision(tuple(runs), skipped, grid.next_after(end - SECOND), spans=spans)


def retry_delay(attempt: int, *, base: timedelta, cap: timedelta, jitter: float) -> float:
    """Seconds to wait before retrying after ``attempt`` (1-based) failed.

    Exponential (``base × 2^(attempt−1)``, at most ``cap``) with "equal jitter":
    ``jitter`` in [0, 1) spreads the delay over its upper half so replicas that
    failed together do not retry together.
    """
    exponent = max(0, min(attempt - 1, 30))
    delay = min(cap.total_seconds(), base.total_seconds() * math.pow(2, exponent))
    return delay / 2 + delay / 2 * jitter
