"""Claiming: what a pass asks for, and the claims its answer grants.

The claim itself is one CTE of ``executor_pass`` (``claimable``: every
predicate of "which runs may this replica claim" in one place). This module
holds the executor's side of it: the claim cursor, the parameters, turning a
claimed row into a :class:`~.claims.Claim` with its lease, and when to look
again if the slots were not all filled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from threading import Event
from typing import Any

from ..bounds import JSON_MAX_DEPTH
from ..conf import Settings
from ..context import RunContext
from .backoff import Backoff
from .claims import Claim
from .leases import Lease
from .rows import PassRow

CLAIM_FULL_SCAN_INTERVAL = 1.0  # seconds between claims that read the claim index from the start


@dataclass
class ClaimCursor:
    """Where a claim starts reading the claim order index: ``(-priority, fire_after, id)``.

    The index is ``pgsched_run_claim_order_idx``. Each claim leaves the
    claimed runs' old versions in the claim index until
    vacuum removes them, and vacuum cannot while a transaction anywhere in the
    database holds an old snapshot: a claim that always read from the start
    would walk every run claimed since then, and slow down the longer that
    transaction stays open. So a claim reads from where the last one started.
    A run that falls due behind that point (planned late, or released by a
    stopping replica) is found by a full read, which happens at least every
    ``CLAIM_FULL_SCAN_INTERVAL`` seconds and whenever a read from the cursor
    did not fill the idle slots. So is a run of a higher priority than the
    cursor's that falls due meanwhile: under a backlog, priority order holds
    among the runs due at each full read, and a more urgent run coming due
    waits at most that interval.
    """

    clock: Callable[[], float]
    floor: tuple[int, datetime, int] | None = None
    next_full_scan: float = 0.0

    def reset(self) -> None:
        """Read from the start next time."""
        self.floor = None

    def for_pass(self, limit: int) -> tuple[int, datetime, int] | None:
        """Where this pass's claim starts (None: from the start)."""
        if not limit or self.floor is None or self.clock() >= self.next_full_scan:
            return None
        return self.floor

    def move(
        self, floor: tuple[int, datetime, int] | None, claimed: Sequence[PassRow], *, full: bool
    ) -> None:
        """After a claim that started at ``floor`` and got ``claimed`` (``full``: every slot)."""
        if floor is None:
            self.next_full_scan = self.clock() + CLAIM_FULL_SCAN_INTERVAL
        if not full:  # the slots were not all filled: read from the start next time
            self.floor = None
            return
        self.floor = min((-row.priority, row.fire_after, _id(row)) for row in claimed)


def claim_params(
    *,
    limit: int,
    jobs: list[str],
    queues: list[str] | None,
    worker: str,
    settings: Settings,
    floor: tuple[int, datetime, int] | None,
) -> dict[str, Any]:
    """The claim's parameters of ``executor_pass``."""
    return {
        "limit": limit,
        "jobs": jobs,
        "queues": queues,
        "worker": worker,
        "lease_factor": settings.LEASE_FACTOR,
        "floor_rank": floor[0] if floor else None,
        "floor_at": floor[1] if floor else None,
        "floor_id": floor[2] if floor else None,
        "held": False,  # executor_pass_by_id: ids a claim source named, never a held tenant's
        "default_held": default_max_running(settings) is not None,
    }


