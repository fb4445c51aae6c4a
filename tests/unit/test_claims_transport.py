"""PGSCHED["CLAIMS"]: the setting, subjects and payloads, the claim-by-id statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgsched.broker.messages import Malformed, parse, payload, subject, token
from django_pgsched.broker.settings import build_claims_settings
from django_pgsched.conf import build_settings
from django_pgsched.engine import queries


def test_the_default_transport_is_postgres():
    assert build_settings({}).claims.TRANSPORT == "postgres"
    assert not build_settings({}).claims.nats


def test_nats_with_its_options():
    claims = build_claims_settings(
        {"TRANSPORT": "nats", "NATS_URL": "nats://10.0.0.1:4222", "FETCH_WAIT": 0.25}
    )
    assert claims.nats and claims.NATS_URL == ("nats://10.0.0.1:4222",)
    assert claims.FETCH_WAIT == timedelta(seconds=0.25)
    assert build_claims_settings("nats").nats  # a bare transport name


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"TRANSPORT": "kafka"}, "TRANSPORT"),
        ({"TRANSPORT": "nats", "NATS_URL": "http://x"}, "NATS_URL"),
        ({"TRANSPORT": "nats", "NATS_URL": []}, "NATS_URL"),
        ({"STREAM": "a.b"}, "STREAM"),
        ({"SUBJECT_PREFIX": "runs.>"}, "SUBJECT_PREFIX"),
        ({"STREAM_REPLICAS": 0}, "STREAM_REPLICAS"),
        ({"STREAM_REPLICAS": 7}, "STREAM_REPLICAS"),
        ({"ACK_WAIT": -1}, "ACK_WAIT"),
        ({"NATS": 1}, "NATS"),
    ],
)
def test_bad_values_name_the_key(raw, named):
    with pytest.raises(ImproperlyConfigured, match=named):
        build_settings({"CLAIMS": raw})


def test_subject_tokens_are_safe_and_distinct():
    assert token("") == "_"
    assert token("default") == "default"
    assert "." not in token("a.b") and " " not in token("a b") and ">" not in token(">")
    assert token("a.b") != token("a_b") != token("a%2Eb")
    assert subject("pgsched.runs", "emails", "") == "pgsched.runs.emails._"


def test_payloads():
    assert parse(payload(42)).run_id == 42
    for bad in (b"", b"[]", b'{"run": "1"}', b'{"run": true}', b'{"run": -1}', b"\xff"):
        with pytest.raises(Malformed):
            parse(bad)


def _code(sql: str) -> list[str]:
    """The statement's lines without comments and blank lines."""
    lines = (line.split("--", 1)[0].rstrip() for line in sql.splitlines())
    return [line for line in lines if line.strip()]


def test_the_claim_by_id_is_executor_pass_but_in_its_six_written_places():
    """executor_pass_by_id is written out (engine/queries.sql); this keeps it in step,
    and its overlap and deadline rules in step with executor_guarded_pick's."""
    original = _code(queries.get("executor_pass"))
    by_id = _code(queries.get("executor_pass_by_id"))
    pick = _code(queries.get("executor_guarded_pick"))
    start = pick.index(
        "   AND (r.start_by IS NULL OR r.start_by >= (SELECT now FROM clock)"
        " OR r.status = 'retrying')"
    )
    end = pick.index(" ORDER BY r.priority * -1, r.fire_after, r.id")
    rules = ["    " + line for line in pick[start:end]]  # the pick's rules, as by_id indents
    assert any("NOT EXISTS" in line for line in rules)
    cursor = [
        "       AND (r.priority * -1, r.fire_after, r.id)",
        "           >= (coalesce(%(floor_rank)s::integer, -32768),",
        "               coalesce(%(floor_at)s::timestamptz, '-infinity'),",
        "               coalesce(%(floor_id)s::bigint, 0))",
        "     ORDER BY r.priority * -1, r.fire_after, r.id",
    ]
    held_tenants = " " * 44 + "AND (t.paused OR t.max_running IS NOT NULL)))"
    unrecorded = " " * 12 + "OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = r.tenant))"
    assert held_tenants in original and unrecorded in original
    expected = []
    for line in original:
        if line in cursor:
            continue
        if line == "      FROM pgsched_job_run r" and not any("claim_ids" in x for x in expected):
            expected += [
                "      FROM unnest(%(claim_ids)b::bigint[]) AS named(id)",
                "      JOIN pgsched_job_run r ON r.id = named.id",
            ]
        elif (
            line == "     WHERE r.status IN ('pending', 'retrying')"
            and expected[-1] == "      JOIN pgsched_job_run r ON r.id = named.id"
        ):  # status as text: no partial index serves the lookup by id
            expected.append("     WHERE r.status::text || '' IN ('pending', 'retrying')")
        elif line == "       AND r.overlap IS NULL AND r.start_by IS NULL":
            expected += rules  # executor_pass leaves these runs to the guarded claim
        elif line == "     WHERE (SELECT count(*) FROM claimable) < %(limit)s":
            expected.append("     WHERE false")
        elif line == unrecorded:  # by id: also when the ids are the held claim's picks
            expected.append(
                " " * 12 + "OR EXISTS (SELECT FROM pgsched_tenant t WHERE t.key = r.tenant)"
                " OR %(held)s::boolean)"
            )
        elif line == held_tenants:  # by id: a held tenant's runs when the ids are its picks
            expected += [
                " " * 44 + "AND (t.paused OR (t.max_running IS NOT NULL",
                " " * 62 + "AND NOT %(held)s::boolean))))",
            ]
        else:
            expected.append(line)
    assert [x for x in original if x in cursor] == cursor  # executor_pass's own cursor
    assert by_id == expected
