"""SSRF: which URLs and addresses a delivery refuses, without the network.

The tables here are the cases the threat model lists; each row says what is
refused and why (the message a user sees names the reason).
"""

from __future__ import annotations

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pgsched.delivery.addresses import address_text, judge, parse_networks
from django_pgsched.delivery.settings import HttpSettings, build_http_settings
from django_pgsched.delivery.urls import Refused, parse_url
from django_pgsched.delivery.vetting import ResolveError, vet

DEFAULT = HttpSettings()

REFUSED_URLS = [
    # schemes
    ("file:///etc/passwd", "scheme must be"),
    ("gopher://example.com/", "scheme must be"),
    ("ftp://example.com/", "scheme must be"),
    ("javascript:alert(1)", "scheme must be"),
    ("dict://example.com:11211/", "scheme must be"),
    ("//example.com/", "scheme must be"),
    # credentials
    ("https://user:pass@example.com/", "credentials"),
    ("https://example.com@127.0.0.1/", "credentials"),
    # loopback, private, reserved literals (canonical)
    ("http://127.0.0.1/", "loopback"),
    ("http://127.8.9.10/", "loopback"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://10.0.0.5/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://100.100.100.200/", "cloud metadata"),
    ("http://168.63.129.16/", "cloud metadata"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "reserved"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://192.0.2.1/", "documentation"),
    # non-canonical IPv4 forms (the C library reads each of them as an address)
    ("http://2130706433/", "non-canonical"),
    ("http://0x7f000001/", "non-canonical"),
    ("http://0x7f.0.0.1/", "non-canonical"),
    ("http://0177.0.0.1/", "non-canonical"),
    ("http://127.1/", "non-canonical"),
    ("http://127.0.1/", "non-canonical"),
    ("http://017700000001/", "non-canonical"),
    # IPv6
    ("http://[::1]/", "loopback"),
    ("http://[::]/", "unspecified"),
    ("http://[::ffff:127.0.0.1]/", "embeds 127.0.0.1: loopback"),
    ("http://[::ffff:7f00:1]/", "embeds 127.0.0.1: loopback"),
    ("http://[::ffff:169.254.169.254]/", "cloud metadata"),
    ("http://[::127.0.0.1]/", "IPv4-compatible"),
    ("http://[64:ff9b::a9fe:a9fe]/", "cloud metadata"),
    ("http://[64:ff9b::10.0.0.1]/", "embeds 10.0.0.1: private"),
    ("http://[2002:7f00:1::]/", "embeds 127.0.0.1: loopback"),
    ("http://[2001:0::1]/", "IETF protocol assignments"),
    ("http://[fe80::1]/", "link-local"),
    ("http://[fe80::1%25eth0]/", "zone IDs"),
    ("http://[fc00::1]/", "unique-local"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[2001:db8::1]/", "documentation"),
    # internal names
    ("http://localhost/", "not allowed"),
    ("http://LOCALHOST/", "not allowed"),
    ("http://localhost./", "not allowed"),
    ("http://api.localhost/", "not allowed"),
    ("http://metadata.google.internal/", "not allowed"),
    ("http://printer.local/", "not allowed"),
    ("http://nas.home.arpa/", "not allowed"),
    # ports
    ("http://example.com:22/", "port 22 is not allowed"),
    ("http://example.com:5432/", "port 5432 is not allowed"),
    ("http://example.com:6379/", "port 6379 is not allowed"),
    ("http://example.com:0/", "out of range"),
    ("http://example.com:99999/", "url:"),
    # shape
    ("http://exa mple.com/", "control characters"),
    ("http://example.com/\r\nHost: evil", "control characters"),
    ("http://example.com\\@127.0.0.1/", "backslashes"),
    ("http://example.com/#frag", "fragments"),
    ("http://" + "a" * 2050 + ".com/", "too long"),
    ("http:///path", "host is required"),
    ("http://-bad-.com/", "not a valid host name"),
    ("http://exa_mple.com/", "not a valid host name"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED_URLS)
def test_refused_urls(url, why):
    with pytest.raises(Refused) as info:
        parse_url(url, DEFAULT)
    assert why in str(info.value)


@pytest.mark.parametrize(
    ("url", "host", "port", "header"),
    [
        ("https://Example.COM/hook?a=1", "example.com", 443, "example.com"),
        ("http://example.com./x", "example.com", 80, "example.com"),
        ("https://hooks.example.com:8443/", "hooks.example.com", 8443, "hooks.example.com:8443"),
        ("https://bücher.example/", "xn--bcher-kva.example", 443, "xn--bcher-kva.example"),
        ("http://93.184.216.34/", "93.184.216.34", 80, "93.184.216.34"),
        ("https://[2606:4700::1111]/", "2606:4700::1111", 443, "[2606:4700::1111]"),
        ("https://[::ffff:8.8.8.8]/", "::ffff:8.8.8.8", 443, "[::ffff:8.8.8.8]"),
    ],
)
def test_accepted_urls(url, host, port, header):
    target = parse_url(url, DEFAULT)
    assert (target.host, target.port, target.host_header) == (host, port, header)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("::ffff:808:808", "::ffff:8.8.8.8"),
        ("0:0:0:0:0:ffff:0808:0808", "::ffff:8.8.8.8"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
        ("64:ff9b::808:808", "64:ff9b::808:808"),
        ("2606:4700:0::1111", "2606:4700::1111"),
        ("8.8.8.8", "8.8.8.8"),
    ],
)
def test_an_address_is_written_the_same_on_every_python(text, canonical):
    # Python 3.13 writes an IPv4-mapped address in mixed notation, 3.11 and 3.12 in hex;
    # the text goes into the Host header, messages and the evidence.
    assert address_text(ipaddress.ip_address(text)) == canonical


def test_a_mapped_answer_is_named_by_its_ipv4_form(monkeypatch):
    from django_pgsched.delivery import vetting

    target = parse_url("https://hooks.example.com/", DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver(["::ffff:a00:1"]))
    with pytest.raises(Refused) as info:
        vet(target, DEFAULT)
    assert "resolves to ::ffff:10.0.0.1 (embeds 10.0.0.1: private)" in str(info.value)
    mapped = parse_url("https://[::ffff:808:808]:8443/", DEFAULT)
    assert mapped.host_header == "[::ffff:8.8.8.8]:8443"


def test_the_path_is_kept_and_made_ascii():
    target = parse_url("https://example.com/ä%20b?q=ü", DEFAULT)
    assert target.path == "/%C3%A4%20b?q=%C3%BC"
    assert parse_url("https://example.com", DEFAULT).path == "/"


def test_allow_networks_lets_a_private_network_through_but_never_metadata():
    settings = build_http_settings(
        {"ALLOW_NETWORKS": ["127.0.0.1/32", "169.254.0.0/16", "0.0.0.0/0"], "ALLOW_PORTS": None}
    )
    assert parse_url("http://127.0.0.1:5000/", settings).literal is not None
    assert parse_url("http://[::ffff:127.0.0.1]:5000/", settings).literal is not None
    with pytest.raises(Refused, match="cloud metadata"):
        parse_url("http://169.254.169.254/", settings)
    with pytest.raises(Refused, match="loopback"):
        parse_url("http://127.0.0.2/", build_http_settings({"ALLOW_NETWORKS": ["127.0.0.1/32"]}))


def test_https_only_and_ports_are_settings():
    settings = build_http_settings({"SCHEMES": ["https"], "ALLOW_PORTS": [443]})
    with pytest.raises(Refused, match="scheme must be https"):
        parse_url("http://example.com/", settings)
    with pytest.raises(Refused, match="port 8443 is not allowed"):
        parse_url("https://example.com:8443/", settings)


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("8.8.8.8", True),
        ("1.1.1.1", True),
        ("2606:4700:4700::1111", True),
        ("::ffff:8.8.8.8", True),
        ("64:ff9b::808:808", True),
        ("127.0.0.1", False),
        ("10.255.255.255", False),
        ("172.31.255.255", False),
        ("172.32.0.1", True),
        ("100.63.255.255", True),
        ("100.64.0.0", False),
        ("100.127.255.255", False),
        ("192.0.0.192", False),
        ("::", False),
        ("::1", False),
        ("fe80::1", False),
        ("fec0::1", False),
        ("fd12:3456::1", False),
        ("ff00::1", False),
        ("2001:db8::1", False),
        ("3fff::1", False),
        ("100::1", False),
        ("4000::1", False),  # outside global unicast 2000::/3
        ("::ffff:10.0.0.1", False),
        ("2002:a00:1::", False),  # 6to4 of 10.0.0.1
        ("64:ff9b:1::1", False),
    ],
)
def test_the_address_table(address, allowed):
    assert judge(ipaddress.ip_address(address)).allowed is allowed


def test_settings_are_checked_with_readable_errors():
    with pytest.raises(ImproperlyConfigured, match="unknown key"):
        build_http_settings({"ALLOW_NETWORK": []})
    with pytest.raises(ImproperlyConfigured, match="not a network in CIDR form"):
        build_http_settings({"ALLOW_NETWORKS": ["10.0.0.1/8"]})
    with pytest.raises(ImproperlyConfigured, match="SIGNING_SECRETS"):
        build_http_settings({"SIGNING_SECRETS": {"a": "nope"}})
    with pytest.raises(ImproperlyConfigured, match="24 to 64 bytes"):
        build_http_settings({"SIGNING_SECRETS": {"a": "whsec_c2hvcnQ="}})
    with pytest.raises(ImproperlyConfigured) as info:
        build_http_settings({"SIGNING_SECRETS": {"a": "whsec_!!!!notbase64"}})
    assert "notbase64" not in str(info.value)  # a secret is never echoed
    with pytest.raises(ImproperlyConfigured, match="only 'http' and 'https'"):
        build_http_settings({"SCHEMES": ["ftp"]})
    with pytest.raises(ImproperlyConfigured, match="ALLOW_PORTS"):
        build_http_settings({"ALLOW_PORTS": [0]})
    assert parse_networks(["fd00::/8"])[0].version == 6


def _resolver(answers):
    def resolve(host, port):
        return answers

    return resolve


def test_vetting_refuses_a_name_when_any_answer_is_refused(monkeypatch):
    from django_pgsched.delivery import vetting

    target = parse_url("https://hooks.example.com/", DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver(["8.8.8.8", "10.0.0.1"]))
    with pytest.raises(Refused, match=r"resolves to 10\.0\.0\.1 \(private\)"):
        vet(target, DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver(["::ffff:169.254.169.254"]))
    with pytest.raises(Refused, match="cloud metadata"):
        vet(target, DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver(["fe80::1%eth0"]))
    with pytest.raises(Refused, match="scoped"):
        vet(target, DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver([]))
    with pytest.raises(ResolveError, match="no address"):
        vet(target, DEFAULT)
    monkeypatch.setattr(vetting, "resolver_for", lambda s: _resolver(["8.8.8.8", "8.8.4.4"]))
    vetted = vet(target, DEFAULT)
    assert [str(a) for a in vetted.addresses] == ["8.8.8.8", "8.8.4.4"]


def test_a_lookup_that_hangs_fails_in_time(monkeypatch):
    import threading

    from django_pgsched.delivery import vetting

    gate = threading.Event()

    def hang(host, port):
        gate.wait(10)
        return ["8.8.8.8"]

    monkeypatch.setattr(vetting, "resolver_for", lambda s: hang)
    try:
        with pytest.raises(ResolveError, match="took longer"):
            vet(parse_url("https://slow.example.com/", DEFAULT), DEFAULT, timeout=0.05)
    finally:
        gate.set()


def test_a_failed_lookup_is_an_error_never_a_pass(monkeypatch):
    import socket

    from django_pgsched.delivery import vetting

    def fail(host, port):
        raise socket.gaierror(socket.EAI_AGAIN, "temporary failure")

    monkeypatch.setattr(vetting, "resolver_for", lambda s: fail)
    with pytest.raises(ResolveError, match="could not resolve"):
        vet(parse_url("https://x.example.com/", DEFAULT), DEFAULT)
