"""The planner: turns due schedule occurrences into runs, in every replica.

One :meth:`Planner.run_once` is one short transaction:

1. claim up to a batch of active schedules due within the lookahead, with
   ``FOR NO KEY UPDATE SKIP LOCKED`` (two planners take different rows);
2. compute each schedule's due occurrences and apply its misfire policy
   (pure Python, memoised per distinct grid and from-time);
3. in one statement, insert the runs with ``ON CONFLICT DO NOTHING`` against
   the unique ``(schedule_id, scheduled_for)`` index, advance ``next_fire_at``,
   add the discarded occurrences to ``skipped_occurrences``, record them in the
   ledger (``pgsched_skipped_range``, with their reason; and the occurrences a
   paused or broken schedule did not plan, once it is active again), and
   NOTIFY the executors once.

A crash anywhere rolls the whole pass back: the schedule keeps its old
``next_fire_at`` and the next planner picks it up. A schedule whose definition
cannot be evaluated is marked ``broken`` with the reason, and the rest of the
batch goes ahead. If the database refuses the batch's statement, the pass is
rolled back and done again one schedule at a time (each in a savepoint), so
that one bad row is marked ``broken`` and the others are planned.

The batch statement runs in the transaction that claimed the rows, never in a
savepoint: an update from a subtransaction of the transaction that locked the
row records the two as a MultiXact in the old row version, and PostgreSQL's
index scans cannot mark such a version dead (``HeapTupleIsSurelyDead``). Every
claim would then walk every schedule version advanced since the last vacuum,
a minute's worth of entries in the due index at a time, and the
MultiXact space would grow by one per schedule per occurrence.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import events
from ..conf import Settings, get_settings
from ..limits import LAST_FIRE_TIME, MAX_NOTE_CHARS, MAX_RUNS_PER_SCHEDULE
from ..registry import JobDefaults, job_defaults
from ..statuses import STOPPED_REASONS, SkipReason
from ..tenants.limits import TenantLimits, build_defaults
from ..tenants.quotas import check_gap
from ..timing import jitter, timetable, zoned
from . import db, failpoints, queries
from .policies import Decision, Skipped, decide, span
from .ports import PORTS
from .rows import DueSchedule

_EPOCH = datetime(1, 1, 2, tzinfo=UTC)  # before every occurrence

logger = logging.getLogger(__name__)

# After this many runs created (by this planner since it last looked), months whose
# statistics the new runs outgrew are analyzed (planner_stale_months).
ANALYZE_AFTER = 10_000

GAP_REASON = "dst_gap"  # the skipped metric's "policy" label for times a clock change skipped


@dataclass(frozen=True)
class PlanResult:
    """What one planner pass did."""

    db_now: datetime | None = None
    schedules: int = 0  # schedules claimed and advanced
    created: int = 0  # runs inserted
    skipped: int = 0  # occurrences discarded by misfire policies and by dst_gap
    broken: tuple[int, ...] = ()  # schedules marked broken
    created_by: dict[tuple[str, str, str], int] = field(default_factory=dict)
    skipped_by: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    # occurrences recorded in the ledger, by (queue, job, kind, reason)
    ledgered_by: dict[tuple[str, str, str, str], int] = field(default_factory=dict)
    batch_full: bool = False  # more may be due right now: plan again without sleeping
    # nothing was due: the earliest next_fire_at of an active schedule (None: unknown,
    # or a new schedule waits), which the runner may sleep until (less the lookahead)
    next_due: datetime | None = None


@dataclass
class _Row:
    """A claimed schedule and what the pass decided for it."""

    schedule: DueSchedule
    id: int
    decision: Decision | None = None
    grid: timetable.Timetable | None = None
    spans: tuple[Skipped, ...] = ()  # the ledger's new ranges: the decision's, and unplanned ones
    fire_after: list[datetime] = field(default_factory=list)  # each run's, jitter added
    previous: list[datetime | None] = field(default_factory=list)  # the occurrence before a span
    error: str = ""

    @property
    def kind(self) -> str:
        return "cron" if self.schedule.cron else "interval"


def _broken(row: _Row, error: str) -> None:
    """Mark ``row``'s schedule broken with ``error`` (cut to the note limit), and log it."""
    row.error = error[:MAX_NOTE_CHARS]
    logger.error("schedule %s (%s) is broken: %s", row.id, row.schedule.name, row.error)