def default_weight(settings: Settings) -> int:
    """``PGSCHED["TENANT_DEFAULTS"]["weight"]``: the weight of tenants without a record."""
    value = (settings.TENANT_DEFAULTS or {}).get("weight", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def default_max_running(settings: Settings) -> int | None:
    """``PGSCHED["TENANT_DEFAULTS"]["max_running"]``: the limit of tenants without a
    record (checked by the system check pgsched.E003)."""
    value = (settings.TENANT_DEFAULTS or {}).get("max_running")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def new_claim(
    row: PassRow,
    *,
    requested_at: float,
    answered_at: float,
    settings: Settings,
    worker: str,
    shutdown: Event,
    clock: Callable[[], float],
) -> Claim:
    """A claim for a claimed row; its lease is what the database granted (expiry − start)."""
    run_id = _id(row)
    assert row.claimed_by is not None
    kwargs, task_call, unreadable = read_payloads(row)
    lease = Lease.granted(
        requested_at=requested_at,
        answered_at=answered_at,
        duration=(row.claim_expires_at - row.started_at).total_seconds(),
        margin=settings.LEASE_TRUST_MARGIN.total_seconds(),
    )
    context = RunContext(
        job_run_id=run_id,
        job=row.job,
        schedule_name=row.schedule_name,
        scheduled_for=row.scheduled_for,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        idempotency_key=row.idempotency_key,
        worker=worker,
        tenant=row.tenant,
        _shutdown=shutdown,
        _clock=clock,
    )
    return Claim(
        run_id=run_id,
        token=row.claimed_by,
        attempt=row.attempts,
        max_attempts=row.max_attempts,
        timeout=row.timeout,
        job=row.job,
        queue=row.queue,
        kwargs=kwargs,
        schedule_name=row.schedule_name,
        scheduled_for=row.scheduled_for,
        idempotency_key=row.idempotency_key,
        fire_after=row.fire_after,
        started_at=row.started_at,
        lease=lease,
        context=context,
        task_call=task_call,
        unreadable=unreadable,
    )


def read_payloads(row: PassRow) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """A claimed row's kwargs and task call, decoded, and why it cannot run ('' if it can).

    Each row on its own: a payload Python cannot decode (nested deeper than its
    recursion limit, an integer of more than 4,300 digits) or outside its bounds
    (:func:`payload_beyond_bounds`), or a time or timeout out of range
    (``defect``, named by the claim) fails this run only.
    """
    problems = [f"out of range: {row.defect}"] if row.defect else []
    kwargs: dict[str, Any] = {}
    task_call: dict[str, Any] | None = None
    try:
        decoded = _json(row.kwargs)
        if not isinstance(decoded, dict):
            raise ValueError(f"expected a JSON object, got {type(decoded).__name__}")
        kwargs = decoded
        if payload_beyond_bounds(row.kwargs, decoded):
            problems.append(f"out of range: {_BEYOND.format(field='kwargs')}")
    except RecursionError:  # nested past Python's decoder (about 1,000 levels before 3.12)
        problems.append(f"out of range: {_BEYOND.format(field='kwargs')}")
    except Exception as exc:  # ValueError (digits), TypeError
        problems.append(f"kwargs cannot be decoded: {exc}")
    try:
        call = _json(row.task_call)
        if call is not None and not isinstance(call, dict):
            raise ValueError(f"expected a JSON object, got {type(call).__name__}")
        task_call = call
        if payload_beyond_bounds(row.task_call, call):
            problems.append(f"out of range: {_BEYOND.format(field='task_call')}")
    except RecursionError:
        problems.append(f"out of range: {_BEYOND.format(field='task_call')}")
    except Exception as exc:
        problems.append(f"task_call cannot be decoded: {exc}")
    return kwargs, task_call, "; ".join(problems)


_BEYOND = "{field} nested deeper than 100 levels or holding a number of 4,300 digits or more"


def payload_beyond_bounds(text: Any, decoded: Any) -> bool:
    """Whether a claimed payload is outside the bounds its column's domain checks on write.

    The domain's constraint (``pgsched_run_json_readable``: nested at most
    :data:`~django_pgsched.bounds.JSON_MAX_DEPTH` levels, every number under
    10^4300 in magnitude) holds for every run written with it in place; this
    catches a row written while it was dropped. Checked here, on the claimed
    run alone, rather than by the claim statement for every run: a text shorter
    than 200 characters can be neither (101 levels take 202 brackets; such a
    number, 4,301 digits), which is nearly every payload.
    """
    if not isinstance(text, str) or len(text) < 2 * JSON_MAX_DEPTH:
        return False
    stack: list[tuple[Any, int]] = [(decoded, 0)]
    infinite = False
    while stack:  # iterative: a deep payload never recurses
        item, level = stack.pop()
        if level >= JSON_MAX_DEPTH:  # an item 100 levels down (the root is level 0)
            return True
        if isinstance(item, dict):
            stack.extend((value, level + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, level + 1) for value in item)
        elif isinstance(item, float) and not math.isfinite(item):
            infinite = True  # beyond a float: is it beyond the bound too?
    if not infinite:
        return False  # an integer of 4,301 digits or more is refused by the decoder itself
    limit = Decimal(10) ** 4300
    items: list[Any] = [json.loads(text, parse_float=Decimal)]
    while items:
        item = items.pop()
        if isinstance(item, dict):
            items.extend(item.values())
        elif isinstance(item, list):
            items.extend(item)
        elif isinstance(item, Decimal) and abs(item) >= limit:
            return True
    return False


def _json(value: Any) -> Any:
    if value == "{}":  # most runs' kwargs: no decoder for them
        return {}
    return json.loads(value) if isinstance(value, (str, bytes)) else value


class NextDue:
    """When the next pending run is due, on the local monotonic clock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.at: float | None = None  # monotonic
        # due but not claimable (another replica holds it for a moment): look again soon
        self._retry = Backoff(first=0.05, cap=1.0)

    def claimed(self) -> None:
        self._retry.reset()

    def note(self, due: datetime | None, db_clock: datetime) -> float | None:
        """Remember when the next pending run is due (database clock -> local clock)."""
        if due is None:
            self.at = None
            return None
        wait: float = (due - db_clock).total_seconds()
        if wait <= 0:
            wait = self._retry.next()
        else:
            self._retry.reset()
        self.at = self.clock() + wait
        return wait


def _id(row: PassRow) -> int:
    assert row.id is not None
    return row.id
