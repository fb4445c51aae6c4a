"""The chaos soak: every capability at once, faults on a schedule, judged by the invariants.

One run has two phases on the private cluster's database clock (libfaketime):

- **A, across a month boundary.** The clock is put shortly before the next UTC month, so
  the runs start in one monthly partition and go on in the next; retention (15 s, detached
  tables kept: ``RETENTION_KEEP_DETACHED``) detaches the month that ended once its runs are
  done.
- **B, across a daylight-saving transition.** Phase A's schedules are paused, the clock is
  moved to shortly before the next spring transition of Europe/Berlin, London and Helsinki
  (the same instant, 01:00 UTC), and a new set of schedules, zoned ones among them, runs
  across it.

In both phases: UTC cron schedules every second, interval schedules, long jobs, overlap
(``skip``, ``buffer_one`` with a start deadline), HTTP deliveries to a loopback server that
answers 200, 500, 429 with ``Retry-After`` or stalls past the run's timeout, two tenants with
quotas (``max_running``, weights, ``allowed_jobs``, ``max_schedules``, ``min_interval``)
under fair claiming, a ``django.tasks`` producer (:mod:`tests.faults.producer`), and claims
through NATS on a three-node JetStream cluster (the stream replicated three times).

The nemesis picks one fault at a time, with a pause of ``fault_gap`` seconds between: ``kill
-9`` of a replica (its supervisor starts the next incarnation), SIGSTOP for longer than a
lease, ``pg_ctl restart -m immediate``, ``pg_terminate_backend`` of a scheduler session, one
NATS node killed and started again, and the network between replica ``a`` and PostgreSQL
cut (:mod:`tests.faults.netcut`, a namespace of the test's own).

Judged at the end, with every replica stopped: the fault suite's safety set
(:func:`tests.faults.invariants.check`: no duplicate occurrence, nothing lost, the accounting
of every occurrence as one run or one ledger point, terminal states, attempts, fencing, the
witness table's deliveries, overlap) over the runs still attached *and* those in detached
months; every task the producer enqueued run once and succeeded; every 200 delivery reached
the server, never more often than its run's attempts. Measured, not judged here: start
lateness of the healthy schedules outside the fault windows, replica RSS and connection
counts over time (``bench/chaos.py`` records them for the 30-minute run).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from django_pgsched.timing import zones
from tests.natsutil import NatsCluster, claims_settings
from tests.webhook_server import WebhookServer

from . import invariants, netcut
from .cluster import ROOT
from .harness import Replica, child_env, wait_until
from .scenario import Scenario

FAULTS = ("kill", "stop", "terminate", "pg_restart", "nats_node", "netcut")
#: Seconds after a fault heals that still belong to its window (a lease expires, the reaper
#: passes, a replica reconnects): runs due then are not counted as healthy.
RECOVERY = 5.0
STOP_FOR = 5.0  # SIGSTOP: longer than a lease (DEFAULT_TIMEOUT 2 s and the trust margin)
CUT_FOR = 5.0
NODE_DOWN_FOR = 8.0
RETENTION = 15.0
TRANSITION_ZONES = ("Europe/Berlin", "Europe/London", "Europe/Helsinki")
JOBS = ["faults.work"]


@dataclass
class Config:
    seconds: float = 150.0  # phases A and B together, without set-up and settling
    fault_gap: tuple[float, float] = (6.0, 12.0)
    seed: int = 1
    replicas: int = 3
    concurrency: int = 6
    faults: tuple[str, ...] = FAULTS


@dataclass
class Fault:
    kind: str
    target: str
    start: datetime  # database clock
    end: datetime


@dataclass
class Report:
    config: dict[str, Any]
    faults: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    by_invariant: dict[str, int] = field(default_factory=dict)
    accounted: dict[str, int] = field(default_factory=dict)
    lateness: dict[str, Any] = field(default_factory=dict)
    rss_mb: dict[str, Any] = field(default_factory=dict)
    connections: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, Any] = field(default_factory=dict)
    http: dict[str, Any] = field(default_factory=dict)
    tenants: dict[str, Any] = field(default_factory=dict)
    broker: dict[str, Any] = field(default_factory=dict)
    months: dict[str, Any] = field(default_factory=dict)
    dst: dict[str, Any] = field(default_factory=dict)
    netcut: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # the checks beyond the safety set

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Chaos:
    """One chaos soak over ``scenario`` (a fresh database on a libfaketime cluster)."""

    def __init__(self, scenario: Scenario, config: Config, workdir: Path) -> None:
        if not scenario.cluster.faketime:
            raise RuntimeError("the chaos soak moves the database clock: install libfaketime")
        self.scenario = scenario
        self.config = config
        self.workdir = workdir
        self.rng = random.Random(config.seed)
        self.report = Report(config=asdict(config))
        self.faults: list[Fault] = []
        self.groups: dict[str, list[int]] = {}
        self.quiet: list[tuple[datetime, datetime]] = []  # windows lateness leaves out
        self.samples: list[dict[str, Any]] = []
        self._sampling = threading.Event()
        self.offset = 0.0  # database clock minus this host's, in seconds
        self.server = WebhookServer()
        self.nats = NatsCluster(workdir / "nats").start()
        self.claims = claims_settings(self.nats.urls, STREAM_REPLICAS=3)
        self.cut = netcut.NetCut(scenario.cluster.port, workdir / "netcut.log") if (
            "netcut" in config.faults and netcut.available()
        ) else None  # fmt: skip
        self.producer: subprocess.Popen[bytes] | None = None
        self._deck: list[str] = []
        self.tasks_log = workdir / "tasks.log"

    # -- clock ---------------------------------------------------------------------

    def db_time(self) -> datetime:
        """The database's clock, read from this host's (no query: the server may be down)."""
        return datetime.fromtimestamp(time.time() + self.offset, UTC)

    def move_clock(self, to: datetime) -> None:
        cluster = self.scenario.cluster
        base = float(cluster.clock_file.read_text().strip() or 0)
        cluster.set_clock_offset(base + (to - self.scenario.db_now()).total_seconds())
        wait_until(
            lambda: abs((self.scenario.db_now() - to).total_seconds()) < 5,
            20,
            f"the database clock to move to {to.isoformat()}",
        )
        self.offset = self.scenario.clock_offset()

    # -- workload ------------------------------------------------------------------

    def overrides(self) -> dict[str, Any]:
        return {
            "CLAIMS": {**self.claims, "SWEEP_INTERVAL": 5, "ACK_WAIT": 5, "TIMEOUT": 1},
            "HTTP": {"ALLOW_NETWORKS": ["127.0.0.1/32"], "ALLOW_PORTS": [self.server.port]},
            "RETENTION": RETENTION,
            "RETENTION_INTERVAL": 3,
            "RETENTION_KEEP_DETACHED": True,
        }

    def add_tenants(self) -> None:
        self.scenario.sql(
            """
            INSERT INTO pgsched_tenant (key, max_schedules, min_interval, max_running, weight,
                                        allowed_jobs)
            VALUES ('big', NULL, NULL, 3, 1, %(jobs)s::jsonb),
                   ('small', 6, interval '1 second', NULL, 3, %(jobs)s::jsonb)
            """,
            {"jobs": json.dumps(JOBS)},
        )

    def add_mix(self, tag: str) -> list[int]:
        s = self.scenario
        url = self.server.url
        groups = {
            "fast": s.add_schedules(16, prefix=f"{tag}-fast", cron="* * * * * *"),
            "interval": s.add_schedules(4, prefix=f"{tag}-every3", interval=3),
            "long": s.add_schedules(
                4, prefix=f"{tag}-long", cron="*/3 * * * * *", kwargs={"seconds": 1.5}
            ),
            "skip": s.add_schedules(3, prefix=f"{tag}-skip", cron="* * * * * *",
                                    kwargs={"seconds": 1.5}, timeout=2, overlap="skip"),
            "buffer": s.add_schedules(2, prefix=f"{tag}-buffer", cron="*/2 * * * * *",
                                      kwargs={"seconds": 2.5}, timeout=4, overlap="buffer_one",
                                      start_deadline=1),
            "http_ok": s.add_schedules(2, prefix=f"{tag}-http-ok", job="pgsched.http",
                                       cron="*/2 * * * * *",
                                       kwargs={"url": url("/ok"), "body": {"tag": tag}}),
            "http_500": s.add_schedules(1, prefix=f"{tag}-http-500", job="pgsched.http",
                                        cron="*/5 * * * * *", max_attempts=2,
                                        kwargs={"url": url("/status/500")}),
            "http_429": s.add_schedules(1, prefix=f"{tag}-http-429", job="pgsched.http",
                                        cron="*/5 * * * * *", max_attempts=2,
                                        kwargs={"url": url("/status/429?retry_after=1")}),
            "http_stall": s.add_schedules(1, prefix=f"{tag}-http-stall", job="pgsched.http",
                                          cron="*/10 * * * * *", max_attempts=1, timeout=2,
                                          kwargs={"url": url("/slow?s=4")}),
            "big": s.add_schedules(6, prefix=f"{tag}-big", cron="* * * * * *",
                                   kwargs={"seconds": 0.3}, tenant="big"),
            "small": s.add_schedules(3, prefix=f"{tag}-small", cron="* * * * * *",
                                     tenant="small"),
        }  # fmt: skip
        return self._register(groups)

    def add_zoned(self) -> list[int]:
        s = self.scenario
        groups = {
            "berlin": s.add_schedules(2, prefix="b-berlin", cron="* * * * * *",
                                      zone=("Europe/Berlin", "shift", "first")),
            "berlin_2am": s.add_schedules(1, prefix="b-berlin-2am", cron="*/30 * 2 * * *",
                                          zone=("Europe/Berlin", "skip", "first")),
            "london": s.add_schedules(1, prefix="b-london", cron="*/2 * * * * *",
                                      zone=("Europe/London", "shift", "first")),
            "helsinki": s.add_schedules(1, prefix="b-helsinki", cron="*/3 * 3 * * *",
                                        zone=("Europe/Helsinki", "shift", "first")),
            "new_york": s.add_schedules(1, prefix="b-new-york", cron="* * * * * *",
                                        zone=("America/New_York", "shift", "first")),
        }  # fmt: skip
        return self._register(groups)

    def _register(self, groups: dict[str, list[int]]) -> list[int]:
        """Remember each group's schedule ids; return them all."""
        ids: list[int] = []
        for name, members in groups.items():
            self.groups.setdefault(name, []).extend(members)
            ids += members
        return ids

    def quota_refusals(self) -> list[str]:
        """Witnesses that the tenants' quotas are on: writes they must refuse, by raw SQL."""
        refused = []
        for job, tenant, expect in (
            ("pgsched.http", "small", "allowed_jobs"),
            ("faults.work", "small", "max_schedules"),
        ):
            try:
                n = 1 if expect == "allowed_jobs" else 7  # small may have 6
                with self.scenario.conn.transaction():
                    self.scenario.add_schedules(n, prefix=f"refused-{expect}", job=job,
                                                cron="*/7 * * * * *", tenant=tenant)  # fmt: skip
                    raise AssertionError(f"{expect}: the database accepted the schedule")
            except psycopg.Error as exc:
                refused.append(expect if expect in str(exc) else f"{expect}? {exc}")
        return refused

    # -- processes -----------------------------------------------------------------

    def start_replicas(self) -> list[Replica]:
        s = self.scenario
        replicas = []
        for i in range(self.config.replicas):
            name = "abcdefgh"[i]
            url = self.cut.url(s.dbname) if (self.cut and name == "a") else s.url
            options: dict[str, Any] = {"concurrency": self.config.concurrency, "database_url": url}
            replicas.append(s.start(name, overrides=self.overrides(), **options))
        for replica in replicas:
            s.fleet.supervise(replica, max_restarts=1000)
        return replicas

    def start_producer(self) -> None:
        env = child_env(self.scenario.url)
        env["PYTHONPATH"] = str(ROOT)
        with (self.workdir / "producer.log").open("ab") as log:
            self.producer = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.producer", str(self.tasks_log), "0.2"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
                start_new_session=True,
            )  # fmt: skip

    def stop_producer(self) -> None:
        if self.producer is not None and self.producer.poll() is None:
            self.producer.send_signal(signal.SIGTERM)
            try:
                self.producer.wait(20)
            except subprocess.TimeoutExpired:
                self.producer.kill()
                self.producer.wait(5)

    # -- sampling ------------------------------------------------------------------

    def _sample_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._sampling.wait(2.0):
            rss = {}
            for replica in self.scenario.fleet.live():
                with contextlib.suppress(OSError, ValueError):
                    for line in Path(f"/proc/{replica.pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            rss[replica.worker_id] = int(line.split()[1]) / 1024
            connections = None
            try:
                if conn is None or conn.closed:
                    conn = self.scenario.cluster.connect("postgres")
                    conn.autocommit = True
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                    [self.scenario.dbname],
                ).fetchone()
                connections = int(row[0]) if row else None
            except psycopg.Error:
                conn = None
            self.samples.append(
                {"at": self.db_time().isoformat(), "rss_mb": rss, "connections": connections}
            )
        if conn is not None:
            conn.close()

    # -- faults --------------------------------------------------------------------

    def inject(self, kind: str) -> Fault | None:
        s = self.scenario
        live = s.fleet.live()
        start = self.db_time()
        target = ""
        if kind == "kill":
            if not live:
                return None
            victim = self.rng.choice(live)
            target = victim.worker_id
            victim.kill9()
        elif kind == "stop":
            if not live:
                return None
            victim = self.rng.choice(live)
            target = victim.worker_id
            victim.signal(signal.SIGSTOP)
            time.sleep(STOP_FOR)
            victim.signal(signal.SIGCONT)
        elif kind == "terminate":
            with contextlib.suppress(psycopg.Error):
                rows = s.sql(
                    "SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name LIKE 'pgsched %%' "
                    "ORDER BY random() LIMIT 1"
                )
                target = rows[0][0] if rows else ""
        elif kind == "pg_restart":
            target = "postgres"
            s.conn.close()
            s.cluster.restart("immediate")
            s.reconnect()
        elif kind == "nats_node":
            i = self.rng.randrange(len(self.nats.servers))
            target = f"nats-{i}"
            self.nats.servers[i].kill()
            time.sleep(NODE_DOWN_FOR)
            self.nats.servers[i].start()
        elif kind == "netcut":
            if self.cut is None:
                return None
            target = "a<->postgres"
            self.cut.cut()
            time.sleep(CUT_FOR)
            self.cut.heal()
        fault = Fault(kind, target, start, self.db_time())
        self.faults.append(fault)
        return fault

    def nemesis(self, seconds: float) -> None:
        """Faults until ``seconds`` have passed: every kind once per round, in a random order."""
        deadline = time.monotonic() + seconds
        kinds = [k for k in self.config.faults if k != "netcut" or self.cut is not None]
        while True:
            pause = self.rng.uniform(*self.config.fault_gap)
            if time.monotonic() + pause >= deadline:
                time.sleep(max(0.0, deadline - time.monotonic()))
                return
            time.sleep(pause)
            if not self._deck:
                self._deck = self.rng.sample(kinds, len(kinds))
            self.inject(self._deck.pop())

    # -- the run -------------------------------------------------------------------

    def run(self) -> Report:
        s = self.scenario
        phase = self.config.seconds / 2
        sampler = threading.Thread(target=self._sample_loop, daemon=True)
        try:
            # phase A: across the next UTC month boundary
            now = s.db_now()
            boundary = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
            lead_a = max(15.0, 0.3 * phase)
            self.move_clock(boundary - timedelta(seconds=lead_a + 10))
            self.add_tenants()
            phase_a = self.add_mix("a")
            self.report.tenants["refused"] = self.quota_refusals()
            s.snapshot_baseline()
            started = self.db_time()
            self.start_replicas()
            self.start_producer()
            sampler.start()
            self.quiet.append((started, self.db_time() + timedelta(seconds=RECOVERY)))
            self.nemesis(phase)
            # the switch: phase A's schedules paused, the clock moved to the transition
            switch = self.db_time()
            s.sql("UPDATE pgsched_schedule SET status = 'paused' WHERE id = ANY(%s)", [phase_a])
            with contextlib.suppress(AssertionError):
                wait_until(lambda: not self._live_runs(phase_a), 60, "phase A's runs to end")
            transition = self._next_spring(s.db_now())
            lead_b = max(15.0, 0.3 * phase)
            self.move_clock(transition - timedelta(seconds=lead_b + 5))
            self.track(self.add_mix("b") + self.add_zoned())
            self.quiet.append((switch, self.db_time() + timedelta(seconds=RECOVERY)))
            self.report.dst = {"transition": transition.isoformat(), "zones": TRANSITION_ZONES}
            self.nemesis(phase)
            self.report.dst["crossed"] = s.db_now() > transition
            self.finish()
        finally:
            self._sampling.set()
            if sampler.is_alive():
                sampler.join(10)
            self.close()
        return self.report

    def track(self, ids: list[int]) -> None:
        self.scenario.track(ids)

    def _live_runs(self, ids: list[int]) -> int:
        return int(
            self.scenario.one(
                "SELECT count(*) FROM pgsched_job_run WHERE schedule_id = ANY(%s) "
                "AND status IN ('pending', 'running', 'retrying')",
                [ids],
            )
        )

    @staticmethod
    def _next_spring(now: datetime) -> datetime:
        lo = zones.from_datetime(now) + 3600
        found = zones.transitions(zones.get_zone("Europe/Berlin"), lo, lo + 400 * 86_400)
        return zones.to_datetime(next(t for t in found if t.change > 0).at)

    def finish(self) -> None:
        s = self.scenario
        s.fleet.stop_supervising()
        for replica in s.fleet.live():
            replica.signal(signal.SIGCONT)
        if self.cut is not None and self.cut.is_cut:
            self.cut.heal()
        for server in self.nats.servers:
            if server.proc is None:
                server.start()
        self.stop_producer()
        s.settle(timeout=180)
        # every task the producer enqueued, run to its end before the replicas stop: a
        # task in its retry backoff, or claimed at the stop and handed back, is not due
        # and I8 holds without it (one that never ends is reported by _check_tasks)
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: (
                    not s.one(
                        "SELECT count(*) FROM pgsched_job_run WHERE task_call IS NOT NULL"
                        " AND status IN ('pending', 'retrying', 'running')"
                    )
                ),
                120,
                "every task run to end",
                interval=0.5,
            )
        self.report.broker = self._broker_counts()
        self.report.broker["replicas_that_claimed_through_it"] = sorted(
            r.worker_id for r in s.fleet.replicas if "claiming through the broker" in r.log()
        )
        self.report.connections["settled"] = self._connections_now()
        codes = s.fleet.stop_all(60)
        self.report.problems += [f"a replica exited {c} on SIGTERM" for c in codes if c != 0]
        self._with_detached_months()
        violations = s.check(allow_overlap=True)
        self.report.violations = [str(v) for v in violations[:200]]
        self.report.by_invariant = invariants.by_invariant(violations)
        self.report.accounted = invariants.ACCOUNTED[-1] if invariants.ACCOUNTED else {}
        self.report.faults = [
            {"kind": f.kind, "target": f.target, "start": f.start.isoformat(),
             "seconds": round((f.end - f.start).total_seconds(), 2)}
            for f in self.faults
        ]  # fmt: skip
        self.report.netcut = (
            {"dropped_packets": self.cut.dropped(), "connections": self.cut.connections()}
            if self.cut
            else {"available": False}
        )
        self._check_tasks()
        self._check_http()
        self._measure_lateness()
        self._summarize_samples()
        self._tenant_figures()

    # -- judging -------------------------------------------------------------------

    def _broker_counts(self) -> dict[str, Any]:
        claimed = 0.0
        paths = {}
        for replica in self.scenario.fleet.live():
            with contextlib.suppress(OSError):
                samples = replica.scrape()
                claimed += samples.get('pgsched_claims_messages_total{outcome="claimed"}', 0.0)
                broker = samples.get('pgsched_claims_path{path="broker"}') == 1
                paths[replica.worker_id] = "broker" if broker else "postgres"
        return {"claimed_by_live_incarnations": claimed, "paths_at_end": paths}

    def _connections_now(self) -> int:
        return int(
            self.scenario.one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        )

    def _with_detached_months(self) -> None:
        """Temporary views named like the tables, over the attached and the detached months.

        Retention detached the months that ended (``RETENTION_KEEP_DETACHED`` keeps their
        tables, renamed ``<month>_detached``); the checker's connection reads every run and
        attempt through these views, which ``pg_temp`` puts ahead of the real tables.
        """
        s = self.scenario
        detached = {}
        for parent in ("pgsched_job_run", "pgsched_attempt"):
            tables = [
                name
                for (name,) in s.sql(
                    "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND NOT "
                    "c.relispartition AND c.relname ~ %s ORDER BY 1",
                    [f"^{parent}_p[0-9]{{6}}(_detached)?$"],
                )
            ]
            detached[parent] = tables
            columns = ", ".join(
                f'"{c}"'
                for (c,) in s.sql(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    [f"public.{parent}"],
                )
            )
            union = " UNION ALL ".join(
                f"SELECT {columns} FROM public.{t}" for t in [parent, *tables]
            )
            s.sql(f"CREATE TEMP VIEW {parent} AS {union}")
        self.report.months["detached"] = detached["pgsched_job_run"]
        self.report.months["runs_in_detached"] = sum(
            int(s.one(f"SELECT count(*) FROM public.{t}")) for t in detached["pgsched_job_run"]
        )

    def _check_tasks(self) -> None:
        lines = self.tasks_log.read_text().splitlines() if self.tasks_log.exists() else []
        ok = {int(line.split()[1]) for line in lines if line.startswith("ok ")}
        errors = sum(1 for line in lines if line.startswith("error"))
        runs = dict(
            self.scenario.sql("SELECT id, status FROM pgsched_job_run WHERE task_call IS NOT NULL")
        )
        missing = sorted(ok - set(runs))
        not_done = sorted(i for i in ok & set(runs) if runs[i] != "succeeded")
        unknown = len(set(runs) - ok)
        self.report.tasks = {
            "enqueued": len(ok), "errors": errors, "runs": len(runs),
            "succeeded": sum(1 for v in runs.values() if v == "succeeded"),
            "missing": missing[:20], "not_succeeded": not_done[:20], "unknown": unknown,
        }  # fmt: skip
        if not ok:
            self.report.problems.append("the producer enqueued nothing")
        if missing:
            self.report.problems.append(f"{len(missing)} enqueued task(s) have no run")
        if not_done:
            self.report.problems.append(f"{len(not_done)} task run(s) did not succeed")
        if unknown > errors:
            self.report.problems.append(
                f"{unknown} task run(s) no enqueue returned, but only {errors} enqueue(s) failed"
            )

    def _check_http(self) -> None:
        s = self.scenario
        ids = self.groups["http_ok"]
        rows = s.sql(
            "SELECT r.idempotency_key, r.status, r.attempts FROM pgsched_job_run r "
            "WHERE r.schedule_id = ANY(%s)",
            [ids],
        )
        received = Counter(r.headers.get("webhook-id", "") for r in self.server.requests_to("/ok"))
        undelivered = [k for k, status, _ in rows if status == "succeeded" and k not in received]
        over = [k for k, _, attempts in rows if received.get(k, 0) > attempts]
        self.report.http = {
            "ok_runs": len(rows),
            "ok_succeeded": sum(1 for _, status, _ in rows if status == "succeeded"),
            "ok_requests": sum(received.values()),
            "undelivered": len(undelivered),
            "more_than_attempts": len(over),
            "statuses": dict(
                s.sql(
                    "SELECT status, count(*) FROM pgsched_job_run WHERE job = 'pgsched.http' "
                    "GROUP BY 1"
                )
            ),
        }
        if undelivered:
            self.report.problems.append(f"{len(undelivered)} succeeded delivery(ies) never arrived")
        if over:
            self.report.problems.append(f"{len(over)} run(s) delivered more often than attempted")

    def _windows(self) -> list[tuple[datetime, datetime]]:
        out = list(self.quiet)
        for f in self.faults:
            out.append((f.start, f.end + timedelta(seconds=RECOVERY)))
        return out

    def _measure_lateness(self) -> None:
        s = self.scenario
        windows = self._windows()
        rows = s.sql(
            """SELECT r.scheduled_for, min(a.started_at) FROM pgsched_job_run r
                 JOIN pgsched_attempt a ON a.job_run_id = r.id
                WHERE r.schedule_id = ANY(%s) GROUP BY r.id, r.scheduled_for""",
            [self.groups["fast"]],
        )
        inside: list[float] = []
        outside: list[float] = []
        for due, started in rows:
            late = (started - due).total_seconds()
            hit = any(a <= due <= b for a, b in windows)
            (inside if hit else outside).append(late)
        self.report.lateness = {
            "healthy_runs": len(rows),
            "outside_windows": _percentiles(outside),
            "inside_windows": _percentiles(inside),
            "recovery_seconds": RECOVERY,
        }

    def _summarize_samples(self) -> None:
        by_worker: dict[str, list[float]] = {}
        for sample in self.samples:
            for worker, mb in sample["rss_mb"].items():
                by_worker.setdefault(worker, []).append(mb)
        self.report.rss_mb = {
            worker: {"first": round(v[0], 1), "last": round(v[-1], 1), "max": round(max(v), 1),
                     "samples": len(v),  # one every 2 s
                     "at_2_min": round(v[60], 1) if len(v) > 60 else None}
            for worker, v in by_worker.items()
        }  # fmt: skip
        counts = [x["connections"] for x in self.samples if x["connections"] is not None]
        thirds = [counts[i * len(counts) // 3 : (i + 1) * len(counts) // 3] for i in range(3)]
        self.report.connections.update(
            {
                "samples": len(counts),
                "max_by_third": [max(t) if t else None for t in thirds],
                "median_by_third": [statistics.median(t) if t else None for t in thirds],
            }
        )

    def _tenant_figures(self) -> None:
        rows = self.scenario.sql(
            "SELECT tenant, status, count(*) FROM pgsched_job_run WHERE tenant <> '' "
            "GROUP BY 1, 2 ORDER BY 1, 2"
        )
        self.report.tenants["runs"] = {f"{t}:{st}": n for t, st, n in rows}
        # max_running: the most runs of 'big' running at once, from the attempts' spans
        spans = self.scenario.sql(
            "SELECT a.started_at, a.finished_at FROM pgsched_attempt a JOIN pgsched_job_run r "
            "ON r.id = a.job_run_id WHERE r.tenant = 'big' AND a.finished_at IS NOT NULL"
        )
        events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        peak = running = 0
        for _, step in events:
            running += step
            peak = max(peak, running)
        self.report.tenants["big_peak_running"] = peak
        if peak > 3:
            self.report.problems.append(f"tenant big ran {peak} runs at once (max_running 3)")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_producer()
        self.scenario.fleet.close()
        self.server.stop()
        self.nats.stop()
        if self.cut is not None:
            self.cut.close()


def _percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"n": len(values), "p50": pick(0.5), "p99": pick(0.99), "max": round(ordered[-1], 3)}


def restore_clock(scenario: Scenario) -> None:
    """Put the cluster's clock back and restart it (every server process reads it afresh)."""
    from .cluster import wait_for_server

    scenario.cluster.set_clock_offset(0)
    with contextlib.suppress(Exception):
        scenario.conn.close()
    scenario.cluster.restart("fast")
    wait_for_server(scenario.cluster)
    scenario.reconnect()
