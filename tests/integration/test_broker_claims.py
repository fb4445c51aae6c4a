"""Claims through NATS JetStream (PGSCHED["CLAIMS"] "nats") against the machine's server.

In-process: the outbox's triggers, the publisher and the executor's consumer,
each test on a stream of its own. Real replicas and faults: tests/faults/test_broker.py.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test import override_settings

from django_pgsched import enqueue
from django_pgsched.broker import schema
from django_pgsched.broker.client import NatsBroker
from django_pgsched.broker.consumer import BROKER, POSTGRES, SWEEP_AGAIN, BrokerClaims
from django_pgsched.broker.messages import subject
from django_pgsched.broker.publisher import Publisher, outbox_lag
from django_pgsched.broker.schema import disable_outbox, ensure_outbox, outbox_state
from django_pgsched.conf import get_settings
from django_pgsched.engine.executor import Executor
from django_pgsched.models import JobRun
from tests.natsutil import claims_settings, delete_stream, nats_call, require_machine_nats
from tests.testapp import jobs


def outbox_rows() -> list[tuple[int, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT run_id, queue FROM pgsched_claim_outbox ORDER BY id")
        return list(cursor.fetchall())


@pytest.fixture
def nats_claims(db: None) -> Iterator[dict[str, Any]]:
    require_machine_nats()
    claims = claims_settings(SWEEP_INTERVAL=3600)
    with override_settings(PGSCHED={"CLAIMS": claims}):
        ensure_outbox(connection)
        yield claims
    delete_stream(claims["NATS_URL"], claims["STREAM"])


@pytest.fixture
def broker(nats_claims: dict[str, Any]) -> Iterator[NatsBroker]:
    b = NatsBroker(get_settings().claims).start(wait=10)
    assert b.available, b.last_error
    yield b
    b.close()


def consumer_state(claims: dict[str, Any]) -> tuple[int, int]:
    """(messages in the stream, delivered and not acknowledged)."""

    async def info(js: Any) -> tuple[int, int]:
        stream = await js.stream_info(claims["STREAM"])
        consumer = await js.consumer_info(claims["STREAM"], "pgsched_all")
        return stream.state.messages, consumer.num_ack_pending

    return nats_call(claims["NATS_URL"], info)


def wait_acked(claims: dict[str, Any]) -> tuple[int, int]:
    deadline = time.monotonic() + 5
    while True:
        state = consumer_state(claims)
        if state[1] == 0 or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_outbox_triggers_are_disabled_by_default(db):
    assert outbox_state(connection) == (0, 2)
    enqueue("tests.noop")
    assert outbox_rows() == []  # the postgres transport writes no outbox row


def _outbox_definitions() -> list[str]:
    """The outbox's function, triggers and indexes as PostgreSQL deparses them, without
    the casts and parentheses a deparse of a deparse adds (the same expression)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_functiondef('pgsched_claim_outbox_add'::regproc)"
            " UNION ALL SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t"
            " WHERE t.tgrelid = 'pgsched_job_run'::regclass AND t.tgname = ANY(%s)"
            " UNION ALL SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
            " WHERE i.indrelid = 'pgsched_claim_outbox'::regclass",
            [list(schema.TRIGGER_NAMES)],
        )
        found = [row[0] for row in cursor.fetchall()]
    return sorted(re.sub(r"::(text|character varying)(\[\])?|[()]", "", d) for d in found)


def test_the_brokers_outbox_ddl_makes_what_the_migration_made(db):
    # the migration's SQL and broker/queries.sql (ensure_outbox) spell the outbox's
    # function, triggers and index twice: running the broker's over the migration's
    # changes nothing
    made = _outbox_definitions()
    assert len(made) == 1 + len(schema.TRIGGER_NAMES) + 2  # function, triggers, pkey + due
    with connection.cursor() as cursor:
        cursor.execute(schema.TABLE + schema.FUNCTION + schema.TRIGGERS + schema.DISABLE)
    assert _outbox_definitions() == made


def test_a_claimable_run_gets_one_outbox_row_per_time_it_becomes_claimable(nats_claims):
    assert outbox_state(connection) == (2, 2)
    run = enqueue("tests.fail")  # max_attempts=2
    assert outbox_rows() == [(run.pk, run.queue)]
    Executor(concurrency=1, inline=True).run_once()  # claimed (no row), failed, retrying (a row)
    run.refresh_from_db()
    assert run.status == "retrying"
    assert outbox_rows() == [(run.pk, run.queue)] * 2
    disable_outbox(connection)
    assert outbox_state(connection) == (0, 2)


