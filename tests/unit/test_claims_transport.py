"""PGSCHED["CLAIMS"]: the setting, subjects and payloads, the claim-by-id statement."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgsched.broker.consumer import claim_by_id_sql
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


def test_claim_by_id_keeps_every_predicate_but_the_cursor():
    original = queries.get("executor_pass")
    by_id = claim_by_id_sql(original)
    assert "unnest(%(claim_ids)b::bigint[])" in by_id and "floor_rank" not in by_id
    claimable = by_id.split("claimable AS MATERIALIZED")[1].split("claimed AS")[0]
    for predicate in (
        "r.status IN ('pending', 'retrying')",
        "r.fire_after <=",
        "r.attempts < r.max_attempts",
        "r.job = ANY",
        "SKIP LOCKED",
    ):
        assert predicate in claimable
    with pytest.raises(RuntimeError, match="claim cursor"):
        claim_by_id_sql(original.replace("floor_rank", "cursor_rank"))
