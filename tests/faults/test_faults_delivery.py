"""Delivery against hostile ResponseURLs, over real sockets: peers that trickle, never read, or
URLs that cannot work. A delivery must end within its budget and never raise."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from crhelper import Provider, Result
from crhelper.config import DeliverySettings
from crhelper.logs import configure, redact_url
from crhelper.outbound import attempt_budget, deliver, delivery_budget
from crhelper.testing import ResponseServer, make_event
from tcp_peers import TcpPeer

SLACK = 0.6  # thread scheduling on a busy 2-core machine

REPLY = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class HostilePeer(TcpPeer):
    """A real TCP server on 127.0.0.1 that misbehaves in one way, on every connection.

    trickle: reads the request, then writes a valid 200 reply one byte per `interval`.
    slow_read: reads the request one byte per `interval` and never answers.
    never_read: accepts and then does nothing at all.
    """

    def __init__(self, mode: str, interval: float = 1.0) -> None:
        self.mode, self.interval = mode, interval
        super().__init__()

    def __enter__(self) -> "HostilePeer":
        super().__enter__()
        return self

    def serve(self, conn: socket.socket, number: int) -> None:
        conn.settimeout(0.2)
        try:
            if self.mode == "trickle":
                self._read_request(conn)
                for byte in REPLY:
                    if self._stop.wait(self.interval):
                        return
                    conn.sendall(bytes([byte]))
            elif self.mode == "slow_read":
                while not self._stop.wait(self.interval):
                    try:
                        if not conn.recv(1):
                            return
                    except socket.timeout:
                        continue
            else:
                self._stop.wait()
        except OSError:
            pass  # the client gave up and shut the connection: that is the point
        finally:
            conn.close()

    def _read_request(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data and not self._stop.is_set():
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                return
            data += chunk


@pytest.fixture
def quick() -> DeliverySettings:
    """Socket timeouts (2 s) longer than the trickle interval, so they alone would never fire."""
    return DeliverySettings(connect_timeout=0.5, read_timeout=2.0, max_attempts=1, backoff_base=0.01, backoff_cap=0.02)


@pytest.fixture
def trickler() -> Iterator[HostilePeer]:
    with HostilePeer("trickle", interval=0.5) as peer:
        yield peer


@pytest.mark.slow
def test_a_trickling_reply_cannot_stretch_an_attempt(trickler, quick):
    started = time.monotonic()
    report = deliver(b"{}", trickler.url, None, quick)
    elapsed = time.monotonic() - started
    assert not report.delivered and not report.final
    assert elapsed < attempt_budget(quick) + SLACK, elapsed
    assert "budget of 2.5 s" in (report.error or "") and "too slow" in (report.error or "")
    assert "SECRET" not in (report.error or "")


@pytest.mark.slow
def test_a_trickling_reply_cannot_stretch_the_whole_delivery(trickler, quick):
    settings = DeliverySettings(connect_timeout=0.2, read_timeout=1.0, max_attempts=3, backoff_base=0.01, backoff_cap=0.02)
    started = time.monotonic()
    report = deliver(b"{}", trickler.url, None, settings)
    assert not report.delivered and report.attempts == 3
    assert time.monotonic() - started < delivery_budget(settings) + SLACK
    assert trickler.connections == 3


@pytest.mark.slow
def test_a_deadline_two_seconds_away_is_kept_against_a_trickling_peer(trickler):
    settings = DeliverySettings(connect_timeout=5.0, read_timeout=15.0, max_attempts=6)
    deadline = time.monotonic() + 2.0
    report = deliver(b"{}", trickler.url, None, settings, deadline=deadline)
    assert time.monotonic() < deadline
    assert not report.delivered and report.attempts == 1
    assert "too slow" in (report.error or "")


def test_delivery_without_a_deadline_has_a_default_total_budget():
    settings = DeliverySettings(connect_timeout=0.5, read_timeout=2.0, max_attempts=4, backoff_cap=1.0)
    assert attempt_budget(settings) == 2.5
    assert delivery_budget(settings) == 4 * 2.5 + 3 * 1.0


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["slow_read", "never_read"])
def test_a_peer_that_reads_slowly_or_never_is_bounded(mode, quick):
    with HostilePeer(mode, interval=0.5) as peer:
        started = time.monotonic()
        report = deliver(b"{}", peer.url, None, quick)
        assert time.monotonic() - started < attempt_budget(quick) + SLACK
        assert not report.delivered


@pytest.mark.slow
def test_sending_a_body_larger_than_the_socket_buffers_is_bounded_too(quick):
    # Far beyond loopback buffers, so sendall itself blocks on a peer that never reads.
    with HostilePeer("never_read") as peer:
        started = time.monotonic()
        report = deliver(b"x" * (64 << 20), peer.url, None, quick)
        assert time.monotonic() - started < attempt_budget(quick) + SLACK
        assert not report.delivered


ABSURD_URLS = [
    ("http://127.0.0.1:99999/x?Signature=SECRET", "invalid port (Port out of range 0-65535)"),
    ("http://h:abc/x?Signature=SECRET", "invalid port (Port could not be cast to integer value as 'abc')"),
    ("http://h:0/x?Signature=SECRET", "invalid port (0)"),
    ("http://xn--a.example/x?Signature=SECRET", "host label 'xn--a' is not valid punycode"),
    ("http://" + "a" * 64 + ".example/x?Signature=SECRET", "not a valid internationalised domain name"),
    ("http://\u00ad.example/x?Signature=SECRET", "not a valid internationalised domain name"),
    ("http://a..b/x?Signature=SECRET", "not a valid internationalised domain name"),
    ("http://[::1/x?Signature=SECRET", "cannot be parsed (Invalid IPv6 URL)"),
    ("http://h/x y?Signature=SECRET", "contains a space at position 10"),
    ("http://h/x?Signature=SECRET\r\nX-Injected: 1", "contains a CR at position 27"),
    ("http://h/x\n?Signature=SECRET", "contains an LF at position 10"),
    ("http://h/\udc80?Signature=SECRET", "contains a lone surrogate U+DC80"),
    ("ftp://h/x?Signature=SECRET", "must be http(s) with a host"),
    ("http:///x?Signature=SECRET", "must be http(s) with a host"),
    ("not a url at all", "contains a space"),
]


@pytest.mark.parametrize("url, expected", ABSURD_URLS)
def test_an_absurd_url_is_a_final_precise_failure_of_that_url(url, expected, capsys):
    configure()
    started = time.monotonic()
    report = deliver(b"{}", url, None, DeliverySettings(connect_timeout=0.5, read_timeout=0.5))
    assert time.monotonic() - started < 0.5  # decided locally: no DNS, no retries
    assert not report.delivered and report.final and report.attempts == 0
    assert expected in (report.error or "")
    logged = capsys.readouterr().err
    assert "response refused" in logged
    for text in (report.error or "", logged):
        assert "SECRET" not in text and "Signature" not in text


@pytest.mark.parametrize("url, expected", ABSURD_URLS)
def test_the_other_url_is_still_tried_after_an_absurd_one(url, expected, response_server):
    event = response_server.attach(make_event("Create", "Custom::P"))
    good = event["ResponseURL"]
    body = json.dumps({"Status": "SUCCESS", "PhysicalResourceId": "p", "StackId": event["StackId"],
                       "RequestId": event["RequestId"], "LogicalResourceId": "Res", "Data": {}}).encode()
    report = deliver(body, url, good, DeliverySettings(url_mode="public"))
    assert report.delivered and report.url_kind == "intranet" and report.attempts == 1
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"


def test_an_absurd_public_url_falls_back_end_to_end(response_server):
    provider = Provider()
    provider.create("Custom::P")(lambda props, request: Result(physical_id="p-1"))
    event = response_server.attach(make_event("Create", "Custom::P"))
    event["ResponseURL"] = "http://ros.example:99999/ros/public/x?Signature=SECRET"
    provider.handle(event)
    assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    assert [c.kind for c in response_server.captures] == ["intranet"]


def test_both_urls_absurd_reports_both_and_is_final():
    report = deliver(b"{}", "http://h:abc/?Signature=A", "http://h:99999/?Signature=B", DeliverySettings())
    assert not report.delivered and report.final
    assert "abc" in (report.error or "") and "99999" in (report.error or "")
    assert "Signature" not in (report.error or "")


def test_allowlist_refusal_is_final_and_spares_an_allowed_url(response_server):
    event = response_server.attach(make_event("Create", "Custom::P"))
    body = json.dumps({"Status": "SUCCESS", "PhysicalResourceId": "p", "StackId": event["StackId"],
                       "RequestId": event["RequestId"], "LogicalResourceId": "Res", "Data": {}}).encode()
    settings = DeliverySettings(allowed_hosts=("127.0.0.1",), url_mode="public")
    report = deliver(body, "http://evil.example/x?Signature=S", event["ResponseURL"], settings)
    assert report.delivered and report.url_kind == "intranet"
    refused = deliver(body, "http://evil.example/x?Signature=S", None, settings)
    assert not refused.delivered and refused.final and "allowlist" in (refused.error or "")


@pytest.mark.allow_violations
def test_no_url_and_4xx_are_final_5xx_exhaustion_is_not(response_server):
    assert deliver(b"{}", None, None, DeliverySettings()).final
    rejected = deliver(b"{}", response_server.new_url(fail_first=5, fail_status=404), None, DeliverySettings())
    assert not rejected.delivered and rejected.final
    exhausted = deliver(b"{}", response_server.new_url(fail_first=5, fail_status=503), None,
                        DeliverySettings(max_attempts=2, backoff_base=0.01, backoff_cap=0.02))
    assert not exhausted.delivered and not exhausted.final


def test_a_non_ascii_path_is_sent_percent_encoded():
    seen: list[str] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            seen.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/ros/é汉?Signature=a%2Fb"
        report = deliver(b"{}", url, None, DeliverySettings(max_attempts=1))
    finally:
        server.shutdown()
        server.server_close()
    assert report.delivered
    assert seen == ["/ros/%C3%A9%E6%B1%89?Signature=a%2Fb"]


@pytest.mark.parametrize("url", [
    "", " ", "\x00", "http://", "http://:80/", "http://[", "http://[::1]:99999/", "https://h:-1/", "http://h:+1/",
    "\udcff", "http://ü.example:1x/", "http://" + "é" * 300 + "/", "//h/x", "http://h/%zz?%", "http://u:p@:1/",
])
def test_deliver_and_redact_url_never_raise(url):
    report = deliver(b"{}", url or None, None, DeliverySettings(connect_timeout=0.2, read_timeout=0.2, max_attempts=1))
    assert not report.delivered
    assert isinstance(redact_url(url), str)


def test_a_real_server_still_gets_the_response(response_server):
    with ResponseServer() as other:
        event = other.attach(make_event("Create", "Custom::P"))
        body = json.dumps({"Status": "SUCCESS", "PhysicalResourceId": "p", "StackId": event["StackId"],
                           "RequestId": event["RequestId"], "LogicalResourceId": "Res", "Data": {}}).encode()
        report = deliver(body, event["ResponseURL"], None, DeliverySettings())
        assert report.delivered and report.status == 200 and not report.final