def test_publish_claim_by_id_run_and_ack_after_the_terminal_write(nats_claims, broker):
    run = enqueue("tests.noop", kwargs={"x": 1}, tenant="acme")
    published = Publisher(broker, get_settings()).run_once()
    assert (published.published, published.dropped, published.failed) == (1, 0, 0)
    assert outbox_rows() == [] and outbox_lag(connection) == (0.0, 0)
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    executor = Executor(concurrency=2, inline=True, broker=consumer)
    result = executor.run_once()
    run.refresh_from_db()
    assert result.claimed == 1 and run.status == "succeeded"
    assert jobs.CALLS == [{"job": "noop", "x": 1}]
    assert consumer.stats.path == BROKER and consumer.stats.claimed == 1
    assert wait_acked(nats_claims) == (1, 0)  # acknowledged once recorded


def test_subject_is_keyed_by_queue_and_tenant(nats_claims, broker):
    run = enqueue("tests.noop", tenant="acme")
    Publisher(broker, get_settings()).run_once()

    async def last(js: Any) -> str:
        msg = await js.get_last_msg(nats_claims["STREAM"], f"{nats_claims['SUBJECT_PREFIX']}.>")
        return msg.subject

    assert nats_call(nats_claims["NATS_URL"], last) == subject(
        nats_claims["SUBJECT_PREFIX"], run.queue, "acme"
    )


def test_a_message_for_a_run_no_longer_claimable_is_acked_and_dropped(nats_claims, broker):
    run = enqueue("tests.noop")
    Publisher(broker, get_settings()).run_once()
    Executor(concurrency=1, inline=True).run_once()  # claimed with SKIP LOCKED meanwhile
    run.refresh_from_db()
    assert run.status == "succeeded"
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    result = Executor(concurrency=1, inline=True, broker=consumer).run_once()
    assert result.claimed == 0 and consumer.stats.dropped == 1
    assert len(jobs.CALLS) == 1
    assert wait_acked(nats_claims)[1] == 0


def test_poison_messages_are_acked_and_dropped(nats_claims, broker):
    prefix = nats_claims["SUBJECT_PREFIX"]

    async def publish(js: Any) -> None:
        await js.publish(f"{prefix}.default._", b'{"run": 987654321}')  # no such run
        await js.publish(f"{prefix}.default._", b"not json")
        await js.publish(f"{prefix}.default._", b'{"run": "1; DROP TABLE"}')

    nats_call(nats_claims["NATS_URL"], publish)
    run = enqueue("tests.noop")
    Publisher(broker, get_settings()).run_once()
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    executor = Executor(concurrency=4, inline=True, broker=consumer)
    claimed = 0
    deadline = time.monotonic() + 5
    while consumer.stats.delivered < 4 and time.monotonic() < deadline:
        claimed += executor.run_once().claimed
    run.refresh_from_db()
    assert claimed == 1 and run.status == "succeeded"
    assert (consumer.stats.malformed, consumer.stats.dropped) == (2, 1)
    assert wait_acked(nats_claims)[1] == 0


def test_pull_asks_for_at_most_the_idle_slots(nats_claims, broker):
    runs = [enqueue("tests.noop") for _ in range(5)]
    Publisher(broker, get_settings()).run_once()
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    ids = consumer.pull(2, 1.0)
    assert ids is not None and len(ids) == 2
    consumer.give_back()
    assert {r.pk for r in runs} >= set(ids)


def test_the_executor_falls_back_to_skip_locked_while_the_broker_is_unreachable(nats_claims):
    claims = {**nats_claims, "NATS_URL": "nats://127.0.0.1:1", "TIMEOUT": 0.5}
    with override_settings(PGSCHED={"CLAIMS": claims}):
        broker = NatsBroker(get_settings().claims).start()
        try:
            consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
            run = enqueue("tests.noop")
            assert Publisher(broker, get_settings()).run_once().published == 0
            assert outbox_lag(connection)[1] == 1  # waiting for the broker
            result = Executor(concurrency=1, inline=True, broker=consumer).run_once()
            run.refresh_from_db()
            assert result.claimed == 1 and run.status == "succeeded"
            assert consumer.stats.path == POSTGRES and consumer.stats.fallbacks == 1
        finally:
            broker.close()


