"""Prometheus metrics and health endpoints for ``runscheduler --metrics-port``.

Counters subscribe to :mod:`django_pgsched.events`, which are sent after the
work committed, so they move by exactly what the database recorded. Gauges
that describe the database (backlog, clock skew) are read at scrape time by a
custom collector, so every replica answers the same and no leader is needed.

Endpoints: ``/metrics``, ``/healthz`` (200 while every loop of this replica
keeps ticking), ``/readyz`` (200 while the database answers), served by
:mod:`.httpd` on ``--metrics-host`` (default ``127.0.0.1``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import events, sqlfiles
from ..conf import get_settings
from ..delivery.models import BreakerState
from ..engine import stranded
from ..partitions import layout
from ..statuses import TERMINAL_STATUSES, UNFINISHED_STATUSES, RunStatus, ScheduleStatus
from .httpd import App, ProbeServer, Response

if TYPE_CHECKING:
    from ..engine.runner import Runner

logger = logging.getLogger(__name__)

# like runserver: loopback unless told otherwise (--metrics-host 0.0.0.0 in a container)
DEFAULT_HOST = "127.0.0.1"

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Metrics:
    """The contract's metrics in a registry of their own.

    With ``tenant_label`` (``PGSCHED["METRICS_TENANT_LABEL"]``), the runs'
    counter and histogram (``pgsched_runs_finished``,
    ``pgsched_run_duration_seconds``) carry the run's tenant as a label too.
    Off by default: every tenant multiplies their series.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, tenant_label: bool = False
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.tenant_label = tenant_label
        by_tenant = ["tenant"] if tenant_label else []
        r = self.registry
        self.occurrences = Counter(
            "pgsched_schedule_occurrences",
            "Runs materialised from schedule occurrences.",
            ["queue", "job", "kind"],
            registry=r,
        )
        self.skipped = Counter(
            "pgsched_schedule_skipped_occurrences",
            "Due occurrences a misfire policy discarded (also in Schedule.skipped_occurrences).",
            ["queue", "job", "kind", "policy"],
            registry=r,
        )
        self.ledgered = Counter(
            "pgsched_schedule_ledger_occurrences",
            "Occurrences that did not run, by reason, as recorded in the ledger "
            "(pgsched_skipped_range): misfires, dst_gap, paused, broken, overlap, deadline.",
            ["queue", "job", "kind", "reason"],
            registry=r,
        )
        self.backfilled = Counter(
            "pgsched_schedule_backfilled_occurrences",
            "Runs a backfill created for past occurrences, by the ledger reason each one "
            "was taken out of ('none': it was in no range).",
            ["queue", "job", "kind", "reason"],
            registry=r,
        )
        self.finished = Counter(
            "pgsched_runs_finished",
            "Runs that reached a terminal status.",
            ["queue", "job", "status", *by_tenant],
            registry=r,
        )
        self.duration = Histogram(
            "pgsched_run_duration_seconds",
            "Duration of each attempt, on this replica's clock.",
            ["queue", "job", *by_tenant],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.leases_lost = Counter(
            "pgsched_leases_lost", "Leases this replica found it no longer held.", registry=r
        )
        self.leases_reaped = Counter(
            "pgsched_leases_reaped", "Expired leases this replica's reaper recovered.", registry=r
        )
        self.http = Counter(
            "pgsched_http_deliveries",
            "pgsched.http attempts this replica made, by how they ended.",
            ["outcome"],
            registry=r,
        )
        self.breaker_changes = Counter(
            "pgsched_breaker_transitions",
            "Circuit breaker state changes this replica made, by the state entered.",
            ["state"],
            registry=r,
        )

    # -- event receivers ---------------------------------------------------------------

    def on_planned(
        self,
        sender: object,
        created: dict[tuple[str, str, str], int],
        skipped: dict[tuple[str, str, str, str], int],
        ledgered: dict[tuple[str, str, str, str], int] | None = None,
        **kwargs: Any,
    ) -> None:
        for created_labels, count in created.items():
            self.occurrences.labels(*created_labels).inc(count)
        for skipped_labels, count in skipped.items():
            self.skipped.labels(*skipped_labels).inc(count)
        for ledger_labels, count in (ledgered or {}).items():
            self.ledgered.labels(*ledger_labels).inc(count)

    def on_backfilled(
        self,
        sender: object,
        labels: tuple[str, str, str],
        created: int,
        taken: dict[str, int],
        **kwargs: Any,
    ) -> None:
        for reason, count in taken.items():
            self.backfilled.labels(*labels, reason).inc(count)
        if created > sum(taken.values()):
            self.backfilled.labels(*labels, "none").inc(created - sum(taken.values()))

    def on_guarded(
        self,
        sender: object,
        missed: dict[tuple[str, str], int],
        ledgered: dict[tuple[str, str, str, str], int],
        missed_tenants: dict[tuple[str, str, str], int] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.tenant_label:
            for (queue, job, tenant), count in (missed_tenants or {}).items():
                self.finished.labels(queue, job, RunStatus.MISSED.value, tenant).inc(count)
        else:
            for (queue, job), count in missed.items():
                self.finished.labels(queue, job, RunStatus.MISSED.value).inc(count)
        for ledger_labels, count in ledgered.items():
            self.ledgered.labels(*ledger_labels).inc(count)

    def on_attempt(
        self,
        sender: object,
        job: str,
        queue: str,
        status: str,
        duration: float,
        outcome: str = "",
        tenant: str = "",
        **kwargs: Any,
    ) -> None:
        who = (tenant,) if self.tenant_label else ()
        if outcome != RunStatus.CANCELLED:  # a cancel has no duration of its own
            self.duration.labels(queue, job, *who).observe(duration)
        if status in TERMINAL_STATUSES:
            self.finished.labels(queue, job, status, *who).inc()

    def on_lost(self, sender: object, **kwargs: Any) -> None:
        self.leases_lost.inc()

    def on_reaped(
        self,
        sender: object,
        runs: list[tuple[Any, ...]],
        tenants: dict[int, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.leases_reaped.inc(len(runs))
        for run_id, status, job, queue in runs:
            if status in TERMINAL_STATUSES:
                who = ((tenants or {}).get(run_id, ""),) if self.tenant_label else ()
                self.finished.labels(queue, job, status, *who).inc()

    def on_http(self, sender: object, outcome: str, **kwargs: Any) -> None:
        self.http.labels(outcome).inc()

    def on_breaker(self, sender: object, state: str, **kwargs: Any) -> None:
        self.breaker_changes.labels(state).inc()

    def connect(self) -> None:
        uid = f"pgsched-metrics-{id(self)}"
        events.http_delivered.connect(self.on_http, weak=False, dispatch_uid=uid)
        events.breaker_changed.connect(self.on_breaker, weak=False, dispatch_uid=uid)
        events.occurrences_planned.connect(self.on_planned, weak=False, dispatch_uid=uid)
        events.occurrences_backfilled.connect(self.on_backfilled, weak=False, dispatch_uid=uid)
        events.attempt_finished.connect(self.on_attempt, weak=False, dispatch_uid=uid)
        events.runs_guarded.connect(self.on_guarded, weak=False, dispatch_uid=uid)
        events.lease_lost.connect(self.on_lost, weak=False, dispatch_uid=uid)
        events.leases_reaped.connect(self.on_reaped, weak=False, dispatch_uid=uid)

    def disconnect(self) -> None:
        uid = f"pgsched-metrics-{id(self)}"
        for signal in (
            events.occurrences_planned,
            events.occurrences_backfilled,
            events.attempt_finished,
            events.runs_guarded,
            events.lease_lost,
            events.leases_reaped,
            events.http_delivered,
            events.breaker_changed,
        ):
            signal.disconnect(dispatch_uid=uid)


# The backlog counts what some live replica could run (engine/stranded.py: the
# replicas' registrations are advisory locks); queries.sql says more.
BACKLOG_SQL = sqlfiles.get("ops", "backlog").format(held=stranded.HELD, runnable=stranded.RUNNABLE)


# Per-tenant gauges (PGSCHED["METRICS_TENANT_LABEL"]): each from the partial index of
# its runs, never the history; at most TENANTS_LIMIT tenants each, the busiest first.
TENANTS_LIMIT = 1000
TENANT_RUNNING_SQL = sqlfiles.get("ops", "tenant_running")
TENANT_DUE_SQL = sqlfiles.get("ops", "tenant_due")
TENANT_PAUSED_SQL = sqlfiles.get("ops", "tenant_paused")


def _tenant_rows(alias: str, sql: str, name: str) -> list[tuple[Any, ...]] | None:
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, {"limit": TENANTS_LIMIT})
            return list(cursor.fetchall())
    except DatabaseError:
        logger.warning("metrics: %s could not be read", name, exc_info=True)
        return None


def _tenant_gauges(alias: str) -> Iterator[GaugeMetricFamily]:
    """Live leases and due runs by tenant, and the paused tenants."""
    for family, sql in (
        (
            GaugeMetricFamily(
                "pgsched_tenant_runs_running",
                "Runs of the tenant holding a live lease now (what max_running counts).",
                labels=["tenant"],
            ),
            TENANT_RUNNING_SQL,
        ),
        (
            GaugeMetricFamily(
                "pgsched_tenant_runs_due",
                "Runs of the tenant due and waiting to be claimed.",
                labels=["tenant"],
            ),
            TENANT_DUE_SQL,
        ),
        (
            GaugeMetricFamily(
                "pgsched_tenant_paused", "1 for each paused tenant.", labels=["tenant"]
            ),
            TENANT_PAUSED_SQL,
        ),
    ):
        rows = _tenant_rows(alias, sql, family.name)
        if rows is None:
            continue
        for tenant, value in rows:
            family.add_metric([tenant], value)
        yield family


class DatabaseCollector(Collector):
    """Gauges read from the database at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        alias = get_settings().DATABASE_ALIAS
        try:
            with connections[alias].cursor() as cursor:
                before = time.time()
                cursor.execute(
                    BACKLOG_SQL,
                    {
                        "unfinished": list(UNFINISHED_STATUSES),
                        "broken": ScheduleStatus.BROKEN,
                        "grace": get_settings().STRANDED_GRACE.total_seconds(),
                    },
                )
                db_time, backlog, broken, stranded_runs, stranded_schedules = cursor.fetchone()
                after = time.time()
        except DatabaseError as exc:  # one line: a database away is news, not a bug
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            logger.warning("metrics: the database did not answer (%s)", detail)
            return
        breakers: dict[str, int] | None = None
        try:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT state, count(*) FROM pgsched_breaker GROUP BY state")
                breakers = dict(cursor.fetchall())
        except DatabaseError:  # e.g. a role without access to pgsched_breaker: the rest stands
            logger.warning("metrics: the circuit breakers could not be read", exc_info=True)
        ahead: int | None = None
        try:
            ahead = layout.read(connections[alias]).months_ahead(db_time)
        except DatabaseError:
            logger.warning("metrics: the partitions could not be read", exc_info=True)
        if ahead is not None:
            yield GaugeMetricFamily(
                "pgsched_partition_months_ahead",
                "Whole months of run partitions ready after the current one (-1: none for now).",
                value=ahead,
            )
        yield GaugeMetricFamily(
            "pgsched_runs_due_backlog",
            "Runs due and not yet terminal that a live replica could run (autoscale on this).",
            value=backlog,
        )
        yield GaugeMetricFamily(
            "pgsched_runs_stranded",
            "Pending runs due longer than STRANDED_GRACE whose job no live replica runs.",
            value=stranded_runs,
        )
        yield GaugeMetricFamily(
            "pgsched_schedules_stranded",
            "Schedules with stranded runs: their job is registered by no live replica.",
            value=stranded_schedules,
        )
        yield GaugeMetricFamily(
            "pgsched_schedules_broken",
            "Schedules marked broken: their definition cannot be evaluated (see last_error).",
            value=broken,
        )
        if breakers is not None:
            by_state = GaugeMetricFamily(
                "pgsched_breakers",
                "Circuit breakers of HTTP delivery, by state (closed, open, half_open).",
                labels=["state"],
            )
            for state in BreakerState.values:
                by_state.add_metric([state], breakers.get(state, 0))
            yield by_state
        stalls = _stalls()
        if stalls is not None:
            stalled = GaugeMetricFamily(
                "pgsched_schedules_stalled",
                "Active schedules that went quiet: not planned, or no run started for two.",
                labels=["reason"],
            )
            for reason in ("not_planned", "not_running"):
                stalled.add_metric([reason], stalls.get(reason, 0))
            yield stalled
        if get_settings().METRICS_TENANT_LABEL:
            yield from _tenant_gauges(alias)
        yield GaugeMetricFamily(
            "pgsched_clock_skew_seconds",
            "This replica's clock minus the database's.",
            value=(before + after) / 2 - db_time.timestamp(),
        )


STALLS_EVERY = 30.0  # seconds between two reads of the stalled schedules
STALLS_LIMIT = 10_000
_stalls_cache: tuple[float, dict[str, int]] | None = None


def _stalls() -> dict[str, int] | None:
    """Stalled schedules by reason, read at most every ``STALLS_EVERY`` seconds."""
    global _stalls_cache
    from ..ledger.stalls import stalled

    now = time.monotonic()
    if _stalls_cache is not None and now - _stalls_cache[0] < STALLS_EVERY:
        return _stalls_cache[1]
    try:
        found = stalled(limit=STALLS_LIMIT)
    except DatabaseError:
        logger.warning("metrics: the stalled schedules could not be read", exc_info=True)
        return None
    counts: dict[str, int] = {}
    for stall in found:
        counts[stall.reason] = counts.get(stall.reason, 0) + 1
    _stalls_cache = (now, counts)
    return counts


def loops_healthy(runner: Runner, now: float | None = None) -> dict[str, bool]:
    """Whether each loop of ``runner`` ticked recently enough."""
    now = time.monotonic() if now is None else now
    s = runner.settings
    intervals = {
        "planner": s.PLANNER_INTERVAL.total_seconds(),
        "executor": s.EXECUTOR_POLL_INTERVAL.total_seconds(),
        "maintenance": min(s.REAPER_INTERVAL, s.RETENTION_INTERVAL).total_seconds(),
    }
    result = {}
    for loop in runner.loops:
        last = runner.state.last_tick.get(loop, runner.state.started)
        result[loop] = now - last <= max(30.0, 10 * intervals[loop])
    return result


def _ready() -> bool:
    alias = get_settings().DATABASE_ALIAS
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


def make_app(runner: Runner, metrics: Metrics) -> App:
    """The routes: path -> response (called on the server's worker threads)."""
    registry = metrics.registry

    def app(path: str) -> Response:
        if path == "/metrics":
            return Response(200, generate_latest(registry), "text/plain; version=0.0.4")
        if path == "/healthz":
            if runner.state.waiting_for:  # alive, and doing what it should: waiting
                return Response(
                    200, f"starting: waiting for the {runner.state.waiting_for}\n".encode()
                )
            loops = loops_healthy(runner)
            ok = all(loops.values()) and not runner.stopping.is_set()
            body = "\n".join(f"{k}: {'ok' if v else 'stalled'}" for k, v in loops.items())
            return Response(200 if ok else 503, (body + "\n").encode())
        if path == "/readyz":
            ok = _ready()
            return Response(200 if ok else 503, b"ok\n" if ok else b"database unreachable\n")
        return Response(404, b"not found\n")

    return app


def make_server(
    port: int, runner: Runner, metrics: Metrics, host: str = DEFAULT_HOST
) -> ProbeServer:
    """The server, bound but not serving yet: call ``serve_forever()`` on a thread."""
    # each answer closes the worker thread's connection: a scrape never holds one open
    return ProbeServer(host, port, make_app(runner, metrics), on_close=connections.close_all)


def serve(port: int, runner: Runner, host: str = DEFAULT_HOST) -> ProbeServer:
    """Start the metrics and health server on a daemon thread."""
    metrics = Metrics(tenant_label=get_settings().METRICS_TENANT_LABEL)
    metrics.registry.register(DatabaseCollector())
    if runner.broker is not None:
        from ..broker.metrics import BrokerCollector
        from ..broker.runtime import BrokerRuntime

        if isinstance(runner.broker, BrokerRuntime):
            metrics.registry.register(BrokerCollector(runner.broker))
    metrics.connect()
    server = make_server(port, runner, metrics, host)
    thread = threading.Thread(target=server.serve_forever, name="pgsched-metrics", daemon=True)
    thread.start()
    logger.info("metrics, /healthz and /readyz on %s port %d", host, server.server_address[1])
    return server
