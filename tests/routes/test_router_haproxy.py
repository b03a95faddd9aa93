"""``crhelper router serve --engine haproxy``: the end-to-end routing tests of ``test_router_e2e``
against both engines, then what only a real HAProxy shows: HTTP changes applied through the
runtime API with a keep-alive connection open (it survives, no reload), a new TCP route by a
seamless reload that keeps an open TCP connection, HTTPS by SNI, and the command's process life.

These need HAProxy; without it they skip (under CI=true they run and fail instead).
"""

from __future__ import annotations

import http.client
import inspect
import os
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote

import pytest
import test_router_e2e
from test_router_e2e import env as builtin_env
from test_router_e2e import free_port, https_get, tcp_backend, wait_until

from handlers.routes.engine_haproxy import OWNER_FILE, RUNTIME_PREFIX, HAProxyEngine
from handlers.routes.model import Certificate, Route
from handlers.routes.registry import ServiceRegistry
from handlers.routes.repository import RouteRepository

REPO_ROOT = Path(__file__).resolve().parents[2]
HAPROXY = shutil.which("haproxy")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(HAPROXY is None and os.environ.get("CI") != "true",
                       reason="haproxy is not installed (apt-get install haproxy); under CI=true these run"),
]
#: Every test of the e2e module that takes ``env`` (the shared routing behaviour, today's and any
#: added later), collected here again so that it gets this module's engine-parametrised ``env``.
SHARED_TESTS = {name: test for name, test in vars(test_router_e2e).items()
                if name.startswith("test_") and "env" in inspect.signature(test).parameters}
globals().update(SHARED_TESTS)
# Requested by name: the built-in engine's environment and the e2e TCP backend.
__all__ = ["builtin_env", "tcp_backend", *SHARED_TESTS]


def test_the_shared_behaviour_tests_are_collected_here() -> None:
    assert {"test_host_wildcard_path_sticky_leader_on_the_wire", "test_backend_changes_and_dead_backends",
            "test_tcp_route"} <= set(SHARED_TESTS)


