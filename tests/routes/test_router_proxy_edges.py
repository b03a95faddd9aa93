"""Proxy edge cases on the wire: hop-by-hop headers, broken and slow backends, large bodies,
and connections still open when the router stops."""

from __future__ import annotations

import hashlib
import json
import socket
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from handlers.routes.model import Route
from handlers.routes.proxy import Router, RouterThread
from handlers.routes.registry import ServiceRegistry
from handlers.routes.repository import RouteRepository
from handlers.routes.sticky import CookieSealer


class _Tricky(BaseHTTPRequestHandler):
    """``/headers`` echoes request headers; ``/drop`` closes without answering; ``/hang`` waits
    for the test to release it; ``/count`` hashes the request body (Content-Length or chunked)."""

    protocol_version = "HTTP/1.1"

    def _reply(self, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if self.path == "/hang":
            self.server.release.wait(10)  # type: ignore[attr-defined]
            self.close_connection = True
            return
        self._reply({"headers": {k.lower(): v for k, v in self.headers.items()}},
                    {"Connection": "X-Resp-Hop", "X-Resp-Hop": "internal", "X-Resp-Keep": "yes"})

    def do_POST(self) -> None:  # noqa: N802
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body = self._body()
        self._reply({"size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                     "chunked": "chunked" in self.headers.get("Transfer-Encoding", "")})

    def log_message(self, *args: object) -> None:
        pass


class TrickyBackend:
    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Tricky)
        self.httpd.daemon_threads = True
        self.httpd.hits = []  # type: ignore[attr-defined]
        self.httpd.release = threading.Event()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def hits(self) -> list[str]:
        return self.httpd.hits  # type: ignore[attr-defined,no-any-return]

    def stop(self) -> None:
        self.httpd.release.set()  # type: ignore[attr-defined]
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture()
def tricky() -> Iterator[list[TrickyBackend]]:
    servers = [TrickyBackend(), TrickyBackend()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture()
def proxied(home: Path, tricky: list[TrickyBackend]) -> Iterator[tuple[RouterThread, str]]:
    repo = RouteRepository()
    registry = ServiceRegistry()
    for server in tricky:
        registry.register("edge-web", server.addr)
    registry.register("solo-web", tricky[0].addr)
    repo.create_app("edge")
    repo.create_route("edge", Route(type="http", service="edge-web", domain="edge.example.com"))
    repo.create_route("edge", Route(type="http", service="solo-web", domain="solo.example.com"))
    # The response-header timeout starts once the body is written (Flynn): 2 s leaves a loaded machine
    # time to hash a 65 MiB upload, and a hung backend still ends well inside the 5 s the test allows.
    router = Router(repo, registry, CookieSealer(b"k" * 32), poll_interval=0.05, response_timeout=2.0)
    with RouterThread(router) as running:
        yield running, f"http://127.0.0.1:{running.http_port}"


def test_connection_listed_headers_are_hop_by_hop(proxied: tuple[RouterThread, str]) -> None:
    _, base = proxied
    resp = requests.get(base + "/headers", timeout=5, headers={
        "Host": "solo.example.com", "Connection": "keep-alive, X-Hop", "X-Hop": "private", "X-Keep": "1"})
    seen = resp.json()["headers"]
    assert seen["x-keep"] == "1" and "x-hop" not in seen
    assert resp.headers["X-Resp-Keep"] == "yes" and "X-Resp-Hop" not in resp.headers


def test_backend_dropping_the_connection_is_503_not_retried(proxied: tuple[RouterThread, str],
                                                           tricky: list[TrickyBackend]) -> None:
    running, base = proxied
    for _ in range(4):
        resp = requests.post(base + "/drop", data=b"once", headers={"Host": "edge.example.com"}, timeout=5)
        assert (resp.status_code, resp.text) == (503, "Service Unavailable\n")
    assert sum(len(s.hits) for s in tricky) == 4  # a POST is never replayed; only dial errors are retried
    resp = requests.get(base + "/drop", headers={"Host": "edge.example.com"}, timeout=5)
    assert (resp.status_code, resp.text) == (503, "Service Unavailable\n")
    assert all(count == 0 for count in running.router.inflight.values())


@pytest.mark.slow
def test_slow_backend_times_out_with_503(proxied: tuple[RouterThread, str], tricky: list[TrickyBackend]) -> None:
    running, base = proxied
    started = time.monotonic()
    resp = requests.get(base + "/hang", headers={"Host": "edge.example.com"}, timeout=10)
    assert resp.status_code == 503 and time.monotonic() - started < 5
    assert sum(len(s.hits) for s in tricky) == 1
    assert all(count == 0 for count in running.router.inflight.values())


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True])
def test_large_bodies_stream_through(proxied: tuple[RouterThread, str], chunked: bool) -> None:
    _, base = proxied
    size = 65 * 1024 * 1024 + 7  # above the old 64 MiB buffering limit
    block = hashlib.sha256(b"x").digest() * 2048
    payload = (block * (size // len(block) + 1))[:size]
    data: Any = iter([payload[i:i + (1 << 20)] for i in range(0, size, 1 << 20)]) if chunked else payload
    resp = requests.post(base + "/count", data=data, headers={"Host": "solo.example.com"}, timeout=30)
    assert resp.status_code == 200
    assert resp.json() == {"size": size, "sha256": hashlib.sha256(payload).hexdigest(), "chunked": chunked}


class _TcpEcho(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


def test_stop_closes_open_tcp_connections(home: Path) -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _TcpEcho)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        repo, registry = RouteRepository(), ServiceRegistry()
        registry.register("db", f"127.0.0.1:{server.server_address[1]}")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        repo.create_app("t")
        repo.create_route("t", Route(type="tcp", service="db", port=port))
        running = RouterThread(Router(repo, registry, CookieSealer(b"k" * 32))).start()
        with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:
            conn.sendall(b"hi")
            assert conn.recv(16) == b"hi"
            running.stop()
            assert conn.recv(16) == b""  # closed by the router, not left hanging
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_expect_100_continue_reaches_an_http10_backend(home: Path, backends: list[Any]) -> None:
    """curl sends ``Expect: 100-continue`` for larger uploads; the router answers it itself."""
    repo, registry = RouteRepository(), ServiceRegistry()
    registry.register("old-web", backends[0].addr)  # http.server speaking HTTP/1.0: never sends 100
    repo.create_app("old")
    repo.create_route("old", Route(type="http", service="old-web", domain="old.example.com"))
    with RouterThread(Router(repo, registry, CookieSealer(b"k" * 32), response_timeout=2)) as running:
        resp = requests.post(f"http://127.0.0.1:{running.http_port}/up", data=b"payload", timeout=10,
                             headers={"Host": "old.example.com", "Expect": "100-continue"})
    assert resp.status_code == 200 and resp.json()["body"] == "payload"


@pytest.mark.slow
def test_stop_does_not_wait_for_a_stuck_request(home: Path, tricky: list[TrickyBackend]) -> None:
    repo, registry = RouteRepository(), ServiceRegistry()
    registry.register("stuck-web", tricky[0].addr)
    repo.create_app("stuck")
    repo.create_route("stuck", Route(type="http", service="stuck-web", domain="stuck.example.com"))
    running = RouterThread(Router(repo, registry, CookieSealer(b"k" * 32), response_timeout=60)).start()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(requests.get(f"http://127.0.0.1:{running.http_port}/hang", timeout=20,
                                        headers={"Host": "stuck.example.com"}).status_code)
        except requests.RequestException as exc:
            outcome.append(type(exc).__name__)

    client = threading.Thread(target=call)
    client.start()
    deadline = time.monotonic() + 5
    while not tricky[0].hits and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    running.stop()
    client.join(10)
    assert time.monotonic() - started < 5 and not client.is_alive()
    assert outcome and outcome[0] != 200  # the client sees the connection end, not a hang


def test_x_forwarded_headers(proxied: tuple[RouterThread, str]) -> None:
    """Prior X-Forwarded-* headers fold into one list and ours is appended (Flynn's fwdProtoHandler,
    router/handlers_test.go TestFwdProtoHandler): the peer, the listener's scheme and port."""
    import http.client

    running, _ = proxied
    conn = http.client.HTTPConnection("127.0.0.1", running.http_port, timeout=5)
    try:
        conn.putrequest("GET", "/headers", skip_host=True)
        for name, value in (("Host", "solo.example.com"), ("X-Forwarded-For", "10.0.0.1"),
                            ("X-Forwarded-For", "10.0.0.2, 10.0.0.3"), ("X-Forwarded-Proto", "https"),
                            ("X-Forwarded-Port", "1")):
            conn.putheader(name, value)
        conn.endheaders()
        seen = json.loads(conn.getresponse().read())["headers"]
    finally:
        conn.close()
    assert seen["x-forwarded-for"] == "10.0.0.1, 10.0.0.2, 10.0.0.3, 127.0.0.1"
    assert (seen["x-forwarded-proto"], seen["x-forwarded-port"]) == ("https, http", f"1, {running.http_port}")
    assert seen["host"] == "solo.example.com"
