"""The built-in router's plain-HTTP fast path (handlers/routes/fastpath.py): its head parsing on
bytes, pooled keep-alive backend connections, response framing, the hand-over to aiohttp at a
request boundary, and a shutdown that leaves no task pending."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from handlers.routes import fastpath as F
from handlers.routes.model import Route
from handlers.routes.proxy import Router, RouterThread
from handlers.routes.registry import ServiceRegistry
from handlers.routes.repository import RouteRepository
from handlers.routes.sticky import CookieSealer


# --- the head parsers (pure) ---------------------------------------------------------------------

def test_a_common_request_head_passes_verbatim() -> None:
    head = b"GET /a/b?x=1 HTTP/1.1\r\nHost: Web.Example.com:8080\r\nAccept: */*\r\nX-Custom: v"
    line, path, is_head, host, length, close, kept, prior = F.parse_request_head(head)  # type: ignore[misc]
    assert (line, path, is_head, host, length, close, prior) == (
        b"GET /a/b?x=1 HTTP/1.1", b"/a/b", False, b"Web.Example.com:8080", 0, False, {})
    assert kept == b"Host: Web.Example.com:8080\r\nAccept: */*\r\nX-Custom: v\r\n"


def test_hop_by_hop_and_connection_listed_headers_are_dropped_forwarded_ones_collected() -> None:
    head = (b"POST /p HTTP/1.1\r\nhost: a.example.com\r\nConnection: keep-alive, X-Private\r\nX-Private: 1\r\n"
            b"Keep-Alive: timeout=5\r\nTE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2\r\n"
            b"Content-Length: 3\r\nX-Request-Id: short\r\nX-Keep: yes")
    _, _, _, host, length, close, kept, prior = F.parse_request_head(head)  # type: ignore[misc]
    assert (host, length, close) == (b"a.example.com", 3, False)
    assert kept == b"host: a.example.com\r\nContent-Length: 3\r\nX-Keep: yes\r\n"  # invalid request id dropped
    assert prior == {b"x-forwarded-for": [b"10.0.0.1", b"10.0.0.2"]}
    valid = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-Request-Id: " + b"a" * 24
    parsed = F.parse_request_head(valid)
    assert parsed is not None and parsed[5] is True and parsed[6].endswith(b"X-Request-Id: " + b"a" * 24 + b"\r\n")


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.0\r\nHost: a",                                   # HTTP/1.0: aiohttp's framing rules
    b"GET http://a/ HTTP/1.1\r\nHost: a",                           # absolute form
    b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked",    # chunked body
    b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1",
    b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket",
    b"GET /a%2Fb HTTP/1.1\r\nHost: a",                              # aiohttp decodes the path
    b"GET /a/../b HTTP/1.1\r\nHost: a",                             # and normalises dot segments
    b"GET / HTTP/1.1\r\nHost: a\r\n folded",                        # obs-fold
    b"GET / HTTP/1.1\r\nHost : a",                                  # space before the colon
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b",                        # two Hosts
    b"GET / HTTP/1.1\r\nAccept: */*",                               # no Host
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 70000",         # a body larger than MAX_BODY
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1",
    b"GET  / HTTP/1.1\r\nHost: a",
])
def test_unusual_requests_are_handed_to_aiohttp(head: bytes) -> None:
    assert F.parse_request_head(head) is None


def test_response_heads_keep_end_to_end_headers_and_say_how_the_body_ends() -> None:
    nginx = (b"HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 1024\r\nConnection: keep-alive\r\n"
             b"ETag: \"x\"")
    assert F._response_head(nginx) == (200, b"200 OK", b"Server: nginx\r\nContent-Length: 1024\r\nETag: \"x\"\r\n",
                                       1024, False)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: X-Gone\r\nX-Gone: 1\r\nKeep-Alive: t=1"
    assert F._response_head(chunked) == (200, b"200 OK", b"Transfer-Encoding: chunked\r\n", -1, False)
    old = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain"
    assert F._response_head(old) == (200, b"200 OK", b"Content-Type: text/plain\r\n", -2, True)
    old_kept = b"HTTP/1.0 204 No Content\r\nConnection: keep-alive"
    assert F._response_head(old_kept) == (204, b"204 No Content", b"", -2, False)
    assert F._response_head(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0")[3:] == (0, True)
    with pytest.raises(F.Closed):
        F._response_head(b"HTTP/1.1 OK\r\n")


def test_chunked_bodies_end_where_the_last_chunk_and_trailers_do_across_reads() -> None:
    body = b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
    for cut in range(1, len(body)):
        chunks, buf, passed = F._Chunks(), bytearray(body[:cut]), 0
        passed += chunks.feed(buf)
        del buf[:passed]
        buf += body[cut:] + b"NEXT"
        passed += chunks.feed(buf)
        assert chunks.done and passed == len(body), cut


# --- on the wire ---------------------------------------------------------------------------------

class RawBackend:
    """An HTTP/1.1 backend on raw sockets that counts connections; ``answer(request bytes)``
    gives the response bytes (None: close without answering)."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            conn.settimeout(5)
            while not self.stopping.is_set():
                while b"\r\n\r\n" not in buf:
                    try:
                        data = conn.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                request, buf = head + b"\r\n\r\n" + buf[:length], buf[length:]
                self.requests.append(request)
                reply = self.answer(request)
                if reply is None:
                    return
                conn.sendall(reply)
                if b"connection: close" in reply.lower():
                    return

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()
        self.thread.join(5)


