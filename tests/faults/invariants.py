"""The invariant checker: SQL over the database after (or during) every fault scenario.

Each ``check_*`` function returns a list of :class:`Violation` (empty = the
promise held). :func:`check` runs the safety set I1–I6, I9, I10, I12, I13 in one
``REPEATABLE READ`` snapshot, so it may run while replicas are still working:
the planner inserts runs and advances ``next_fire_at`` in one transaction, so
"occurrences before ``next_fire_at`` = runs + skipped" holds exactly in every
snapshot. :func:`check_liveness` (I8) is meant to be polled after healing;
:func:`check_policy` (I7) and :func:`check_metrics` (I11) take the scenario's
expectations.

Write attribution (I5) comes from :data:`AUDIT_SQL`, a test-only trigger that
records every insert, update and delete of ``pgsched_job_run`` with the
writer's ``application_name`` (``pgsched <loop> <worker id>``, the
``--worker-id`` the harness gave the replica, or ``<host>:<pid>`` by default;
the harness knows which pid ran which worker).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from django_pgsched.ledger import accounting
from django_pgsched.timing import timetable, zoned

TERMINAL = ("succeeded", "failed", "cancelled", "missed")
UNIQUE_INDEX = "pgsched_one_run_per_occurrence"
_APP = re.compile(r"^pgsched (\w+) (.+)$")
_DEFAULT_ID = re.compile(r"^.*:(\d+)$")

AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS faults_run_audit (
    id bigserial PRIMARY KEY,
    op text NOT NULL,
    run_id bigint NOT NULL,
    schedule_id bigint,
    scheduled_for timestamptz,
    old_status text, new_status text,
    old_token uuid, new_token uuid,
    old_worker text, new_worker text,
    old_expires timestamptz, new_expires timestamptz,
    old_attempts int, new_attempts int,
    txid bigint NOT NULL DEFAULT txid_current(),
    app text NOT NULL DEFAULT current_setting('application_name'),
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION faults_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO faults_run_audit (op, run_id, schedule_id, scheduled_for, new_status,
                                      new_token, new_worker, new_expires, new_attempts)
        VALUES ('insert', NEW.id, NEW.schedule_id, NEW.scheduled_for, NEW.status,
                NEW.claimed_by, NEW.worker, NEW.claim_expires_at, NEW.attempts);
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO faults_run_audit (op, run_id, schedule_id, scheduled_for, old_status,
                                      new_status, old_token, new_token, old_worker, new_worker,
                                      old_expires, new_expires, old_attempts, new_attempts)
        VALUES ('update', NEW.id, NEW.schedule_id, NEW.scheduled_for, OLD.status, NEW.status,
                OLD.claimed_by, NEW.claimed_by, OLD.worker, NEW.worker,
                OLD.claim_expires_at, NEW.claim_expires_at, OLD.attempts, NEW.attempts);
    ELSE
        INSERT INTO faults_run_audit (op, run_id, schedule_id, scheduled_for, old_status,
                                      old_token, old_worker, old_expires, old_attempts)
        VALUES ('delete', OLD.id, OLD.schedule_id, OLD.scheduled_for, OLD.status,
                OLD.claimed_by, OLD.worker, OLD.claim_expires_at, OLD.attempts);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS faults_audit ON pgsched_job_run;
CREATE TRIGGER faults_audit AFTER INSERT OR UPDATE OR DELETE ON pgsched_job_run
    FOR EACH ROW EXECUTE FUNCTION faults_audit();
-- ledger ranges deleted (by retention, or carved by a backfill), for I12
CREATE TABLE IF NOT EXISTS faults_range_audit (
    id bigserial PRIMARY KEY,
    range_id bigint NOT NULL,
    schedule_id bigint NOT NULL,
    first timestamptz NOT NULL, last timestamptz NOT NULL, count bigint NOT NULL,
    reason text NOT NULL,
    app text NOT NULL DEFAULT current_setting('application_name')
);
CREATE OR REPLACE FUNCTION faults_range_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO faults_range_audit (range_id, schedule_id, first, last, count, reason)
    VALUES (OLD.id, OLD.schedule_id, OLD.first, OLD.last, OLD.count, OLD.reason);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS faults_range_audit ON pgsched_skipped_range;
CREATE TRIGGER faults_range_audit AFTER DELETE ON pgsched_skipped_range
    FOR EACH ROW EXECUTE FUNCTION faults_range_audit();
"""