def test_the_sweep_claims_a_run_whose_message_was_lost(nats_claims, broker):
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    run = enqueue("tests.noop")  # never published
    consumer._next_sweep = 0  # the sweep is due
    result = Executor(concurrency=1, inline=True, broker=consumer).run_once()
    run.refresh_from_db()
    assert result.claimed == 1 and run.status == "succeeded" and consumer.stats.sweeps == 1


def test_a_sweep_that_finds_runs_waiting_longer_than_its_interval_sweeps_again_soon(
    nats_claims, broker
):
    """Messages a restarted cluster lost leave runs waiting: sweeps repeat while they find some."""
    consumer = BrokerClaims(broker, get_settings().claims, time.monotonic)
    fresh = enqueue("tests.noop")  # due now, never published: a sweep's ordinary find
    consumer._next_sweep = 0
    Executor(concurrency=1, inline=True, broker=consumer).run_once()
    fresh.refresh_from_db()
    assert fresh.status == "succeeded" and consumer.stats.stale_swept == 0
    assert consumer._next_sweep > time.monotonic() + 3000  # SWEEP_INTERVAL (1 h here) on

    waiting = [enqueue("tests.noop") for _ in range(3)]  # lost messages, due 2 h ago
    JobRun.objects.filter(pk__in=[r.pk for r in waiting]).update(
        fire_after=F("fire_after") - timedelta(hours=2)
    )
    consumer._next_sweep = 0
    Executor(concurrency=1, inline=True, broker=consumer).run_once()
    assert consumer.stats.stale_swept == 1  # one slot, one run
    assert consumer._next_sweep <= time.monotonic() + SWEEP_AGAIN  # not an hour on
    assert consumer.pull(1, 0.0) is not None  # broker path: nothing due again yet
    time.sleep(SWEEP_AGAIN)
    assert consumer.pull(1, 0.0) is None  # the next sweep
    consumer.give_back()


def test_republishing_an_outbox_row_is_deduplicated(nats_claims, broker):
    enqueue("tests.noop")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, run_id, queue, tenant, idempotency_key FROM pgsched_claim_outbox"
        )
        row = cursor.fetchone()
    Publisher(broker, get_settings()).run_once()
    with connection.cursor() as cursor:  # as if the publisher died before its commit
        cursor.execute(
            "INSERT INTO pgsched_claim_outbox (id, run_id, due, queue, tenant, idempotency_key)"
            " OVERRIDING SYSTEM VALUE VALUES (%s, %s, now(), %s, %s, %s)",
            list(row),
        )
    assert Publisher(broker, get_settings()).run_once().published == 1
    assert consumer_state(nats_claims)[0] == 1  # the stream kept one message
    assert broker.duplicates == 1


def test_asyncio_is_not_left_running_in_the_test_thread():
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_the_command_shows_and_switches_the_outbox(db):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("pgsched_claims", "--enable", stdout=out)
    assert "transport: postgres" in out.getvalue() and "outbox triggers: enabled" in out.getvalue()
    out = StringIO()
    call_command("pgsched_claims", "--disable", stdout=out)
    assert "outbox triggers: disabled" in out.getvalue()


def test_messages_fetched_beyond_a_batch_are_handed_out_first_then_given_back(nats_claims, broker):
    # nats-py may hand over more messages than a fetch asked for (late answers to an
    # earlier pull): the broker keeps them for the next fetch, never more than asked,
    # and gives back those still unused after SPARE_TTL
    for _ in range(3):
        enqueue("tests.noop")
    Publisher(broker, get_settings()).run_once()
    got = broker.fetch(3, 2.0)
    assert len(got) == 3
    handles = [m.handle for m in got]
    broker._loop.call_soon_threadsafe(broker._spare.extend, handles)  # as if delivered extra
    assert [m.handle for m in broker.fetch(2, 0.5)] == handles[:2]  # at most the batch
    broker._loop.call_soon_threadsafe(broker._give_back_spares, handles)
    time.sleep(0.3)
    assert broker._spare == []
    again = broker.fetch(3, 2.0)
    assert len(again) == 1 and again[0].redelivered  # the unused one, given back