class Planner:
    """Materialises due occurrences as runs. ``run_once()`` does one pass."""

    def __init__(
        self,
        *,
        settings: Settings | None = None,
        batch: int | None = None,
        using: str | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        self.batch = batch or self.settings.PLANNER_BATCH
        self.using = using or self.settings.DATABASE_ALIAS
        self._created_since_analyze = 0

    def run_once(self, now: datetime | None = None) -> PlanResult:
        """Plan one batch. ``now`` overrides the database clock (tests only)."""
        try:
            result = self._transaction(now, one_by_one=False)
        except DatabaseError as exc:
            if not db.refused_for_a_row(exc):
                raise  # the connection, the server, a timeout: the runner backs off and retries
            # a row's fault, not the code's: its message says which (no traceback)
            logger.warning(
                "planner batch failed (%s); planning it again one schedule at a time",
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
            )
            result = self._transaction(now, one_by_one=True)
        if result.schedules:
            failpoints.hit("planner.after_commit")
            events.occurrences_planned.send(
                sender=type(self),
                created=result.created_by,
                skipped=result.skipped_by,
                broken=result.broken,
                ledgered=result.ledgered_by,
            )
        self._created_since_analyze += result.created
        if self._created_since_analyze >= ANALYZE_AFTER:
            self._created_since_analyze = 0
            self.refresh_statistics()
        events.loop_ticked.send(sender=type(self), loop="planner", db_now=result.db_now)
        return result

    def refresh_statistics(self) -> list[str]:
        """ANALYZE the months of runs whose statistics a burst outgrew; returns them.

        A replica prepares its statements once and keeps their plans
        (``plan_cache_mode = force_generic_plan``). Made while a month held a few
        runs, a plan that suits a few (a scan of the month for each claimed run)
        stays after the planner wrote 100,000 into it, until the month is
        analyzed, which autovacuum does within a minute or so: the length of a
        burst. ANALYZE makes every session plan again, on statistics of what the
        month holds. It takes no lock that writes wait for; ``SKIP_LOCKED``: a
        month another replica is analyzing is left to it. A role that does not own
        the table is refused with a warning (PostgreSQL 17 has the MAINTAIN
        privilege for it) and autovacuum's ANALYZE is what remains.
        """
        try:
            with db.session("planner", self.using) as conn:
                stale = db.fetch(
                    conn, queries.PLANNER_STALE_MONTHS, {"at_least": ANALYZE_AFTER // 2}
                )
                for row in stale:
                    with conn.cursor() as cursor:
                        cursor.execute(f"ANALYZE (SKIP_LOCKED) {row.month}")  # from pg_class
        except DatabaseError as exc:  # the runs are planned; autovacuum analyzes them later
            logger.warning("could not analyze the months of runs after a burst: %s", exc)
            return []
        if stale:
            logger.info("analyzed %s after a burst", ", ".join(r.month for r in stale))
        return [row.month for row in stale]

    def _transaction(self, now: datetime | None, *, one_by_one: bool) -> PlanResult:
        with db.session("planner", self.using) as conn:
            if one_by_one:
                with transaction.atomic(using=self.using):
                    return self._one_by_one(conn, now)
            with db.one_transaction(conn) as tx:
                return self._pass(conn, tx, now)

    def _claim(
        self, tx: db.Pipelined, now: datetime | None
    ) -> tuple[datetime, list[_Row], datetime | None]:
        """Claim a batch of due schedules and decide each one's runs; and, when none was
        due, the earliest next_fire_at of an active schedule."""
        s = self.settings
        params = {"now": now, "lookahead": s.PLANNER_LOOKAHEAD, "batch": self.batch}
        claimed = tx.fetch(queries.PLANNER_CLAIM, params)
        db_now = claimed[0].db_now  # the first row always carries the database time
        next_due = claimed[0].next_due
        rows = [_Row(schedule, schedule.id) for schedule in claimed if schedule.id is not None]
        if rows:
            failpoints.hit("planner.after_claim")
        memo: dict[tuple[Any, ...], tuple[timetable.Timetable, Decision]] = {}
        following: dict[tuple[int, datetime], datetime | None] = {}
        default_gap = build_defaults(self.settings.TENANT_DEFAULTS).min_interval
        for row in rows:
            if row.schedule.defect:  # values Python cannot hold or the planner cannot use
                _broken(row, f"cannot read the schedule: out of range: {row.schedule.defect}")
                continue
            if row.schedule.tenant_paused:
                self._ledger_paused_tenant(row, db_now)
            else:
                self._decide(row, db_now, memo)
                self._hold_to_min_interval(row, default_gap)
            if row.decision is not None:
                self._unplanned(row, db_now)
                self._prepare(row, following)
        return db_now, rows, next_due

    def _hold_to_min_interval(self, row: _Row, default_gap: timedelta | None) -> None:
        """A schedule of a tenant with a ``min_interval`` whose planned occurrences come
        closer than that is broken, with the quota's message, and plans nothing.

        ``clean()`` refuses such a schedule wherever it is defined; this holds the quota
        for one written past it (SQL, a quota lowered later). Each pass looks at the gaps
        between the occurrences it plans and the next one, so every two consecutive
        occurrences are looked at once.
        """
        due, decision = row.schedule, row.decision
        if decision is None or not due.tenant:
            return
        gap_allowed = due.tenant_min_interval if due.tenant_recorded else default_gap
        if gap_allowed is None:
            return
        times = [*decision.runs, *([decision.next_fire_at] if decision.next_fire_at else [])]
        gaps = [b - a for a, b in pairwise(times)]
        try:
            check_gap(
                due.tenant, min(gaps) if gaps else None, TenantLimits(min_interval=gap_allowed)
            )
        except ValidationError as exc:
            row.decision, row.spans = None, ()
            _broken(row, exc.messages[0])

    def _prepare(self, row: _Row, following: dict[tuple[int, datetime], datetime | None]) -> None:
        """The row's runs' ``fire_after`` and its spans' previous occurrences; else broken."""
        decision = row.decision
        assert decision is not None
        try:
            row.fire_after = _fire_after(row, decision.runs, following)
            row.previous = [self._previous(row, s) for s in row.spans]
        except Exception as exc:  # one row's arithmetic never fails the batch
            row.decision, row.spans = None, ()
            _broken(row, f"cannot compute occurrences: {exc}")

    def _pass(
        self, conn: BaseDatabaseWrapper, tx: db.Pipelined, now: datetime | None
    ) -> PlanResult:
        """A pass in one transaction: the claim; the apply with the commit.

        In autocommit (a replica), the transaction travels in pipeline mode, in two
        round trips: the claim with the BEGIN (and ends with a sync, so the server's
        idle-in-transaction timeout covers a replica that freezes here), the apply
        with the COMMIT. Inside a transaction of Django's (a test's) each statement
        runs as it is sent, in a savepoint. A database error rolls the pass back and
        raises; :meth:`run_once` then plans the batch one schedule at a time.
        """
        db_now, rows, next_due = self._claim(tx, now)
        if not rows:  # nothing written: the transaction ends without a change
            return PlanResult(db_now=db_now, next_due=next_due)
        times = _run_times(rows)
        if PORTS.months.needs_ensuring(conn.alias, times, db_now):
            tx.send(*PORTS.months.statement(times))
        apply, mark = self._send_apply(tx, rows)
        failpoints.hit("planner.before_commit")
        tx.commit()  # in pipeline mode the apply and the commit travel together
        inserted = db.rows(apply)[0].inserted if apply is not None else []
        if mark is not None:
            db.rows(mark)
        return self._result(db_now, rows, list(inserted))

    def _one_by_one(self, conn: BaseDatabaseWrapper, now: datetime | None) -> PlanResult:
        """A pass whose batch failed: each schedule's runs in a savepoint of their own,
        so that one schedule's row the database refuses is marked broken alone."""
        db_now, rows, next_due = self._claim(db.InDjangoTransaction(conn), now)
        inserted: list[int] = []
        for row in rows:
            try:
                with transaction.atomic(using=self.using):
                    inserted += self._apply(conn, [row])
            except DatabaseError as exc:
                row.decision, row.error = (
                    None,
                    f"could not store its runs: {exc}"[:MAX_NOTE_CHARS],
                )
                with transaction.atomic(using=self.using):
                    self._apply(conn, [row])
        if not rows:
            return PlanResult(db_now=db_now, next_due=next_due)
        failpoints.hit("planner.before_commit")
        return self._result(db_now, rows, inserted)

    def _decide(
        self,
        row: _Row,
        db_now: datetime,
        memo: dict[tuple[Any, ...], tuple[timetable.Timetable, Decision]],
    ) -> None:
        s = self.settings
        due = row.schedule
        grace = due.misfire_grace if due.misfire_grace is not None else s.MISFIRE_GRACE
        key = (
            due.cron,
            due.interval,
            due.anchor,
            due.timezone,
            due.dst_gap,
            due.dst_fold,
            due.next_fire_at,
            due.misfire_policy,
            due.catch_up_limit,
            grace,
        )
        try:
            memoised = memo.get(key)
            if memoised is None:
                grid = _grid(due)
                decision = decide(
                    grid,
                    next_fire_at=due.next_fire_at,
                    now=db_now,
                    lookahead=s.PLANNER_LOOKAHEAD,
                    grace=grace,
                    policy=due.misfire_policy,
                    catch_up_limit=due.catch_up_limit,
                    max_runs=MAX_RUNS_PER_SCHEDULE,
                )
                if decision.next_fire_at >= LAST_FIRE_TIME:
                    raise ValueError(f"next occurrence {decision.next_fire_at} is out of range")
                memoised = memo[key] = (grid, decision)
            row.grid, row.decision = memoised
            row.spans = row.decision.spans
        except Exception as exc:  # whatever one row holds, the rest of the batch goes ahead
            _broken(row, f"cannot compute occurrences: {exc}")

    def _ledger_paused_tenant(self, row: _Row, db_now: datetime) -> None:
        """A schedule of a paused tenant: its occurrences due by now join the ledger
        (``tenant_paused``) and no run is made; the next one is the first after now, so a
        resume carries on from there by the schedule's own policies."""
        due = row.schedule
        try:
            grid = _grid(due)
            start = due.next_fire_at or grid.next_after(db_now)
            following = grid.next_after(db_now) if start <= db_now else start
            paused = span(grid, start, following, SkipReason.TENANT_PAUSED)
        except Exception as exc:  # whatever one row holds, the rest of the batch goes ahead
            _broken(row, f"cannot compute occurrences: {exc}")
            return
        row.grid = grid
        row.decision = Decision(
            runs=(), skipped=0, next_fire_at=following, spans=(paused,) if paused else ()
        )
        row.spans = row.decision.spans

    def _unplanned(self, row: _Row, db_now: datetime) -> None:
        """A stopped schedule active again: its unplanned occurrences join the ledger.

        They run from where it stopped to the first occurrence this pass
        decides (its ``next_fire_at``, or the first one after now).
        """
        due, grid = row.schedule, row.grid
        if due.unplanned_from is None or due.unplanned_reason is None or grid is None:
            return
        try:
            resumed = due.next_fire_at or grid.next_after(db_now)
            reason = STOPPED_REASONS[due.unplanned_reason]
            stopped = span(grid, due.unplanned_from, resumed, reason)
        except (timetable.TimetableError, ValueError, OverflowError, KeyError) as exc:
            logger.warning("schedule %s: unplanned occurrences not recorded: %s", row.id, exc)
            return
        if stopped is not None:
            row.spans = (stopped, *row.spans)

    def _previous(self, row: _Row, s: Skipped) -> datetime | None:
        """The occurrence before span ``s``: a range ending there may be extended."""
        if row.grid is None or s.reason == SkipReason.DST_GAP:
            return None  # a gap's times never existed: it never extends a range
        found = row.grid.latest(_EPOCH, s.first, 1)
        return found[0] if found else None

    def _defaults(self, job: str) -> JobDefaults:
        return job_defaults(job, self.settings)

    def _apply(self, conn: BaseDatabaseWrapper, rows: Sequence[_Row]) -> list[int]:
        """Insert runs and advance schedules in one statement; mark broken ones.

        Returns the schedule id of every run actually inserted.
        """
        planned, broken = _split(rows)
        inserted: list[int] = []
        if planned:
            PORTS.months.ensure(conn, _run_times(planned))
            (applied,) = db.fetch(conn, queries.PLANNER_APPLY, self._apply_params(planned))
            inserted = applied.inserted
        if broken:
            db.execute(conn, queries.PLANNER_MARK_BROKEN, _broken_params(broken))
        return list(inserted)

    def _send_apply(self, tx: db.Pipelined, rows: Sequence[_Row]) -> tuple[Any, Any]:
        """:meth:`_apply`, sent in the pass's transaction: its two results (None: not sent)."""
        planned, broken = _split(rows)
        apply = tx.send(queries.PLANNER_APPLY, self._apply_params(planned)) if planned else None
        mark = tx.send(queries.PLANNER_MARK_BROKEN, _broken_params(broken)) if broken else None
        return apply, mark

    def _apply_params(self, planned: Sequence[_Row]) -> dict[str, Any]:
        jobs = sorted({row.schedule.job for row in planned})
        defaults = [self._defaults(job) for job in jobs]
        run_ids: list[int] = []
        run_times: list[datetime] = []
        run_fire_after: list[datetime] = []
        spans: list[tuple[int, Skipped, datetime | None]] = []
        for row in planned:
            runs = row.decision.runs  # type: ignore[union-attr]
            run_ids.extend([row.id] * len(runs))
            run_times.extend(runs)
            run_fire_after.extend(row.fire_after)
            spans.extend(zip([row.id] * len(row.spans), row.spans, row.previous, strict=True))
        return {
            "job_names": jobs,
            "job_queues": [d.queue for d in defaults],
            "job_attempts": [d.max_attempts for d in defaults],
            "job_timeouts": [d.timeout for d in defaults],
            "job_priorities": [d.priority for d in defaults],
            "ids": [row.id for row in planned],
            "next_fire_at": [row.decision.next_fire_at for row in planned],  # type: ignore[union-attr]
            "last_fire_at": [
                row.decision.runs[-1] if row.decision.runs else None  # type: ignore[union-attr]
                for row in planned
            ],
            "skipped": [
                row.decision.skipped + row.decision.gap_skipped  # type: ignore[union-attr]
                for row in planned
            ],
            "run_schedule_ids": run_ids,
            "run_times": run_times,
            "run_fire_after": run_fire_after,
            "span_schedule_ids": [sid for sid, _, _ in spans],
            "span_first": [s.first for _, s, _ in spans],
            "span_last": [s.last for _, s, _ in spans],
            "span_count": [s.count for _, s, _ in spans],
            "span_reason": [s.reason for _, s, _ in spans],
            "span_previous": [previous for _, _, previous in spans],
        }

    def _result(self, db_now: datetime, rows: Sequence[_Row], inserted: list[int]) -> PlanResult:
        by_id = {row.id: row for row in rows}
        defaults: dict[str, str] = {}  # job -> its default queue, resolved once per pass

        def queue(row: _Row) -> str:
            if row.schedule.queue:
                return row.schedule.queue
            job = row.schedule.job
            if job not in defaults:
                defaults[job] = self._defaults(job).queue
            return defaults[job]

        created_by: Counter[tuple[str, str, str]] = Counter()
        for schedule_id in inserted:
            row = by_id[schedule_id]
            created_by[(queue(row), row.schedule.job, row.kind)] += 1
        skipped_by: Counter[tuple[str, str, str, str]] = Counter()
        ledgered_by: Counter[tuple[str, str, str, str]] = Counter()
        for row in rows:
            if row.decision and row.decision.skipped:
                key = (queue(row), row.schedule.job, row.kind, row.schedule.misfire_policy)
                skipped_by[key] += row.decision.skipped
            if row.decision and row.decision.gap_skips:
                key = (queue(row), row.schedule.job, row.kind, GAP_REASON)
                skipped_by[key] += row.decision.gap_skipped
            for s in row.spans if row.decision else ():
                ledgered_by[(queue(row), row.schedule.job, row.kind, s.reason)] += s.count
        return PlanResult(
            db_now=db_now,
            schedules=len(rows),
            created=len(inserted),
            skipped=sum(skipped_by.values()),
            broken=tuple(row.id for row in rows if row.decision is None),
            created_by=dict(created_by),
            skipped_by=dict(skipped_by),
            ledgered_by=dict(ledgered_by),
            batch_full=len(rows) >= self.batch,
        )


def _split(rows: Sequence[_Row]) -> tuple[list[_Row], list[_Row]]:
    """(rows with a decision, broken rows)."""
    return [r for r in rows if r.decision is not None], [r for r in rows if r.decision is None]


def _broken_params(broken: Sequence[_Row]) -> dict[str, Any]:
    return {"ids": [row.id for row in broken], "errors": [row.error for row in broken]}


def _fire_after(
    row: _Row,
    runs: Sequence[datetime],
    following: dict[tuple[int, datetime], datetime | None],
) -> list[datetime]:
    """Each run's ``fire_after``: its occurrence, plus the schedule's jitter if it has one.

    ``following`` memoises the next occurrence per (timetable, occurrence) for the
    pass: schedules that share a timetable share it (a herd on ``0 * * * *``).
    """
    if not row.schedule.jitter or row.grid is None:
        return list(runs)
    out = []
    for t in runs:
        key = (id(row.grid), t)
        if key not in following:
            try:
                following[key] = row.grid.next_after(t)
            except timetable.TimetableError:
                following[key] = None
        out.append(t + jitter.offset(row.id, t, row.schedule.jitter, following[key]))
    return out


def _grid(due: Any) -> timetable.Timetable:
    """A claimed schedule's timetable (its zone and DST policies for cron)."""
    if due.cron:
        return zoned.cron(due.cron, due.timezone, due.dst_gap, due.dst_fold)
    return timetable.interval(_required(due.interval), _required(due.anchor))


def _required(value: Any) -> Any:
    if value is None:
        raise timetable.TimetableError(
            "interval", "missing", "interval: schedule has no anchor or interval"
        )
    return value


def _run_times(rows: Sequence[_Row]) -> set[datetime]:
    """The times of the runs a pass is about to insert (their months must exist)."""
    return {t for row in rows if row.decision is not None for t in row.decision.runs}
