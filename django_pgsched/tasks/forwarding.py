"""Schedules of tasks that another backend runs: each occurrence becomes one ``enqueue()``.

A schedule may name a task whose backend is not a
:class:`~django_pgsched.tasks.PgschedBackend` (django-tasks-db, RQ, a cloud
queue, the ``ImmediateBackend``). The planner makes one run per occurrence, as
for any schedule; running it means calling the task's ``enqueue()`` with the
schedule's kwargs, and the run succeeds once that call returned and the
hand-over is recorded.

How many times the other backend receives an occurrence:

* The hand-over is recorded on the run (its ``return_value``: the backend's
  alias and the id of the result it returned) in the same transaction as the
  ``enqueue()`` call, on the scheduler's database, and only while this
  attempt still holds the run's lease (the write carries the lease token). A
  later attempt that finds the record does not enqueue again.
* So when the other backend keeps its queue in the same database, through the
  same connection (django-tasks-db with the default router), the enqueue and
  its record commit or roll back together: **exactly one enqueue per
  occurrence**, whatever crashes.
* Otherwise (a broker, another database) the enqueue is durable before the
  record commits: a crash, a lost lease or a failed commit between the two
  makes the next attempt enqueue again: **at least once**. Each call carries
  the occurrence's idempotency key (``pgsched:<schedule id>:<time>``, the same
  for every attempt), as the keyword argument ``idempotency_key`` when the
  task's function takes one, so the other backend's worker can drop repeats.
"""

from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction

from ..conf import get_settings

if TYPE_CHECKING:
    from ..engine.claims import Claim
    from .compat import Task

KEY_ARGUMENT = "idempotency_key"


class HandOverLost(RuntimeError):
    """The lease was lost before the hand-over was recorded; the enqueue was rolled back."""


def takes_key(task: Task[..., Any]) -> bool:
    """Whether ``task``'s function accepts the ``idempotency_key`` keyword argument."""
    params = inspect.signature(task.func).parameters.values()
    return any(
        (p.name == KEY_ARGUMENT and p.kind != p.POSITIONAL_ONLY) or p.kind == p.VAR_KEYWORD
        for p in params
    )


def forward(task: Task[..., Any], alias: str, claim: Claim) -> str:
    """Enqueue ``claim``'s occurrence into ``task``'s backend once; return the record (JSON)."""
    using = get_settings().DATABASE_ALIAS
    done = _recorded(using, claim.run_id)
    if done is not None:
        return json.dumps(done)  # an earlier attempt handed it over
    kwargs: dict[str, Any] = dict(claim.kwargs)
    if takes_key(task):
        kwargs.setdefault(KEY_ARGUMENT, claim.idempotency_key)
    with transaction.atomic(using=using):
        result = task.enqueue(**kwargs)
        record = {"forwarded_to": alias, "result_id": str(result.id)}
        with connections[using].cursor() as cursor:
            cursor.execute(
                "UPDATE pgsched_job_run SET return_value = %s::jsonb"
                " WHERE id = %s AND claimed_by = %s",
                [json.dumps(record), claim.run_id, claim.token],
            )
            if cursor.rowcount != 1:
                raise HandOverLost(
                    f"run {claim.run_id}: the lease was lost before the hand-over to "
                    f"backend {alias!r} was recorded; rolled back"
                )
    return json.dumps(record)


def _recorded(using: str, run_id: int) -> dict[str, Any] | None:
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT return_value FROM pgsched_job_run WHERE id = %s", [run_id])
        row = cursor.fetchone()
    value = row[0] if row else None
    if isinstance(value, str):
        value = json.loads(value)
    return value if isinstance(value, dict) and "forwarded_to" in value else None
