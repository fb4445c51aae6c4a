"""The kwargs of pgsched.http, signatures (checked by an independent implementation),
Retry-After and the verdict table."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
import standardwebhooks
from django.core.exceptions import ValidationError

from django_pgsched.delivery.client import Exchange
from django_pgsched.delivery.request import parse_request
from django_pgsched.delivery.settings import build_http_settings
from django_pgsched.delivery.signing import SigningError, signature, webhook_headers
from django_pgsched.delivery.verdicts import judge, retry_after

KEY = bytes(range(32))
SETTINGS = build_http_settings(
    {"SIGNING_SECRETS": {"main": "whsec_" + base64.b64encode(KEY).decode()}}
)


def messages(kwargs, **options):
    with pytest.raises(ValidationError) as info:
        parse_request(kwargs, SETTINGS, **options)
    return " | ".join(info.value.messages)


def test_a_full_request():
    spec = parse_request(
        {
            "url": "https://hooks.example.com/in",
            "method": "put",
            "headers": {"Authorization": "Bearer x", "X-A": "b"},
            "body": {"a": [1, 2], "é": "ü"},
            "timeout": 5,
            "signing_secret": "main",
            "retry_statuses": [409],
        },
        SETTINGS,
    )
    assert spec.method == "PUT" and spec.timeout == 5.0
    assert spec.body == '{"a":[1,2],"é":"ü"}'.encode()
    assert spec.content_type == "application/json"
    assert spec.headers == (("Authorization", "Bearer x"), ("X-A", "b"))
    assert spec.retry_statuses == frozenset({409})


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "url: a URL string is required"),
        ({"url": "https://example.com", "method": "TRACE"}, "method: 'TRACE' is not one of"),
        ({"url": "https://example.com", "verb": "GET"}, "unknown argument(s) 'verb'"),
        ({"url": "https://example.com", "headers": {"Host": "evil"}}, "Host is set by the"),
        ({"url": "https://example.com", "headers": {"webhook-id": "x"}}, "set by the scheduler"),
        ({"url": "https://example.com", "headers": {"Proxy-Foo": "x"}}, "set by the scheduler"),
        ({"url": "https://example.com", "headers": {"X A": "x"}}, "not a valid header name"),
        ({"url": "https://example.com", "headers": {"X-A": "b\r\nHost: e"}}, "invalid character"),
        ({"url": "https://example.com", "headers": {"X-A": 1}}, "must be a string"),
        ({"url": "https://example.com", "headers": ["X"]}, "expected an object"),
        (
            {"url": "https://example.com", "headers": {f"X-{i}": "v" for i in range(40)}},
            "too many",
        ),
        ({"url": "https://example.com", "headers": {"X-A": "v" * 9000}}, "too large"),
        ({"url": "https://example.com", "method": "GET", "body": "x"}, "cannot have a body"),
        ({"url": "https://example.com", "timeout": 0}, "between 0.1 and 3600"),
        ({"url": "https://example.com", "timeout": "5"}, "number of seconds"),
        ({"url": "https://example.com", "signing_secret": "nope"}, "no secret named 'nope'"),
        ({"url": "https://example.com", "retry_statuses": [404]}, "retry_statuses"),
        ({"url": "https://example.com", "body": "x" * 300_000}, "too large"),
    ],
)
def test_bad_kwargs_name_the_field(kwargs, expected):
    assert expected in messages(kwargs)


def test_the_timeout_must_fit_in_the_runs():
    kwargs = {"url": "https://example.com", "timeout": 90}
    text = messages(kwargs, run_timeout=timedelta(seconds=60))
    assert "longer than the run's timeout (60s)" in text


def test_every_problem_is_reported_at_once():
    text = messages({"url": "ftp://x", "method": "BREW", "timeout": -1})
    assert "scheme" in text and "method" in text and "timeout" in text


def test_signatures_verify_with_the_reference_implementation():
    body = b'{"type":"x","data":{"id":1}}'
    headers = dict(webhook_headers("pgsched:7:2026-01-01T00:00:00Z", 1_900_000_000, body, [KEY]))
    assert headers["webhook-id"] == "pgsched:7:2026-01-01T00:00:00Z"
    assert headers["webhook-timestamp"] == "1900000000"
    verifier = standardwebhooks.Webhook(base64.b64encode(KEY).decode())
    expected = verifier.sign(
        "pgsched:7:2026-01-01T00:00:00Z", datetime.fromtimestamp(1_900_000_000, UTC), body.decode()
    )
    assert headers["webhook-signature"] == expected


def test_the_spec_example_signature():
    # the example of the Standard Webhooks README: msg_p5jXN8AQM9LWM0D4loKWxJek, secret
    # whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, timestamp 1614265330, body {"test": 2432232314}
    key = base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    value = signature(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert value == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_a_signed_id_must_not_contain_a_dot():
    with pytest.raises(SigningError, match=r"must not contain '\.'"):
        webhook_headers("order.123", 1, b"", [KEY])
    assert webhook_headers("order.123", 1, b"", [])[0] == ("webhook-id", "order.123")
    with pytest.raises(SigningError, match="printable ASCII"):
        webhook_headers("a b", 1, b"", [])


def test_retry_after_forms():
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after("3", date=None, now=now) == 3
    assert retry_after(" 120 ", date=None, now=now) == 120
    assert retry_after("Thu, 01 Jan 2026 12:00:30 GMT", date=None, now=now) == 30
    # read against the server's own Date header when it sends one
    assert (
        retry_after("Thu, 01 Jan 2026 12:00:30 GMT", date="Thu, 01 Jan 2026 11:59:50 GMT", now=now)
        == 40
    )
    assert retry_after("Thu, 01 Jan 2026 11:00:00 GMT", date=None, now=now) == 0
    assert retry_after("soon", date=None, now=now) is None
    assert retry_after("-5", date=None, now=now) is None
    assert retry_after(None, date=None, now=now) is None
    # digits of other scripts are not a delay ("²".isdigit() is true; int("²") raises)
    assert retry_after("²", date=None, now=now) is None
    assert retry_after("١٢", date=None, now=now) is None
    # 5,000 digits (int() refuses 4,300 or more) read as the cap, as a long delay does
    assert retry_after("9" * 5000, date=None, now=now) == 10**9
    assert retry_after("0" * 5000 + "7", date=None, now=now) == 7


@pytest.mark.parametrize(
    ("status", "headers", "error", "kind", "retry", "breaker"),
    [
        (200, {}, "", "succeeded", False, False),
        (204, {}, "", "succeeded", False, False),
        (429, {"retry-after": "3"}, "", "deferred", False, False),
        (503, {"retry-after": "3"}, "", "deferred", False, False),
        (429, {}, "", "failed", True, False),
        (503, {}, "", "failed", True, True),
        (500, {}, "", "failed", True, True),
        (502, {}, "", "failed", True, True),
        (301, {"location": "/x"}, "", "failed", False, False),
        (404, {}, "", "failed", False, False),
        (410, {}, "", "failed", False, False),
        (408, {}, "", "failed", False, False),
        (None, {}, "connect_timeout", "failed", True, True),
        (None, {}, "reset", "failed", True, True),
        (200, {}, "deadline", "failed", True, True),
    ],
)
def test_the_verdict_table(status, headers, error, kind, retry, breaker):
    spec = parse_request({"url": "https://example.com"}, SETTINGS)
    exchange = Exchange(status=status, headers=list(headers.items()), error=error)
    verdict = judge(exchange, spec, SETTINGS)
    assert (verdict.kind, verdict.retry, verdict.breaker_failure) == (kind, retry, breaker)