def ok(body: bytes = b"hello") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (len(body), body)


@pytest.fixture()
def raw_backend() -> Iterator[Callable[[Callable[[bytes], bytes | None]], RawBackend]]:
    started: list[RawBackend] = []

    def start(answer: Callable[[bytes], bytes | None]) -> RawBackend:
        started.append(RawBackend(answer))
        return started[-1]

    yield start
    for backend in started:
        backend.stop()


def _router(addrs: list[str], where: Path | None = None, **kw: Any) -> Router:
    """A router with ``fast.example.com`` and ``sticky.example.com`` on the backends ``addrs``;
    its route store and registry in ``where`` (default: the test's home)."""
    repo = RouteRepository(where / "routes.db") if where else RouteRepository()
    registry = ServiceRegistry(where / "services.json") if where else ServiceRegistry()
    for addr in addrs:
        registry.register("fast", addr)
    repo.create_app("fp")
    repo.create_route("fp", Route(type="http", domain="fast.example.com", service="fast"))
    repo.create_route("fp", Route(type="http", domain="sticky.example.com", service="fast", sticky=True))
    return Router(repo, registry, CookieSealer(b"k" * 32), poll_interval=0.05, **kw)


def _read_response(sock: socket.socket, buf: bytearray) -> tuple[bytes, bytes]:
    """One response (head, body) off ``sock``, Content-Length or chunked; extra bytes stay in ``buf``."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        assert data, f"connection closed, got {bytes(buf)!r}"
        buf += data
    end = buf.index(b"\r\n\r\n")
    head = bytes(buf[:end])
    del buf[:end + 4]
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            probe = F._Chunks()
            taken = probe.feed(bytearray(buf))
            if probe.done:
                body = bytes(buf[:taken])
                del buf[:taken]
                return head, body
            buf += sock.recv(65536)
    length = int(lower.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]) if b"content-length:" in lower else None
    if length is None:
        while data := sock.recv(65536):
            buf += data
        body = bytes(buf)
        buf.clear()
        return head, body
    while len(buf) < length:
        buf += sock.recv(65536)
    body = bytes(buf[:length])
    del buf[:length]
    return head, body


@pytest.mark.slow
def test_keep_alive_requests_share_one_pooled_backend_connection_and_pipelining_keeps_order(
        home: Path, raw_backend: Any) -> None:
    backend = raw_backend(lambda req: ok(req.split(b" ")[1]))
    with RouterThread(_router([backend.addr])) as running:
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
            buf = bytearray()
            for i in range(5):
                sock.sendall(b"GET /one%d HTTP/1.1\r\nHost: fast.example.com\r\n\r\n" % i)
                head, body = _read_response(sock, buf)
                assert head.startswith(b"HTTP/1.1 200") and body == b"/one%d" % i
                assert b"connection:" not in head.lower()  # the backend's hop-by-hop header is not relayed
            sock.sendall(b"".join(b"GET /pipe%d HTTP/1.1\r\nHost: fast.example.com\r\n\r\n" % i for i in range(3)))
            assert [_read_response(sock, buf)[1] for _ in range(3)] == [b"/pipe0", b"/pipe1", b"/pipe2"]
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as other:
            other.sendall(b"GET /again HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            assert _read_response(other, bytearray())[1] == b"/again"
    assert backend.connections == 1  # every request, on two client connections, used the pooled one
    forwarded = backend.requests[0].decode()
    assert "X-Forwarded-For: 127.0.0.1\r\n" in forwarded and "X-Forwarded-Proto: http\r\n" in forwarded
    assert f"X-Forwarded-Port: {running.http_port}\r\n" in forwarded and "X-Request-Id: " in forwarded


@pytest.mark.slow
def test_chunked_close_delimited_and_head_responses_are_framed(home: Path, raw_backend: Any) -> None:
    def answer(req: bytes) -> bytes | None:
        if req.startswith(b"GET /chunked"):
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        if req.startswith(b"GET /old"):
            return b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nuntil the end"
        if req.startswith(b"HEAD"):
            return b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"
        return ok()

    backend = raw_backend(answer)
    with RouterThread(_router([backend.addr])) as running:
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
            buf = bytearray()
            sock.sendall(b"GET /chunked HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            head, body = _read_response(sock, buf)
            assert b"transfer-encoding: chunked" in head.lower() and body == b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            sock.sendall(b"HEAD /h HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            while b"\r\n\r\n" not in buf:
                buf += sock.recv(65536)
            assert b"Content-Length: 99" in buf and buf.endswith(b"\r\n\r\n")  # no body follows a HEAD
            buf.clear()
            sock.sendall(b"GET /old HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            head, body = _read_response(sock, buf)  # read to EOF: the router closes after it
            assert b"connection: close" in head.lower() and body == b"until the end"


@pytest.mark.slow
def test_a_pooled_connection_the_backend_closed_is_retried_on_a_new_one(home: Path, raw_backend: Any) -> None:
    def answer(req: bytes) -> bytes | None:
        return ok() if b"/first" in req.split(b"\r\n")[0] or len(backend.requests) > 2 else None

    backend = raw_backend(answer)
    with RouterThread(_router([backend.addr])) as running:
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
            buf = bytearray()
            sock.sendall(b"GET /first HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            assert _read_response(sock, buf)[0].startswith(b"HTTP/1.1 200")
            # the backend now drops a request unanswered once: the router retries on a fresh connection
            sock.sendall(b"GET /second HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            head, _ = _read_response(sock, buf)
    assert head.startswith(b"HTTP/1.1 200")
    assert backend.connections == 2 and len(backend.requests) == 3


@pytest.mark.slow
def test_hand_over_to_aiohttp_mid_connection_and_fast_path_off_forward_alike(home: Path, raw_backend: Any) -> None:
    backend = raw_backend(lambda req: ok(json.dumps(sorted(
        line.split(b":")[0].decode().lower() for line in req.split(b"\r\n\r\n")[0].split(b"\r\n")[1:])).encode()))
    names: dict[bool, bytes] = {}
    for fast in (True, False):
        with RouterThread(_router([backend.addr], home / str(fast), fast_path=fast)) as running:
            with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
                buf = bytearray()
                request = (b"GET / HTTP/1.1\r\nHost: fast.example.com\r\nX-Forwarded-For: 1.2.3.4\r\n"
                           b"Accept: */*\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n")
                sock.sendall(request)
                names[fast] = _read_response(sock, buf)[1]
                # a chunked upload on the same connection: aiohttp serves it and the rest of the connection
                sock.sendall(b"POST /up HTTP/1.1\r\nHost: fast.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"2\r\nhi\r\n0\r\n\r\n")
                assert _read_response(sock, buf)[0].startswith(b"HTTP/1.1 200")
                sock.sendall(b"GET /after HTTP/1.1\r\nHost: nowhere.example.com\r\n\r\n")
                head, body = _read_response(sock, buf)
                assert head.startswith(b"HTTP/1.1 404") and body == b"Not Found\n"
    assert names[True] == names[False]  # the same header names reach the backend either way


@pytest.mark.slow
def test_fast_path_404_503_and_sticky_routes(home: Path, raw_backend: Any) -> None:
    backend = raw_backend(lambda req: ok())
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    with RouterThread(_router([f"127.0.0.1:{dead.getsockname()[1]}"])) as running:
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
            buf = bytearray()
            sock.sendall(b"GET / HTTP/1.1\r\nHost: none.example.com\r\n\r\n")
            assert _read_response(sock, buf) == (
                b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 10", b"Not Found\n")
            sock.sendall(b"GET / HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
            head, body = _read_response(sock, buf)
            assert head.startswith(b"HTTP/1.1 503") and body == b"Service Unavailable\n"
    dead.close()
    with RouterThread(_router([backend.addr], home / "sticky")) as running:
        with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: sticky.example.com\r\n\r\n")  # aiohttp's: it seals a cookie
            head, _ = _read_response(sock, bytearray())
            assert b"Set-Cookie: _backend=" in head


@pytest.mark.slow
def test_stop_leaves_no_task_pending_with_requests_in_flight(home: Path, raw_backend: Any) -> None:
    release = threading.Event()

    def answer(req: bytes) -> bytes | None:
        if b"/hang" in req:
            release.wait(10)
        return ok()

    backend = raw_backend(answer)
    running = RouterThread(_router([backend.addr])).start()
    idle = socket.create_connection(("127.0.0.1", running.http_port), timeout=5)
    idle.sendall(b"GET / HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
    _read_response(idle, bytearray())
    hung = socket.create_connection(("127.0.0.1", running.http_port), timeout=5)
    hung.sendall(b"GET /hang HTTP/1.1\r\nHost: fast.example.com\r\n\r\n")
    handed = socket.create_connection(("127.0.0.1", running.http_port), timeout=5)
    handed.sendall(b"GET /hang HTTP/1.0\r\nHost: fast.example.com\r\n\r\n")  # HTTP/1.0: aiohttp's
    try:
        running.stop()
        assert [t for t in asyncio.all_tasks(running.loop) if not t.done()] == []
        assert running.router.inflight == {backend.addr: 0}
    finally:
        release.set()
        for sock in (idle, hung, handed):
            sock.close()
