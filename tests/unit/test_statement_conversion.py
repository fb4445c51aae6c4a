"""The named statements' parameters, as psycopg sends them (no database).

``db.ServerBindingCursor`` keeps the parsed text of each named statement
(psycopg re-parses a text over 4 KiB at every execution); what it sends must
be what psycopg's own conversion sends. The recording leaves out arrays that
are NULL throughout (``unnest`` pads them: the same rows).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from django_pgsched.conf import get_settings
from django_pgsched.context import RunContext
from django_pgsched.engine import db, queries, recording
from django_pgsched.engine.claiming import claim_params
from django_pgsched.engine.claims import Claim, Outcome
from django_pgsched.engine.leases import Lease
from django_pgsched.outcomes import Defer
from django_pgsched.statuses import AttemptStatus

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _claim(run_id: int, attempt: int = 1) -> Claim:
    return Claim(
        run_id=run_id,
        token=uuid.uuid4(),
        attempt=attempt,
        max_attempts=3,
        timeout=timedelta(minutes=5),
        job="tests.noop",
        queue="default",
        kwargs={},
        schedule_name=None,
        scheduled_for=NOW,
        idempotency_key=f"k{run_id}",
        fire_after=NOW,
        started_at=NOW,
        lease=Lease.granted(requested_at=0.0, duration=600.0, margin=5.0),
        context=RunContext(
            job_run_id=run_id,
            job="tests.noop",
            schedule_name=None,
            scheduled_for=NOW,
            attempt=attempt,
            max_attempts=3,
            idempotency_key=f"k{run_id}",
            worker="w",
        ),
    )


def _pass_params(outcomes: list[Outcome]) -> dict[str, Any]:
    settings = get_settings()
    claiming = claim_params(
        limit=8,
        jobs=["tests.noop", "tests.other"],
        queues=None,
        worker="w",
        settings=settings,
        floor=(-1, NOW, 7),
    )
    return {
        "now": None,
        "live_since": NOW,
        **recording.record_params(outcomes, settings),
        **claiming,
    }


def _sent(query_class: type[PostgresQuery], sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    query = query_class(Transformer())
    query.convert(sql, params)
    params_sent = [bytes(p) if p is not None else None for p in query.params or ()]
    return query.query, params_sent, tuple(query.types), list(query.formats or ())


def test_a_long_named_statement_is_parsed_once_and_sent_as_psycopg_sends_it():
    sql = queries.EXECUTOR_PASS.sql
    assert len(sql.encode()) > 4096  # psycopg would parse it at every execution
    assert db.ServerBindingCursor._query_cls is db.statements._NamedStatementQuery
    first = _pass_params([Outcome(_claim(1), AttemptStatus.SUCCEEDED, "", 0.1)])
    second = _pass_params(
        [
            Outcome(_claim(2), AttemptStatus.FAILED, "boom", 0.2, error_class="x.Boom"),
            Outcome(_claim(3), AttemptStatus.SUCCEEDED, "", 0.3, value='{"a": 1}'),
        ]
    )
    db.statements._converted.pop(sql, None)
    for params in (first, second, first):
        assert _sent(db.statements._NamedStatementQuery, sql, params) == _sent(
            PostgresQuery, sql, params
        )
        assert sql in db.statements._converted


def test_recording_sends_null_for_an_array_null_throughout():
    settings = get_settings()
    succeeded = [Outcome(_claim(i), AttemptStatus.SUCCEEDED, "", 0.1) for i in (1, 2)]
    params = recording.record_params(succeeded, settings)
    assert params["delays"] is None
    assert params["values"] is None
    assert params["not_befores"] is None
    assert params["details"] is None
    assert params["ids"] == [1, 2]
    assert params["errors"] == ["", ""]

    mixed = [
        *succeeded,
        Outcome(
            _claim(3, attempt=1),
            AttemptStatus.FAILED,
            "boom",
            0.1,
            not_before=NOW,
            detail={"n": 1},
        ),
        Outcome(_claim(4), AttemptStatus.DEFERRED, "later", 0.1, defer=Defer(delay=5.0)),
    ]
    params = recording.record_params(mixed, settings)
    assert params["delays"][:2] == [None, None] and params["delays"][2] > 0
    assert params["not_befores"] == [None, None, NOW, None]
    assert [d is not None for d in params["details"]] == [False, False, True, False]
    assert params["values"] is None