@dataclass(frozen=True)
class Violation:
    invariant: str  # "I1" .. "I11"
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


@dataclass(frozen=True)
class Baseline:
    """Where a schedule's accounting starts: its ``next_fire_at`` and skipped count then."""

    start: datetime
    skipped: int


@dataclass(frozen=True)
class Expectation:
    """I7: what a misfire policy must have done with the occurrences in ``[start, missed_end)``."""

    start: datetime
    missed_end: datetime  # first instant that was on time when the replicas came back
    runs: int  # how many of the missed occurrences run (the newest ones)
    skipped: int  # how many were discarded and counted


def _rows(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else []


def install_audit(conn: psycopg.Connection[Any]) -> None:
    with conn.cursor() as cur:
        cur.execute(AUDIT_SQL)


def baseline(conn: psycopg.Connection[Any]) -> dict[int, Baseline]:
    """Snapshot every schedule's accounting start (call after creating the workload)."""
    return {
        sid: Baseline(nfa, skipped)
        for sid, nfa, skipped in _rows(
            conn, "SELECT id, next_fire_at, skipped_occurrences FROM pgsched_schedule"
        )
        if nfa is not None
    }


def grid(
    cron: str | None,
    interval: timedelta | None,
    anchor: datetime | None,
    zone: tuple[str, str, str] = ("UTC", "shift", "first"),
) -> Any:
    """A schedule's timetable; ``zone`` is (timezone, dst_gap, dst_fold)."""
    if cron:
        return zoned.cron(cron, *zone)
    assert interval is not None and anchor is not None
    return timetable.interval(interval, anchor)


ZONE = "timezone, dst_gap, dst_fold"  # the columns of ``zone`` above, for the SELECTs


# -- the safety set -------------------------------------------------------------------


def check(
    conn: psycopg.Connection[Any],
    *,
    baselines: Mapping[int, Baseline],
    workers_by_pid: Mapping[int, str],
    concurrency_by_worker: Mapping[str, int] | None = None,
    planner_batch: int = 500,
    allow_overlap: bool = False,
    external_writers: bool = False,
) -> list[Violation]:
    """I1–I6, I9, I10, I12, I13 in one consistent snapshot."""
    violations: list[Violation] = []
    with conn.transaction():
        _rows(conn, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        violations += check_unique(conn)
        violations += check_no_lost(conn, baselines)
        violations += check_terminal(conn)
        violations += check_attempts(conn)
        violations += check_fencing(conn, workers_by_pid, external_writers=external_writers)
        violations += check_deliveries(conn, allow_overlap=allow_overlap)
        violations += check_canonical(conn)
        violations += check_bounded(conn, concurrency_by_worker or {}, planner_batch)
        violations += check_accounting(conn, baselines)
        violations += check_exclusive(conn, allow_overlap=allow_overlap)
    return violations


def _occurrences(
    conn: psycopg.Connection[Any], *, dropped: bool = True
) -> list[tuple[int, int, datetime]]:
    """(run id, schedule id, scheduled_for) of every scheduled run, including deleted ones.

    Without ``dropped``, not the runs deleted while pending: the guard's
    overlapped runs, which never ran (their occurrence went into the ledger,
    and a backfill may give it a run again).
    """
    return _rows(
        conn,
        """
        SELECT id, schedule_id, scheduled_for FROM pgsched_job_run WHERE schedule_id IS NOT NULL
        UNION
        SELECT run_id, schedule_id, scheduled_for FROM faults_run_audit
         WHERE op = 'delete' AND schedule_id IS NOT NULL
           AND (%(dropped)s OR old_status <> 'pending')
        """,
        {"dropped": dropped},
    )


def check_unique(conn: psycopg.Connection[Any]) -> list[Violation]:
    """I1: one run per (schedule, scheduled_for), ever; the unique index valid and ready.

    A run the guard deleted while pending (overlapped: it never ran) does not
    count: a backfill may create the occurrence's run again.
    """
    out = []
    seen: dict[tuple[int, datetime], set[int]] = defaultdict(set)
    for run_id, schedule_id, scheduled_for in _occurrences(conn, dropped=False):
        seen[(schedule_id, scheduled_for)].add(run_id)
    for (schedule_id, scheduled_for), ids in sorted(seen.items()):
        if len(ids) > 1:
            out.append(
                Violation(
                    "I1",
                    f"schedule {schedule_id} has {len(ids)} runs for "
                    f"{scheduled_for.isoformat()}: {sorted(ids)}",
                )
            )
    index = _rows(
        conn,
        "SELECT i.indisvalid AND i.indisready AND i.indisunique FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
        [UNIQUE_INDEX],
    )
    if not index:
        out.append(Violation("I1", f"the unique index {UNIQUE_INDEX} is missing"))
    elif not index[0][0]:
        out.append(Violation("I1", f"the unique index {UNIQUE_INDEX} is not valid and ready"))
    return out


def check_no_lost(
    conn: psycopg.Connection[Any], baselines: Mapping[int, Baseline]
) -> list[Violation]:
    """I2: occurrences in [baseline, next_fire_at) = runs + skipped, per active schedule."""
    out = []
    runs: dict[int, list[datetime]] = defaultdict(list)
    for _run_id, schedule_id, scheduled_for in _occurrences(conn):
        runs[schedule_id].append(scheduled_for)
    schedules = _rows(
        conn,
        'SELECT id, name, cron, "interval", anchor, next_fire_at, skipped_occurrences, status, '
        f"{ZONE} FROM pgsched_schedule ORDER BY id",
    )
    for sid, name, cron, every, anchor, nfa, skipped, status, *zone in schedules:
        base = baselines.get(sid)
        if base is None or status != "active":
            continue
        if nfa is None:
            out.append(Violation("I2", f"schedule {name} is active with no next_fire_at"))
            continue
        table = grid(cron, every, anchor, tuple(zone))  # type: ignore[arg-type]
        # every occurrence, and every wall-clock time a clock change skipped (dst_gap)
        expected = table.count(base.start, nfa)
        expected += sum(g.count for g in table.gap_skips(base.start, nfa))
        mine = runs.get(sid, [])
        inside = len({t for t in mine if base.start <= t < nfa})  # duplicates are I1's
        beyond = [t for t in mine if t >= nfa]
        counted = skipped - base.skipped
        if beyond:
            out.append(
                Violation(
                    "I2",
                    f"schedule {name}: {len(beyond)} run(s) at or after next_fire_at "
                    f"{nfa.isoformat()} (first {min(beyond).isoformat()})",
                )
            )
        if inside + counted != expected:
            out.append(
                Violation(
                    "I2",
                    f"schedule {name}: {expected} occurrences in [{base.start.isoformat()}, "
                    f"{nfa.isoformat()}) but {inside} run(s) + {counted} skipped",
                )
            )
    return out


def check_accounting(
    conn: psycopg.Connection[Any], baselines: Mapping[int, Baseline]
) -> list[Violation]:
    """I12: every occurrence since the baseline is exactly one of {a run, a ledger point}.

    Per schedule, over ``[baseline, decided)`` where ``decided`` is the first
    occurrence not decided yet: its ``next_fire_at``, or where it stopped if it
    is paused, broken, or active again but not yet planned (``unplanned_from``:
    those are recorded at its next pass). A ``missed`` run is also a point of a
    ``deadline`` range (checked both ways); ranges must be pure and disjoint;
    ``skipped_occurrences`` grew by exactly the counted reasons' new ranges.
    """
    out = []
    schedules = _rows(
        conn,
        'SELECT id, name, cron, "interval", anchor, next_fire_at, unplanned_from, '
        "skipped_occurrences, timezone, dst_gap, dst_fold FROM pgsched_schedule ORDER BY id",
    )
    # runs, and the finished ones retention deleted (a pending run deleted was
    # overlapped: its occurrence is in the ledger now)
    runs: dict[int, dict[datetime, str]] = defaultdict(dict)
    for sid, scheduled_for, status in _rows(
        conn,
        """SELECT schedule_id, scheduled_for, status FROM pgsched_job_run
            WHERE schedule_id = ANY(%(ids)s)
           UNION ALL
           SELECT schedule_id, scheduled_for, old_status FROM faults_run_audit
            WHERE op = 'delete' AND schedule_id = ANY(%(ids)s) AND old_status <> 'pending'""",
        {"ids": list(baselines)},
    ):
        runs[sid][scheduled_for] = status
    # ranges, and the ones retention (the maintenance loop) deleted; a range a
    # backfill carved up is gone for good (its pieces are live)
    ranges: dict[int, list[accounting.Range]] = defaultdict(list)
    for sid, first, last, count, reason in _rows(
        conn,
        """SELECT schedule_id, first, last, count, reason FROM pgsched_skipped_range
            WHERE schedule_id = ANY(%(ids)s)
           UNION ALL
           SELECT schedule_id, first, last, count, reason FROM faults_range_audit
            WHERE schedule_id = ANY(%(ids)s) AND app LIKE 'pgsched maintenance %%'""",
        {"ids": list(baselines)},
    ):
        ranges[sid].append(accounting.Range(first, last, count, reason))
    totals = {"occurrences": 0, "runs": 0, "ledgered": 0}
    for sid, name, cron, every, anchor, nfa, unplanned, skipped, *zone in schedules:
        base = baselines.get(sid)
        if base is None:
            continue
        decided = min((t for t in (nfa, unplanned) if t is not None), default=None)
        if decided is None:
            continue
        try:
            table = grid(cron, every, anchor, tuple(zone))  # type: ignore[arg-type]
        except timetable.TimetableError:
            continue
        mine = [r for r in ranges[sid] if r.last >= base.start]
        report = accounting.check(table, base.start, decided, runs[sid], mine)
        for problem in report.problems:
            out.append(Violation("I12", f"schedule {name}: {problem}"))
        ledger_counted = sum(
            r.count for r in mine if r.reason in accounting.COUNTED and r.first >= base.start
        )
        if skipped - base.skipped != ledger_counted:
            out.append(
                Violation(
                    "I12",
                    f"schedule {name}: skipped_occurrences grew by {skipped - base.skipped}, "
                    f"the ledger's counted ranges hold {ledger_counted}",
                )
            )
        for key in totals:
            totals[key] += getattr(report, key)
    ACCOUNTED.append(totals)
    return out


#: What each I12 check accounted for (the soaks print the last one).
ACCOUNTED: list[dict[str, int]] = []


def check_terminal(conn: psycopg.Connection[Any]) -> list[Violation]:
    """I3: one terminal transition per run; terminal means finished and unleased."""
    out = []
    for (run_id,) in _rows(
        conn,
        "SELECT id FROM pgsched_job_run WHERE status = ANY(%s) "
        "AND (finished_at IS NULL OR claimed_by IS NOT NULL OR claim_expires_at IS NOT NULL)",
        [list(TERMINAL)],
    ):
        out.append(Violation("I3", f"run {run_id} is terminal but unfinished or still leased"))
    for run_id, n in _rows(
        conn,
        "SELECT job_run_id, count(*) FROM pgsched_attempt WHERE status = 'succeeded' "
        "GROUP BY 1 HAVING count(*) > 1",
    ):
        out.append(Violation("I3", f"run {run_id} has {n} succeeded attempts"))
    for run_id, n in _rows(
        conn,
        "SELECT run_id, count(*) FROM faults_run_audit WHERE op = 'update' "
        "AND new_status = ANY(%(t)s) AND NOT (old_status = ANY(%(t)s)) "
        "GROUP BY 1 HAVING count(*) > 1",
        {"t": list(TERMINAL)},
    ):
        out.append(Violation("I3", f"run {run_id} became terminal {n} times"))
    for run_id, old, new in _rows(
        conn,
        "SELECT run_id, old_status, new_status FROM faults_run_audit WHERE op = 'update' "
        "AND old_status = ANY(%(t)s) AND new_status IS DISTINCT FROM old_status",
        {"t": list(TERMINAL)},
    ):
        out.append(Violation("I3", f"run {run_id} left terminal status {old} for {new}"))
    for run_id, status, last in _rows(
        conn,
        """SELECT r.id, r.status, (SELECT a.status FROM pgsched_attempt a WHERE a.job_run_id = r.id
                                   ORDER BY a.number DESC LIMIT 1)
             FROM pgsched_job_run r WHERE r.status = 'succeeded'""",
    ):
        if last != "succeeded":
            out.append(Violation("I3", f"run {run_id} is {status} but its last attempt is {last}"))
    return out


def check_attempts(conn: psycopg.Connection[Any]) -> list[Violation]:
    """I4: attempts within 1..8 and the attempt rows contiguous 1..n."""
    out = []
    rows = _rows(
        conn,
        """SELECT r.id, r.status, r.attempts, r.max_attempts,
                  coalesce(array_agg(a.number ORDER BY a.number)
                           FILTER (WHERE a.number IS NOT NULL), '{}')
             FROM pgsched_job_run r LEFT JOIN pgsched_attempt a ON a.job_run_id = r.id
            GROUP BY r.id, r.scheduled_for, r.status, r.attempts, r.max_attempts""",
    )
    for run_id, status, attempts, max_attempts, numbers in rows:
        if not 0 <= attempts <= min(8, max_attempts):
            out.append(
                Violation("I4", f"run {run_id} has attempts={attempts} (max {max_attempts})")
            )
        recorded = attempts - 1 if status == "running" else attempts
        if list(numbers) != list(range(1, recorded + 1)):
            out.append(
                Violation(
                    "I4",
                    f"run {run_id} ({status}, attempts={attempts}) has attempts {list(numbers)}",
                )
            )
    return out


def _writer(ident: str, workers_by_pid: Mapping[int, str]) -> str | None:
    """The worker behind ``application_name``'s last part: a ``--worker-id`` the
    harness started, or the default ``<host>:<pid>`` of one of its processes."""
    if ident in workers_by_pid.values():
        return ident
    default = _DEFAULT_ID.match(ident)
    return workers_by_pid.get(int(default[1])) if default else None


def check_fencing(
    conn: psycopg.Connection[Any], workers_by_pid: Mapping[int, str], *, external_writers: bool
) -> list[Violation]:
    """I5: every write to a leased run came from its lease holder, or is the reaper's.

    Claims must come from an executor and take a token never used before for
    that run; renewals and completions from the process whose worker id holds
    the lease; the maintenance loop may only move an *expired* lease to
    retrying/failed.
    """
    out = []
    tokens: dict[int, set[Any]] = defaultdict(set)
    for (
        audit_id,
        run_id,
        old_status,
        new_status,
        old_token,
        new_token,
        old_worker,
        new_worker,
        old_expires,
        app,
        at,
    ) in _rows(
        conn,
        """SELECT id, run_id, old_status, new_status, old_token, new_token, old_worker,
                  new_worker, old_expires, app, at
             FROM faults_run_audit WHERE op = 'update' ORDER BY id""",
    ):
        match = _APP.match(app)
        role, ident = (match[1], match[2]) if match else ("external", "")
        writer = _writer(ident, workers_by_pid)
        where = f"audit {audit_id}, run {run_id} {old_status}->{new_status} by {app!r}"
        if new_status == "running" and old_status != "running":
            if role != "executor" or writer != new_worker:
                out.append(Violation("I5", f"{where}: claim not made by worker {new_worker}"))
            if new_token is None or new_token in tokens[run_id]:
                out.append(Violation("I5", f"{where}: claim token {new_token} is not fresh"))
            tokens[run_id].add(new_token)
            continue
        if old_status != "running":
            continue
        if role == "executor":
            if writer != old_worker:
                out.append(
                    Violation(
                        "I5",
                        f"{where}: written by worker {writer or '?'} while worker {old_worker} "
                        f"held the lease (token {old_token})",
                    )
                )
            elif new_status == "running" and new_token != old_token:
                out.append(Violation("I5", f"{where}: a renewal changed the token"))
        elif role == "maintenance":
            if new_status not in ("retrying", "failed") or not (old_expires and old_expires < at):
                out.append(
                    Violation("I5", f"{where}: the reaper wrote a lease that had not expired")
                )
        elif not external_writers:
            out.append(Violation("I5", f"{where}: a write to a leased run from outside the loops"))
    return out


def check_deliveries(conn: psycopg.Connection[Any], *, allow_overlap: bool) -> list[Violation]:
    """I6: deliveries (ledger starts) per run ≤ attempts, one idempotency key, no overlap."""
    out = []
    runs = {
        run_id: (key, attempts)
        for run_id, key, attempts in _rows(
            conn, "SELECT id, idempotency_key, attempts FROM pgsched_job_run"
        )
    }
    ledger = _rows(
        conn,
        "SELECT run_id, attempt, idempotency_key, worker, phase, at "
        "FROM testapp_ledger ORDER BY id",
    )
    starts: Counter[int] = Counter()
    spans: dict[tuple[int, int, str], list[datetime]] = defaultdict(list)
    for run_id, attempt, key, worker, phase, at in ledger:
        if run_id not in runs:
            continue  # deleted by retention
        if key != runs[run_id][0]:
            out.append(Violation("I6", f"run {run_id} delivered with key {key!r}"))
        if phase == "start":
            starts[run_id] += 1
        spans[(run_id, attempt, worker)].append(at)
    for run_id, n in sorted(starts.items()):
        if n > runs[run_id][1]:
            out.append(
                Violation("I6", f"run {run_id}: {n} deliveries but {runs[run_id][1]} attempt(s)")
            )
    if not allow_overlap:
        by_run: dict[int, list[tuple[datetime, datetime, int]]] = defaultdict(list)
        for (run_id, attempt, _worker), times in spans.items():
            if len(times) == 2:
                by_run[run_id].append((times[0], times[1], attempt))
        for run_id, intervals in sorted(by_run.items()):
            intervals.sort()
            for (_a0, a1, na), (b0, _b1, nb) in itertools.pairwise(intervals):
                if b0 < a1:
                    out.append(
                        Violation(
                            "I6",
                            f"run {run_id}: attempt {nb} started at {b0.isoformat()} while "
                            f"attempt {na} ran until {a1.isoformat()}",
                        )
                    )
    return out


def check_exclusive(conn: psycopg.Connection[Any], *, allow_overlap: bool) -> list[Violation]:
    """I13: two runs of a schedule with an overlap policy (skip, buffer_one) never overlap.

    In the database: the attempts of different runs of one such schedule, each
    from its claim (``started_at``) to its recorded end (a ``lost`` attempt: its
    lease's expiry; one still running: its lease's expiry, or now), are
    disjoint. With the jobs' own witness (``testapp_ledger``; not with
    ``allow_overlap``, where a frozen replica's job may outlive its lease): each
    delivery from its start to its end (a killed job that wrote no end: until
    its attempt's recorded end) is disjoint from every other run's.
    """
    out = []
    attempts: dict[tuple[int, int], tuple[datetime, datetime]] = {}
    by_schedule: dict[int, list[tuple[datetime, datetime, int, int]]] = defaultdict(list)
    for schedule_id, run_id, number, start, end in _rows(
        conn,
        """SELECT r.schedule_id, r.id, a.number, a.started_at, a.finished_at
             FROM pgsched_attempt a JOIN pgsched_job_run r ON r.id = a.job_run_id
            WHERE r.overlap IS NOT NULL AND a.started_at IS NOT NULL
           UNION ALL
           SELECT schedule_id, id, attempts, started_at,
                  greatest(claim_expires_at, clock_timestamp())
             FROM pgsched_job_run WHERE overlap IS NOT NULL AND status = 'running'""",
    ):
        attempts[(run_id, number)] = (start, end)
        by_schedule[schedule_id].append((start, end, run_id, number))
    out += _disjoint("I13", "attempt", by_schedule)
    if allow_overlap:
        return out
    deliveries: dict[int, list[tuple[datetime, datetime, int, int]]] = defaultdict(list)
    for schedule_id, run_id, number, start, end in _rows(
        conn,
        """SELECT r.schedule_id, r.id, s.attempt, s.at,
                  (SELECT min(e.at) FROM testapp_ledger e
                    WHERE e.run_id = s.run_id AND e.attempt = s.attempt AND e.phase = 'end')
             FROM testapp_ledger s JOIN pgsched_job_run r ON r.id = s.run_id
            WHERE r.overlap IS NOT NULL AND s.phase = 'start'""",
    ):
        if end is None:  # killed mid-job: it ran at most until its lease expired
            forever = datetime.max.replace(tzinfo=start.tzinfo)
            end = attempts.get((run_id, number), (start, forever))[1]
        deliveries[schedule_id].append((start, end, run_id, number))
    out += _disjoint("I13", "delivery", deliveries)
    return out


def _disjoint(
    name: str, what: str, by_schedule: Mapping[int, list[tuple[datetime, datetime, int, int]]]
) -> list[Violation]:
    """Intervals of different runs of one schedule that overlap."""
    out = []
    for schedule_id, intervals in sorted(by_schedule.items()):
        intervals.sort()
        reach: tuple[datetime, int, int] | None = None  # the furthest end so far, its run
        for start, end, run_id, number in intervals:
            if reach is not None and start < reach[0] and run_id != reach[1]:
                out.append(
                    Violation(
                        name,
                        f"schedule {schedule_id}: run {run_id}'s {what} {number} started at "
                        f"{start.isoformat()} while run {reach[1]}'s {what} {reach[2]} lasted "
                        f"until {reach[0].isoformat()}",
                    )
                )
            if reach is None or end > reach[0]:
                reach = (end, run_id, number)
    return out


def check_canonical(conn: psycopg.Connection[Any]) -> list[Violation]:
    """I9: every occurrence a whole second on its schedule's grid."""
    out = []
    rows = _rows(
        conn,
        f"""SELECT r.id, r.scheduled_for, s.name, s.cron, s."interval", s.anchor, {ZONE}
             FROM pgsched_job_run r JOIN pgsched_schedule s ON s.id = r.schedule_id""",
    )
    cache: dict[tuple[Any, ...], Any] = {}
    for run_id, scheduled_for, name, cron, every, anchor, *zone in rows:
        key = (cron, every, anchor, *zone)
        if key not in cache:
            try:
                cache[key] = grid(cron, every, anchor, tuple(zone))  # type: ignore[arg-type]
            except timetable.TimetableError:
                cache[key] = None
        table = cache[key]
        if scheduled_for.microsecond:
            out.append(Violation("I9", f"run {run_id}: {scheduled_for} is not a whole second"))
        elif table is not None and not table.contains(scheduled_for):
            out.append(Violation("I9", f"run {run_id}: {scheduled_for} not on {name}'s grid"))
    return out


def check_bounded(
    conn: psycopg.Connection[Any], concurrency_by_worker: Mapping[str, int], planner_batch: int
) -> list[Violation]:
    """I10: never more live leases per worker than its slots; planner batches ≤ the batch.

    A worker holds a run from its claim until its outcome is recorded, or, for
    a run it lost, until the lease expired (the reaper dates the ``lost``
    attempt then; a run still ``running`` counts until its expiry or now).
    """
    out = []
    rows = _rows(
        conn,
        """SELECT worker, started_at, finished_at FROM pgsched_attempt WHERE started_at IS NOT NULL
           UNION ALL
           SELECT worker, started_at, least(claim_expires_at, clock_timestamp())
             FROM pgsched_job_run WHERE status = 'running'""",
    )
    events: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for worker, start, end in rows:
        events[worker].append((start, 1))
        events[worker].append((end, -1))
    for worker, points in events.items():
        limit = concurrency_by_worker.get(worker)
        if limit is None:
            continue
        level = peak = 0
        for _at, delta in sorted(points, key=lambda p: (p[0], p[1])):
            level += delta
            peak = max(peak, level)
        if peak > limit:
            out.append(
                Violation("I10", f"worker {worker} held {peak} runs at once (slots {limit})")
            )
    for created_at, n in _rows(
        conn,
        "SELECT created_at, count(DISTINCT schedule_id) FROM pgsched_job_run "
        "WHERE schedule_id IS NOT NULL GROUP BY 1 HAVING count(DISTINCT schedule_id) > %s",
        [planner_batch],
    ):
        out.append(
            Violation("I10", f"one planner transaction ({created_at}) planned {n} schedules")
        )
    return out


# -- liveness, policy and metrics -----------------------------------------------------


def check_liveness(
    conn: psycopg.Connection[Any], *, lookahead: float, grace: float, slack: float = 2.0
) -> list[Violation]:
    """I8: nothing running on an expired lease, no overdue active schedule, no due backlog."""
    out = []
    for (run_id,) in _rows(
        conn,
        "SELECT id FROM pgsched_job_run WHERE status = 'running' "
        "AND claim_expires_at < clock_timestamp() - make_interval(secs => %s)",
        [slack],
    ):
        out.append(Violation("I8", f"run {run_id} is running on an expired lease"))
    for name, nfa in _rows(
        conn,
        "SELECT name, next_fire_at FROM pgsched_schedule WHERE status = 'active' AND "
        "(next_fire_at IS NULL OR next_fire_at < clock_timestamp() - make_interval(secs => %s))",
        [lookahead + grace + slack],
    ):
        out.append(Violation("I8", f"schedule {name} is overdue (next_fire_at {nfa})"))
    ((backlog,),) = _rows(
        conn,
        "SELECT count(*) FROM pgsched_job_run r WHERE status IN ('pending', 'retrying') "
        "AND attempts < max_attempts "
        "AND fire_after < clock_timestamp() - make_interval(secs => %s) "
        # waiting behind an unfinished run of its schedule (overlap buffer_one) is not a backlog
        "AND NOT (overlap IS NOT NULL AND EXISTS (SELECT FROM pgsched_job_run e "
        "WHERE e.schedule_id = r.schedule_id AND e.overlap IS NOT NULL "
        "AND e.finished_at IS NULL AND e.id < r.id))",
        [slack + 1.0],
    )
    if backlog:
        out.append(Violation("I8", f"{backlog} run(s) due and not claimed"))
    return out


def check_policy(
    conn: psycopg.Connection[Any],
    expectations: Mapping[int, Expectation],
    baselines: Mapping[int, Baseline],
) -> list[Violation]:
    """I7: per schedule, exactly the policy's split of the missed occurrences."""
    out = []
    for sid, expect in sorted(expectations.items()):
        ((name, cron, every, anchor, skipped, *zone),) = _rows(
            conn,
            f'SELECT name, cron, "interval", anchor, skipped_occurrences, {ZONE} '
            "FROM pgsched_schedule WHERE id = %s",
            [sid],
        )
        table = grid(cron, every, anchor, tuple(zone))  # type: ignore[arg-type]
        wanted = table.latest(expect.start, expect.missed_end, expect.runs)
        got = [
            t
            for (t,) in _rows(
                conn,
                "SELECT scheduled_for FROM pgsched_job_run WHERE schedule_id = %s "
                "AND scheduled_for >= %s AND scheduled_for < %s ORDER BY 1",
                [sid, expect.start, expect.missed_end],
            )
        ]
        if got != wanted:
            out.append(
                Violation(
                    "I7",
                    f"schedule {name}: missed occurrences run {[t.isoformat() for t in got][:5]}"
                    f"{'...' if len(got) > 5 else ''} ({len(got)}), expected the newest "
                    f"{expect.runs}",
                )
            )
        counted = skipped - baselines[sid].skipped
        if counted != expect.skipped:
            out.append(
                Violation("I7", f"schedule {name}: skipped {counted}, expected {expect.skipped}")
            )
    return out


def check_metrics(
    samples: Sequence[Mapping[str, float]], *, created: int, skipped: int
) -> list[Violation]:
    """I11: the replicas' counters sum to what the database recorded."""
    from .harness import metric_sum

    out = []
    occurrences = sum(metric_sum(s, "pgsched_schedule_occurrences_total") for s in samples)
    skipped_metric = sum(
        metric_sum(s, "pgsched_schedule_skipped_occurrences_total") for s in samples
    )
    if occurrences != created:
        out.append(
            Violation("I11", f"occurrences_total is {occurrences:g}, the database has {created}")
        )
    if skipped_metric != skipped:
        out.append(
            Violation(
                "I11",
                f"skipped_occurrences_total is {skipped_metric:g}, the database has {skipped}",
            )
        )
    return out


def by_invariant(violations: Iterable[Violation]) -> dict[str, int]:
    return dict(Counter(v.invariant for v in violations))
