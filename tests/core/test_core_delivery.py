"""Response delivery against real local servers: retries, fallbacks, timeouts, TLS, allowlist."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from crhelper import Provider, Result
from crhelper.config import DeliverySettings, Settings
from crhelper.outbound import backoff_delay, deliver, host_allowed, ordered_urls
from crhelper.testing import ResponseServer, make_event


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.01")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.05")


def plain_provider() -> Provider:
    provider = Provider()
    provider.create("Custom::P")(lambda props, request: Result(physical_id="p-1", data={"ok": True}))
    return provider


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/ros/public/x?Signature=s"


def test_500_then_200_is_retried_until_delivered(response_server, fast_retries):
    event = response_server.attach(make_event("Create", "Custom::P"), fail_first=2, fail_status=500)
    body = plain_provider().handle(event)
    assert response_server.wait_for(event["RequestId"]) == body
    assert response_server.attempts_for(event["ResponseURL"]) == 3


def test_429_is_retried(response_server, fast_retries):
    event = response_server.attach(make_event("Create", "Custom::P"), fail_first=1, fail_status=429)
    plain_provider().handle(event)
    assert response_server.attempts_for(event["ResponseURL"]) == 2


def test_404_is_not_retried(response_server, fast_retries, capsys):
    event = response_server.attach(make_event("Create", "Custom::P"), fail_first=10, fail_status=404)
    plain_provider().handle(event)
    assert response_server.attempts_for(event["ResponseURL"]) == 1
    assert "response rejected" in capsys.readouterr().err


def test_retries_are_bounded(response_server, fast_retries, monkeypatch):
    monkeypatch.setenv("CRHELPER_RESPONSE_ATTEMPTS", "4")
    event = response_server.attach(make_event("Create", "Custom::P"), fail_first=100, fail_status=503)
    plain_provider().handle(event)
    assert response_server.attempts_for(event["ResponseURL"]) == 4


def test_connection_refused_falls_back_to_the_other_url(response_server, fast_retries):
    event = response_server.attach(make_event("Create", "Custom::P"))
    event["ResponseURL"] = closed_port_url()  # public is down, intranet works
    plain_provider().handle(event)
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    assert [c.kind for c in response_server.captures] == ["intranet"]


def test_intranet_mode_goes_to_the_intranet_url_first(response_server, monkeypatch):
    monkeypatch.setenv("CRHELPER_RESPONSE_URL", "intranet")
    event = response_server.attach(make_event("Create", "Custom::P"))
    plain_provider().handle(event)
    assert [c.kind for c in response_server.captures] == ["intranet"]


def test_unreachable_everywhere_logs_a_clear_error(fast_retries, capsys):
    event = make_event("Create", "Custom::P", response_url=closed_port_url(), intranet_response_url=closed_port_url())
    plain_provider().handle(event)
    err = capsys.readouterr().err
    assert "response not delivered" in err and "cannot connect" in err
    assert "Signature=s" not in err


def test_slow_server_hits_the_read_timeout_then_succeeds(response_server, monkeypatch, fast_retries):
    monkeypatch.setenv("CRHELPER_READ_TIMEOUT", "0.3")
    slow = ResponseServer().start()
    try:
        event = slow.attach(make_event("Create", "Custom::P"), delay=1.0)
        event["IntranetResponseURL"] = event["ResponseURL"]
        started = time.monotonic()
        monkeypatch.setenv("CRHELPER_RESPONSE_ATTEMPTS", "2")
        plain_provider().handle(event)
        assert time.monotonic() - started < 3.0
        assert slow.attempts_for(event["ResponseURL"]) == 2
    finally:
        slow.stop()


def test_put_is_selectable(response_server, monkeypatch):
    monkeypatch.setenv("CRHELPER_RESPONSE_METHOD", "PUT")
    event = response_server.attach(make_event("Create", "Custom::P"))
    plain_provider().handle(event)
    assert [c.method for c in response_server.captures] == ["PUT"]


def test_headers_are_the_ones_ros_requires(response_server):
    event = response_server.attach(make_event("Create", "Custom::P"))
    plain_provider().handle(event)
    headers = response_server.captures[0].headers
    assert headers["Content-Type"] == "application/json"
    assert headers["Date"].endswith("GMT")
    assert response_server.captures[0].method == "POST"


def test_allowlist_refuses_other_hosts(response_server, monkeypatch, capsys):
    monkeypatch.setenv("CRHELPER_RESPONSE_HOSTS", "*.aliyuncs.com")
    event = response_server.attach(make_event("Create", "Custom::P"))
    plain_provider().handle(event)
    assert response_server.captures == []
    assert "not in CRHELPER_RESPONSE_HOSTS allowlist" in capsys.readouterr().err
    monkeypatch.setenv("CRHELPER_RESPONSE_HOSTS", "*.aliyuncs.com,127.0.0.1")
    event = response_server.attach(make_event("Create", "Custom::P"))
    plain_provider().handle(event)
    assert len(response_server.captures) == 1


@pytest.fixture(scope="module")
def tls():
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_context)
    return ca, server_context


def test_https_verifies_by_default_and_accepts_a_ca_bundle(tls, tmp_path, monkeypatch, capsys):
    ca, server_context = tls
    with ResponseServer(ssl_context=server_context) as server:
        event = server.attach(make_event("Create", "Custom::P"))
        plain_provider().handle(event)
        assert server.captures == []  # self-signed: refused, not retried forever
        assert "CRHELPER_CA_BUNDLE" in capsys.readouterr().err
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        monkeypatch.setenv("CRHELPER_CA_BUNDLE", str(bundle))
        event = server.attach(make_event("Create", "Custom::P"))
        plain_provider().handle(event)
        assert server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
        assert server.violations == []


@pytest.mark.allow_violations
def test_deadline_bounds_the_retries(response_server):
    settings = DeliverySettings(max_attempts=100, backoff_base=0.2, backoff_cap=0.4)
    url = response_server.new_url(fail_first=1000)
    started = time.monotonic()
    report = deliver(b"{}", url, None, settings, deadline=time.monotonic() + 1.0)
    assert not report.delivered and time.monotonic() - started < 1.5
    assert "HTTP 500" in (report.error or "")


def test_pure_helpers():
    assert ordered_urls("p", "i", "auto", on_function_compute=False) == [("public", "p"), ("intranet", "i")]
    assert ordered_urls("p", "i", "auto", on_function_compute=True) == [("intranet", "i"), ("public", "p")]
    assert ordered_urls(None, "i", "public", on_function_compute=False) == [("intranet", "i")]
    assert host_allowed("https://ros.cn-hangzhou.aliyuncs.com/x?y", ("*.aliyuncs.com",))
    assert not host_allowed("https://evil.example/x", ("*.aliyuncs.com",))
    settings = DeliverySettings(backoff_base=0.5, backoff_cap=8.0)
    assert backoff_delay(1, settings, rand=lambda a, b: b) == 0.5
    assert backoff_delay(4, settings, rand=lambda a, b: b) == 4.0
    assert backoff_delay(10, settings, rand=lambda a, b: b) == 8.0
    assert Settings.from_env({"FC_FUNCTION_NAME": "f"}).on_function_compute


@pytest.mark.allow_violations
def test_response_server_flags_a_second_different_response(response_server):
    event = response_server.attach(make_event("Create", "Custom::P"))
    settings = DeliverySettings()
    first = {"Status": "SUCCESS", "PhysicalResourceId": "a", "StackId": event["StackId"],
             "RequestId": event["RequestId"], "LogicalResourceId": "Res", "Data": {}}
    import json as _json

    assert deliver(_json.dumps(first).encode(), event["ResponseURL"], None, settings).delivered
    assert deliver(_json.dumps(first, sort_keys=True).encode(), event["ResponseURL"], None, settings).delivered
    assert response_server.violations == []  # the same answer again (a re-send) is fine
    assert deliver(_json.dumps({**first, "PhysicalResourceId": "b"}).encode(), event["ResponseURL"], None, settings).delivered
    assert response_server.violations == [
        f"RequestId {event['RequestId']}: a second, different response was sent for the same request"
    ]


def test_https_with_a_hashed_ca_directory(tls, tmp_path, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command computes the subject hash of the directory entry")
    ca, server_context = tls
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    subject_hash = subprocess.run(["openssl", "x509", "-subject_hash", "-noout", "-in", str(pem)],
                                  capture_output=True, text=True, check=True).stdout.strip()
    directory = tmp_path / "cas"
    directory.mkdir()
    (directory / f"{subject_hash}.0").write_bytes(pem.read_bytes())
    monkeypatch.setenv("CRHELPER_CA_BUNDLE", str(directory))
    with ResponseServer(ssl_context=server_context) as server:
        event = server.attach(make_event("Create", "Custom::P"))
        plain_provider().handle(event)
        assert server.wait_for(event["RequestId"])["Status"] == "SUCCESS"


def test_backoff_jitter_spans_exactly_zero_to_the_capped_exponential():
    settings = DeliverySettings(backoff_base=0.5, backoff_cap=8.0)
    seen: list[tuple[float, float]] = []

    def lowest(a: float, b: float) -> float:
        seen.append((a, b))
        return a

    for attempt in (1, 2, 5, 6, 30):
        assert backoff_delay(attempt, settings, rand=lowest) == 0.0
        assert backoff_delay(attempt, settings, rand=lambda a, b: b) == min(8.0, 0.5 * 2 ** (attempt - 1))
    assert seen == [(0.0, 0.5), (0.0, 1.0), (0.0, 8.0), (0.0, 8.0), (0.0, 8.0)]
    assert backoff_delay(5, DeliverySettings(backoff_base=0.5, backoff_cap=7.9), rand=lambda a, b: b) == 7.9
