"""Named failpoints for the fault-injection tests. Inert in production.

The engine calls :func:`hit` at named points of the planner, executor and
maintenance loops. Nothing happens unless the environment variable
``PGSCHED_FAILPOINTS`` names that point when the process starts, for example::

    PGSCHED_FAILPOINTS="planner.before_commit=kill"
    PGSCHED_FAILPOINTS="executor.before_record=sleep(5);reaper.between_steps=raise"
    PGSCHED_FAILPOINTS="executor.before_job=kill@3"   # the third time the point is reached

Actions: ``kill`` (SIGKILL this process), ``stop`` (SIGSTOP it), ``exit`` (``os._exit(3)``),
``raise`` (raise :class:`FailpointError`), ``sleep(seconds)``. Before acting, the
point appends a line to ``PGSCHED_FAILPOINT_LOG`` (if set) so a test can prove
the fault happened. The system check ``pgsched.E007`` refuses to run with
failpoints set while ``DEBUG`` is off.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass

ENV = "PGSCHED_FAILPOINTS"
LOG_ENV = "PGSCHED_FAILPOINT_LOG"

POINTS = (
    "planner.after_claim",  # schedules locked, nothing computed
    "planner.before_commit",  # runs inserted and schedules advanced, not committed
    "planner.after_commit",
    "executor.after_claim",  # runs leased, no job started
    "executor.before_job",  # on the slot thread, before calling the job
    "executor.after_job",  # the job returned, its outcome not yet queued
    "executor.before_record",  # outcomes about to be written
    "executor.after_record",
    "executor.before_renew",
    "executor.before_send",  # a job re-asserts its lease (RunContext.ensure_lease)
    "delivery.in_flight",  # pgsched.http: the request sent, its answer not yet read
    "reaper.between_steps",  # candidates read, not yet reaped
    "retention.before_delete",
    "publisher.before_publish",  # outbox rows taken (locked), nothing published (CLAIMS nats)
    "publisher.after_publish",  # the stream acknowledged them; the rows not yet deleted
    "partitions.before_attach",  # a month's table created, not yet attached
    "partitions.after_detach",  # a month of runs detached, its attempts not yet
    "partitions.before_drop",  # a month of runs and attempts detached, not yet dropped
    "runner.on_stop",  # the first stop signal arrived
)

_SPEC = re.compile(
    r"^(?P<action>kill|stop|exit|raise|sleep\((?P<seconds>[0-9.]+)\))(@(?P<nth>\d+))?$"
)


class FailpointError(RuntimeError):
    """Raised by a failpoint set to ``raise``."""


@dataclass
class _Point:
    action: str
    seconds: float = 0.0
    nth: int = 1
    hits: int = 0


def _parse(text: str) -> dict[str, _Point]:
    points: dict[str, _Point] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, spec = item.partition("=")
        name = name.strip()
        match = _SPEC.match(spec.strip())
        if name not in POINTS or match is None:
            raise ValueError(
                f"{ENV}: bad entry {item!r}; use <point>=kill|stop|exit|raise|sleep(s)[@n] "
                f"with a point among {', '.join(POINTS)}"
            )
        action = "sleep" if match["seconds"] else match["action"]
        points[name] = _Point(action, float(match["seconds"] or 0), int(match["nth"] or 1))
    return points


_active: dict[str, _Point] = _parse(os.environ.get(ENV, ""))
_lock = threading.Lock()


def enabled() -> bool:
    return bool(_active)


def hit(name: str) -> None:
    """Act if failpoint ``name`` is armed; otherwise return at once."""
    if not _active:
        return
    point = _active.get(name)
    if point is None:
        return
    with _lock:
        point.hits += 1
        if point.hits != point.nth and point.action != "sleep":
            return
    log = os.environ.get(LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{time.time():.6f} {os.getpid()} {name} {point.action}\n")
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(0.05)  # the stop is asynchronous: do not run on before it lands
    elif point.action == "exit":
        os._exit(3)
    elif point.action == "raise":
        raise FailpointError(f"failpoint {name}")
    elif point.action == "sleep":
        time.sleep(point.seconds)


def reload() -> None:
    """Re-read the environment (tests)."""
    global _active
    _active = _parse(os.environ.get(ENV, ""))