@pytest.fixture(params=["builtin", "haproxy"])
def env(request: pytest.FixtureRequest, home: Path, builtin_env: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The e2e tests' environment (provider, routes store, registry, two backends) served by the
    engine under test: for haproxy the built-in router is stopped and HAProxy follows the same store."""
    if request.param == "builtin":
        yield builtin_env
        return
    builtin_env["router"].stop()  # idempotent: the e2e fixture's own stop then does nothing
    engine = HAProxyEngine(RouteRepository(home / "router" / "routes.db"), builtin_env["registry"], b"k" * 32,
                           poll_interval=0.05)
    with engine:
        yield {**builtin_env, "router": engine, "base": f"http://127.0.0.1:{engine.http_port}"}


@pytest.fixture()
def engine(home: Path, backends: list[Any]) -> Iterator[HAProxyEngine]:
    repo, registry = RouteRepository(), ServiceRegistry()
    registry.register("web", backends[0].addr)
    repo.create_app("shop")
    repo.create_route("shop", Route(type="http", service="web", domain="shop.example.com"))
    with HAProxyEngine(repo, registry, b"k" * 32, poll_interval=0.05) as running:
        yield running


def _ask(conn: http.client.HTTPConnection, host: str, path: str = "/") -> tuple[int, bytes]:
    conn.request("GET", path, headers={"Host": host})
    response = conn.getresponse()
    return response.status, response.read()


def test_http_changes_apply_live_and_an_open_keepalive_connection_survives(
        engine: HAProxyEngine, backends: list[Any]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", engine.http_port, timeout=5)
    assert _ask(conn, "shop.example.com")[0] == 200
    conn.auto_open = 0  # from here a reconnect would raise instead of hiding a dropped connection
    sock, local = conn.sock, conn.sock.getsockname()
    repo, registry = engine.repo, engine.registry
    repo.create_route("shop", Route(type="http", service="api", domain="shop.example.com", path="/api/"))
    repo.create_route("shop", Route(type="http", service="web", domain="*.example.com", sticky=True))
    engine.refresh()
    assert _ask(conn, "shop.example.com", "/api/x")[0] == 503  # the new route, no backend yet
    registry.register("api", backends[1].addr)
    engine.refresh()
    status, body = _ask(conn, "shop.example.com", "/api/x")
    assert status == 200 and b'"backend": "two"' in body
    assert _ask(conn, "other.example.com")[0] == 200
    repo.delete_route("shop", "http", repo.list_routes()[0].id)  # the newest: the wildcard
    engine.refresh()
    assert _ask(conn, "other.example.com") == (404, b"Not Found\n")
    assert conn.sock is sock and sock.getsockname() == local and engine.reloads == 0


class _Echo(socketserver.BaseRequestHandler):
    """Echoes every chunk back until the client closes (a long-lived TCP session)."""

    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(b"echo:" + data)


@pytest.fixture()
def echo_server() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _echoes(conn: socket.socket, data: bytes) -> bool:
    conn.sendall(data)
    return conn.recv(64) == b"echo:" + data


def test_a_new_tcp_route_is_a_seamless_reload_that_keeps_an_open_tcp_connection(
        engine: HAProxyEngine, echo_server: str) -> None:
    engine.registry.register("db", echo_server)
    first, second = free_port(), free_port()
    engine.repo.create_route("shop", Route(type="tcp", service="db", port=first))
    engine.refresh()
    assert engine.reloads == 1
    with socket.create_connection(("127.0.0.1", first), timeout=5) as conn:
        assert _echoes(conn, b"a")
        engine.repo.create_route("shop", Route(type="tcp", service="db", port=second))
        engine.refresh()
        assert engine.reloads == 2
        with socket.create_connection(("127.0.0.1", second), timeout=5) as other:
            assert _echoes(other, b"b")
        assert _echoes(conn, b"c")  # served by the old worker, which finishes its connections
        with socket.create_connection(("127.0.0.1", first), timeout=5) as again:  # the listener moved over
            assert _echoes(again, b"d")


def test_https_routes_terminate_tls_by_sni(home: Path, backends: list[Any], tls_site: tuple[Any, str, str]) -> None:
    ca, cert, key = tls_site
    repo, registry = RouteRepository(), ServiceRegistry()
    registry.register("secure-web", backends[0].addr)
    repo.create_app("sec")
    repo.create_route("sec", Route(type="http", service="secure-web", domain="secure.example.com",
                                   certificate=Certificate(cert=cert, key=key)))
    repo.create_route("sec", Route(type="http", service="secure-web", domain="plain.example.com"))
    with HAProxyEngine(repo, registry, b"k" * 32, https_port=0) as engine:
        assert engine.https_port is not None
        head, _, body = https_get(engine.https_port, ca, "secure.example.com").partition(b"\r\n\r\n")
        # HAProxy relays the backend's status line as it is (HTTP/1.0 from http.server)
        assert head.split(b" ")[1] == b"200" and b'"backend": "one"' in body and b'"path": "/tls"' in body
        with pytest.raises(ssl.SSLError):
            https_get(engine.https_port, ca, "plain.example.com")  # no certificate for this name


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_cli(home: Path, port: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.main", "router", "serve", "--engine", "haproxy", "--port", str(port),
         "--no-https", "--poll", "0.05"], cwd=REPO_ROOT, env={**os.environ, "CRHELPER_HOME": str(home)},
        stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert "through HAProxy" in line, line + proc.stderr.read()
    return proc


def _haproxy_pgid(parent: int) -> int:
    """The group HAProxy's master leads: the one child of the command."""
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_the_command_serves_through_haproxy_and_haproxy_ends_with_it(home: Path, backends: list[Any]) -> None:
    repo, registry = RouteRepository(), ServiceRegistry()
    registry.register("web", backends[0].addr)
    repo.create_app("shop")
    port = free_port()
    proc = _start_cli(home, port)
    try:
        pgid = _haproxy_pgid(proc.pid)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        assert _ask(conn, "shop.example.com") == (404, b"Not Found\n")
        repo.create_route("shop", Route(type="http", service="web", domain="shop.example.com"))
        wait_until(lambda: _ask(conn, "shop.example.com")[0] == 200)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        wait_until(lambda: not _group_alive(pgid), timeout=5)
        proc = _start_cli(home, port)  # SIGKILL: the parent-death signal ends HAProxy too
        pgid = _haproxy_pgid(proc.pid)
        proc.kill()
        proc.wait(5)
        wait_until(lambda: not _group_alive(pgid), timeout=5)
        left = [p for p in Path(tempfile.gettempdir()).glob(RUNTIME_PREFIX + "*")
                if (p / OWNER_FILE).exists() and (p / OWNER_FILE).read_text() == str(proc.pid)]
        assert len(left) == 1  # the killed command could not clean up: the next start does
        with HAProxyEngine(RouteRepository(), ServiceRegistry(), b"k" * 32):
            assert not left[0].exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        assert proc.stderr is not None
        proc.stderr.close()


MATCHING_ROUTES = [("dev.foo.bar", "/"), ("*.foo.bar", "/"), ("*.bar", "/"), ("*", "/"), ("a.com", "/"),
                   ("a.com", "/a/"), ("a.com", "/a/c/d/c/"), ("a.com", "/2/"), ("*.e.f", "/")]
MATCHING_REQUESTS = [("dev.foo.bar", "/"), ("DEV.foo.bar:8080", "/z"), ("flynn.foo.bar", "/"), ("foo.bar", "/"),
                     ("x.bar", "/"), ("bar", "/"), ("elsewhere.net", "/"), ("a.com", "/a/xyz"), ("a.com", "/a"),
                     ("a.com", "/a/c/d"), ("a.com", "/a/c/d/c/e"), ("a.com", "/xyz"), ("a.com", "/2"),
                     ("a.com", "/abc"), ("a.com", "//a"), ("a.com", "/A/"), ("a.b.c.d.e.f", "/"), ("x.org", "/p/"), ("[::1]:8080", "/"),
                     ("a.com", "/%61/x"), ("a.com", "/a%2Fc%2Fd/c")]


def test_haproxy_matches_every_request_as_the_route_table_does(home: Path, backends: list[Any]) -> None:
    """Flynn's matching table (router tests, spec §9) through HAProxy, checked against ``RouteTable``
    (the built-in engine's matcher): each route has its own backend, named after it."""
    from handlers.routes.matching import RouteTable

    EchoBackend = type(backends[0])  # conftest's echo server (``import conftest`` is ambiguous in a full run)

    repo, registry = RouteRepository(), ServiceRegistry()
    repo.create_app("m")
    servers = []
    for index, (domain, path) in enumerate(MATCHING_ROUTES):
        servers.append(EchoBackend(f"{domain}{path}"))
        registry.register(f"svc{index}", servers[-1].addr)
        repo.create_route("m", Route(type="http", service=f"svc{index}", domain=domain, path=path))
    table = RouteTable(repo.list_routes())
    try:
        with HAProxyEngine(repo, registry, b"k" * 32) as engine:
            conn = http.client.HTTPConnection("127.0.0.1", engine.http_port, timeout=5)
            for host, path in MATCHING_REQUESTS:
                expected = table.lookup(host, unquote(path))  # the built-in engine matches the decoded path
                status, body = _ask(conn, host, path)
                if expected is None:
                    assert status == 404, (host, path)
                else:
                    wanted = MATCHING_ROUTES[int(expected.service[3:])]
                    assert status == 200 and f'"backend": "{wanted[0]}{wanted[1]}"'.encode() in body, (host, path)
    finally:
        for server in servers:
            server.stop()


def test_a_tcp_port_in_use_is_left_out_until_it_is_free(engine: HAProxyEngine, echo_server: str) -> None:
    engine.registry.register("db", echo_server)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        engine.repo.create_route("shop", Route(type="tcp", service="db", port=port))
        engine.refresh()
        assert engine.reloads == 0 and engine.applied is not None and engine.applied.tcp_ports == ()
        conn = http.client.HTTPConnection("127.0.0.1", engine.http_port, timeout=5)
        assert _ask(conn, "shop.example.com")[0] == 200  # the rest is served as before
    engine.registry.register("db", echo_server, leader=True)  # any change: the port is tried again
    engine.refresh()
    assert engine.reloads == 1
    with socket.create_connection(("127.0.0.1", port), timeout=5) as tcp:
        assert _echoes(tcp, b"x")
