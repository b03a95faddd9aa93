"""The built-in router where Flynn's router code decides (flynn/flynn c283e9f5, router/http.go,
router/proxy/{transport,reverseproxy}.go): Upgrade/WebSocket proxying, the default certificate,
the response-header timeout, power-of-two choices, port-keyed listeners, and a client leaving
mid-request."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from handlers.routes import proxy as proxy_module
from handlers.routes.matching import Backend, RouteTable, attempt_order
from handlers.routes.model import Certificate, Route
from handlers.routes.proxy import Router, RouterThread
from handlers.routes.registry import ServiceRegistry
from handlers.routes.repository import RouteRepository
from handlers.routes.sticky import CookieSealer



def _router(home: Path, services: dict[str, list[str]], routes: list[Route], **kw: Any) -> Router:
    repo = RouteRepository()
    registry = ServiceRegistry()
    for service, addrs in services.items():
        for addr in addrs:
            registry.register(service, addr)
    repo.create_app("px")
    for route in routes:
        repo.create_route("px", route)
    return Router(repo, registry, CookieSealer(b"k" * 32), poll_interval=0.05, **kw)


def _http(domain: str, service: str, **kw: Any) -> Route:
    return Route(type="http", domain=domain, service=service, **kw)


# --- pure choices --------------------------------------------------------------------------------

def test_two_choices_are_distinct_and_chosen_again_on_each_retry() -> None:
    pool = [Backend(f"10.0.0.{i}:1") for i in range(1, 5)]
    inflight = {"10.0.0.1:1": 0, "10.0.0.2:1": 9}
    order = attempt_order(pool, None, inflight, rng=lambda a, b: 0)  # both random picks land on 0
    assert next(order).addr == "10.0.0.1:1"  # picks 0 and 1 (distinct), 0 has fewer in flight
    inflight["10.0.0.2:1"] = 0
    inflight["10.0.0.3:1"] = 5
    # The retry chooses again among the untried, with the counts of now: index 0 is .2, 1 is .3.
    assert next(order).addr == "10.0.0.2:1"
    assert [b.addr for b in order] == ["10.0.0.4:1", "10.0.0.3:1"]  # .3 is busier; then the last one
    tried = [b.addr for b in attempt_order(pool, "10.0.0.3:1", {})]
    assert tried[0] == "10.0.0.3:1" and sorted(tried) == sorted(b.addr for b in pool)


def test_routes_are_keyed_by_port() -> None:
    table = RouteTable([
        Route(type="http", domain="a.example.com", path="/", service="default", id="1"),
        Route(type="http", domain="a.example.com", path="/", service="extra", port=9000, id="2"),
        Route(type="http", domain="*", path="/", service="catchall-extra", port=9000, id="3"),
    ])
    assert table.lookup("a.example.com", "/x").service == "default"  # type: ignore[union-attr]
    assert table.lookup("A.example.com:9000", "/x", 9000).service == "extra"  # type: ignore[union-attr]
    assert table.lookup("b.example.com", "/", 9000).service == "catchall-extra"  # type: ignore[union-attr]
    assert table.lookup("b.example.com", "/") is None
    assert table.lookup("a.example.com", "/", 9001) is None


def test_default_response_timeout_is_flynns_ten_minutes() -> None:
    assert proxy_module.RESPONSE_TIMEOUT == 600.0


# --- on the wire ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_websocket_is_proxied_both_ways(home: Path, caplog: pytest.LogCaptureFixture, ws_backend: Any) -> None:
    import aiohttp

    backend, seen_headers, closed = ws_backend
    router = _router(home, {"ws-web": [backend.addr]}, [_http("ws.example.com", "ws-web")])
    with RouterThread(router) as running:
        async def talk() -> tuple[list[str], bytes, int, dict[str, str], str, str]:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{running.http_port}/ws"
                async with session.ws_connect(url, headers={"Host": "ws.example.com"}) as sock:
                    texts = [(await sock.receive_str())]
                    for word in ("one", "two"):
                        await sock.send_str(word)
                        texts.append(await sock.receive_str())
                    await sock.send_bytes(b"abc")
                    binary = await sock.receive_bytes()
                    upgrade = sock._response.headers.get("Upgrade", "")  # the relayed 101
                    status = sock._response.status
                async with session.get(f"http://127.0.0.1:{running.http_port}/refuse",
                                       headers={"Host": "ws.example.com", "Connection": "Upgrade",
                                                "Upgrade": "websocket"}) as refused:
                    body = await refused.text()
                    return texts, binary, status, {"upgrade": upgrade, "connection": refused.headers.get(
                        "Connection", "")}, body, str(refused.status)

        texts, binary, status, headers, body, refused_status = asyncio.run(talk())
        deadline = time.monotonic() + 3
        while not closed and time.monotonic() < deadline:
            time.sleep(0.02)
    assert texts == ["hello", "ONE", "TWO"] and binary == b"cba"
    assert status == 101 and headers["upgrade"].lower() == "websocket"
    assert closed == [1000]  # the client's close frame crossed the splice
    seen = seen_headers[0]
    assert seen["Upgrade"] == "websocket" and "upgrade" in seen["Connection"].lower()
    assert seen["X-Forwarded-Proto"] == "http" and seen["X-Forwarded-Port"] == str(running.http_port)
    assert (refused_status, body, headers["connection"]) == ("403", "no upgrade for you\n", "close")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def _tls_connect(port: int, ca: Any, server_name: str | None, check_hostname: bool = True) -> str:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    context.check_hostname = check_hostname
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            cert = tls.getpeercert()
            assert cert is not None
            return str(cert["subjectAltName"][0][1])  # the first DNS name the certificate is for


@pytest.mark.slow
def test_route_without_certificate_gets_the_default_one(home: Path, backends: list[Any],
                                                        tls_site: tuple[Any, str, str]) -> None:
    import trustme

    ca, cert, key = tls_site
    default_ca = trustme.CA()
    default = default_ca.issue_cert("router.example.net", "*.example.com")
    pair = (default.cert_chain_pems[0].bytes().decode(), default.private_key_pem.bytes().decode())
    router = _router(home, {"web": [backends[0].addr]},
                     [_http("secure.example.com", "web", certificate=Certificate(cert=cert, key=key)),
                      _http("plain.example.com", "web")],
                     https_port=0, default_certificate=pair)
    with RouterThread(router) as running:
        port = running.router.https_port
        assert port is not None
        assert _tls_connect(port, ca, "secure.example.com") == "secure.example.com"  # its own
        assert _tls_connect(port, default_ca, "plain.example.com") == "router.example.net"  # the default
        assert _tls_connect(port, default_ca, None, check_hostname=False) == "router.example.net"  # no SNI
        with pytest.raises(ssl.SSLError):
            _tls_connect(port, default_ca, "nobody.example.org")  # no route: Flynn's errMissingTLS
        reply = requests.get(f"https://127.0.0.1:{port}/", headers={"Host": "plain.example.com"},
                             verify=False, timeout=5)
        assert reply.status_code == 200 and reply.json()["backend"] == "one"


@pytest.mark.slow
def test_generated_default_certificate_when_none_is_configured(home: Path, backends: list[Any]) -> None:
    router = _router(home, {"web": [backends[0].addr]}, [_http("plain.example.com", "web")], https_port=0)
    with RouterThread(router) as running:
        reply = requests.get(f"https://127.0.0.1:{running.router.https_port}/",
                             headers={"Host": "plain.example.com"}, verify=False, timeout=5)
    assert reply.status_code == 200 and reply.json()["backend"] == "one"


def _slow_app() -> Any:
    from aiohttp import web

    async def pauses(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            for part in (b"first ", b"second ", b"third"):
                await response.write(part)
                await asyncio.sleep(float(request.query.get("gap", "0.5")))
        except ConnectionError:  # the router let go (its client left): not this test's subject
            pass
        return response

    async def late(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.Response(text="too late")

    app = web.Application()
    app.router.add_get("/pauses", pauses)
    app.router.add_get("/late", late)
    return app


@pytest.mark.slow
def test_timeout_covers_response_headers_only(home: Path, app_server: Any) -> None:
    backend = app_server(_slow_app())
    router = _router(home, {"slow": [backend.addr]}, [_http("slow.example.com", "slow")], response_timeout=0.3)
    with RouterThread(router) as running:
        base = f"http://127.0.0.1:{running.http_port}"
        reply = requests.get(base + "/pauses?gap=0.5", headers={"Host": "slow.example.com"}, timeout=10)
        assert (reply.status_code, reply.text) == (200, "first second third")  # gaps > 0.3 s are fine
        late = requests.get(base + "/late", headers={"Host": "slow.example.com"}, timeout=10)
        assert (late.status_code, late.text) == (503, "Service Unavailable\n")


@pytest.mark.slow
def test_additional_listener_looks_up_its_own_port(home: Path, backends: list[Any]) -> None:
    router = _router(home, {"web": [backends[0].addr]}, [_http("ports.example.com", "web")],
                     additional_http_ports=[0])
    with RouterThread(router) as running:
        extra = running.router.additional_http_ports[0]
        assert extra and extra != running.http_port
        main = requests.get(f"http://127.0.0.1:{running.http_port}/", headers={"Host": "ports.example.com"}, timeout=5)
        other = requests.get(f"http://127.0.0.1:{extra}/", headers={"Host": "ports.example.com"}, timeout=5)
    assert main.status_code == 200 and main.json()["backend"] == "one"
    assert (other.status_code, other.text) == (404, "Not Found\n")  # controller routes are port 0


@pytest.mark.slow
def test_dead_backends_are_skipped_each_retry_choosing_again(home: Path, backends: list[Any]) -> None:
    dead = []
    for _ in range(2):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            dead.append(f"127.0.0.1:{sock.getsockname()[1]}")
    router = _router(home, {"web": [*dead, backends[0].addr]}, [_http("retry.example.com", "web")])
    with RouterThread(router) as running:
        codes = [requests.get(f"http://127.0.0.1:{running.http_port}/", headers={"Host": "retry.example.com"},
                              timeout=5).status_code for _ in range(10)]
        assert codes == [200] * 10
        assert all(count == 0 for count in running.router.inflight.values())


@pytest.mark.slow
def test_client_leaving_mid_response_is_a_debug_line(home: Path, caplog: pytest.LogCaptureFixture,
                                                     app_server: Any) -> None:
    backend = app_server(_slow_app())
    router = _router(home, {"slow": [backend.addr]}, [_http("gone.example.com", "slow")])
    with RouterThread(router) as running, caplog.at_level(logging.DEBUG):
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", running.http_port), timeout=5) as sock:
                sock.sendall(b"GET /pauses?gap=0.2 HTTP/1.1\r\nHost: gone.example.com\r\n\r\n")
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(0.8)  # the backend's next chunks meet a closed client
        ok = requests.get(f"http://127.0.0.1:{running.http_port}/pauses?gap=0",
                          headers={"Host": "gone.example.com"}, timeout=5)
        assert ok.text == "first second third"
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [(r.name, r.getMessage()) for r in errors]
    assert any("client went away" in r.getMessage() for r in caplog.records if r.name.endswith("routes.proxy"))


@pytest.fixture()
def _no_env_cert(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(proxy_module.TLS_CERT_ENV, raising=False)
    monkeypatch.delenv(proxy_module.TLS_KEY_ENV, raising=False)
    yield


def test_default_certificate_from_env_needs_both_files(tmp_path: Path, _no_env_cert: None) -> None:
    assert proxy_module.default_certificate_from_env({}) is None
    with pytest.raises(ValueError, match="set both"):
        proxy_module.default_certificate_from_env({proxy_module.TLS_CERT_ENV: "/x"})
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    assert proxy_module.default_certificate_from_env({proxy_module.TLS_CERT_ENV: str(tmp_path / "c.pem"),
                                                      proxy_module.TLS_KEY_ENV: str(tmp_path / "k.pem")}) == ("CERT", "KEY")


@pytest.mark.slow
def test_serve_runs_worker_processes_on_one_port(home: Path, backends: list[Any]) -> None:
    """``CRHELPER_ROUTER_WORKERS=2``: a second router process shares the port (SO_REUSEPORT), is
    replaced when it dies, and both end on Ctrl-C."""
    import os
    import signal
    import subprocess
    import sys

    repo = RouteRepository()
    ServiceRegistry().register("web", backends[0].addr)
    repo.create_app("wk")
    repo.create_route("wk", _http("workers.example.com", "web"))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "crhelper.cli.main", "router", "serve", "--port", "0", "--no-https"],
                            cwd=root, env={**os.environ, "CRHELPER_HOME": str(home), "CRHELPER_ROUTER_WORKERS": "2"},
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()  # type: ignore[union-attr]
        port = int(line.split("127.0.0.1:")[1].split()[0])
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 1
        def codes() -> set[int]:
            return {requests.get(f"http://127.0.0.1:{port}/", timeout=5,
                                 headers={"Host": "workers.example.com", "Connection": "close"}).status_code
                    for _ in range(20)}

        assert codes() == {200}
        os.kill(int(children[0]), signal.SIGKILL)  # a worker that dies is replaced
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            if now and now != children:
                break
            time.sleep(0.1)
        assert now and now != children
        assert codes() == {200}
        children = now
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0 and "Traceback" not in err
        deadline = time.monotonic() + 5
        while any(Path(f"/proc/{c}").exists() for c in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(Path(f"/proc/{c}").exists() and "worker_main" in Path(f"/proc/{c}/cmdline").read_text()
                       for c in children)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_worker_count_setting() -> None:
    assert proxy_module.worker_count(3) == 3
    assert proxy_module.worker_count(None, {"CRHELPER_ROUTER_WORKERS": "4"}) == 4
    assert proxy_module.worker_count(None, {}) >= 1
    for bad in ("0", "two", "999"):
        with pytest.raises(ValueError, match="CRHELPER_ROUTER_WORKERS"):
            proxy_module.worker_count(None, {"CRHELPER_ROUTER_WORKERS": bad})
