"""Routes created through the provider, then real traffic through the router to two backends."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests

from crhelper.testing import ResponseServer, make_event
from handlers.routes.backends import RouterConfig
from handlers.routes.provider import build_provider
from handlers.routes.proxy import Router, RouterThread
from handlers.routes.registry import ServiceRegistry
from handlers.routes.repository import RouteRepository
from handlers.routes.sticky import COOKIE_NAME, CookieSealer


@pytest.fixture()
def env(home: Path, backends: list[Any]) -> Iterator[dict[str, Any]]:
    db = home / "router" / "routes.db"
    repo = RouteRepository(db)
    registry = ServiceRegistry(home / "router" / "services.json")
    one, two = backends
    registry.register("shop-web", one.addr)
    registry.register("shop-web", two.addr)
    registry.register("shop-api", two.addr)
    registry.register("wild", one.addr)
    registry.register("primary", one.addr)
    registry.register("primary", two.addr, leader=True)
    router = Router(repo, registry, CookieSealer(b"k" * 32), poll_interval=0.05)
    with ResponseServer() as responses, RouterThread(router) as running:
        provider = build_provider(RouterConfig(db_path=str(db), http_port=running.http_port))

        def send(request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
            event = responses.attach(make_event(request_type, resource_type, props, **kw))
            provider.handle(event)
            body = responses.wait_for(event["RequestId"], timeout=5)
            assert body["Status"] == "SUCCESS", body.get("Reason")
            return body

        yield {"send": send, "router": running, "registry": registry, "one": one, "two": two,
               "base": f"http://127.0.0.1:{running.http_port}"}
        assert responses.violations == []


def get(base: str, host: str, path: str = "/", session: requests.Session | None = None, **kw: Any) -> requests.Response:
    return (session or requests).get(base + path, headers={"Host": host}, timeout=5, **kw)


def wait_until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def route(app: str = "shop", **kw: Any) -> dict[str, Any]:
    props = {"App": app, "Type": "http", "Service": "shop-web", "Domain": "shop.example.com"}
    props.update(kw)
    return props


def test_host_wildcard_path_sticky_leader_on_the_wire(env: dict[str, Any]) -> None:
    send, base = env["send"], env["base"]
    send("Create", "Custom::App", {"Name": "shop"})
    root = send("Create", "Custom::Route", route())
    send("Create", "Custom::Route", route(Path="/api", Service="shop-api"))
    send("Create", "Custom::Route", route(Domain="*.example.com", Service="wild"))
    send("Create", "Custom::Route", route(Domain="sticky.example.com", Sticky="true"))
    send("Create", "Custom::Route", route(Domain="leader.example.com", Service="primary", Leader=True))
    send("Create", "Custom::Route", route(Domain="empty.example.com", Service="nobody"))
    env["router"].refresh()

    # host: case and port do not matter; the backend sees the original Host
    seen = {get(base, "SHOP.Example.com:8080", "/x").json()["backend"] for _ in range(20)}
    assert seen == {"one", "two"}
    echoed = get(base, "shop.example.com", "/x?q=1").json()
    assert echoed["path"] == "/x?q=1" and echoed["host"] == "shop.example.com"
    assert echoed["request_start"].isdigit() and len(echoed["request_id"]) == 36
    # path: segment prefix
    assert {get(base, "shop.example.com", "/api/v1").json()["backend"] for _ in range(5)} == {"two"}
    assert {get(base, "shop.example.com", "//api").json()["backend"] for _ in range(5)} == {"two"}
    assert get(base, "shop.example.com", "/apix").json()["path"] == "/apix"
    # wildcard beats nothing; exact beats wildcard
    assert {get(base, "a.example.com").json()["backend"] for _ in range(5)} == {"one"}
    assert {get(base, "example.com").json()["backend"] for _ in range(5)} == {"one"}
    # leader-only
    assert {get(base, "leader.example.com").json()["backend"] for _ in range(8)} == {"two"}
    # 404 with Flynn's body, 503 without backends
    missing = get(base, "nowhere.org")
    assert (missing.status_code, missing.text) == (404, "Not Found\n")
    assert get(base, "empty.example.com").status_code == 503
    # sticky: the cookie is set once, then honoured
    session = requests.Session()
    first = get(base, "sticky.example.com", session=session)
    assert COOKIE_NAME in first.cookies
    pinned = first.json()["backend"]
    later = [get(base, "sticky.example.com", session=session) for _ in range(10)]
    assert {r.json()["backend"] for r in later} == {pinned}
    assert all(COOKIE_NAME not in r.headers.get("Set-Cookie", "") for r in later)
    garbage = get(base, "sticky.example.com", cookies={COOKIE_NAME: "bm90LWEtY29va2ll"})
    assert garbage.status_code == 200 and COOKIE_NAME in garbage.cookies
    # the non-sticky route never sets the cookie
    assert COOKIE_NAME not in get(base, "shop.example.com").headers.get("Set-Cookie", "")

    # route changes apply without a restart (the poll loop picks them up)
    send("Update", "Custom::Route", route(Service="wild"), old_properties=route(),
         physical_resource_id=root["PhysicalResourceId"])
    wait_until(lambda: all(get(base, "shop.example.com", "/x").json()["backend"] == "one" for _ in range(6)))


def test_backend_changes_and_dead_backends(env: dict[str, Any]) -> None:
    send, base, registry = env["send"], env["base"], env["registry"]
    send("Create", "Custom::App", {"Name": "shop"})
    rid = send("Create", "Custom::Route", route(Domain="dyn.example.com", Service="dyn"))["PhysicalResourceId"]
    env["router"].refresh()
    assert get(base, "dyn.example.com").status_code == 503
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    registry.register("dyn", dead)
    registry.register("dyn", env["two"].addr)
    wait_until(lambda: get(base, "dyn.example.com").status_code == 200)
    # dial errors are retried on the other backend, so every request succeeds
    assert {get(base, "dyn.example.com").json()["backend"] for _ in range(10)} == {"two"}
    registry.unregister("dyn", env["two"].addr)
    wait_until(lambda: get(base, "dyn.example.com").status_code == 503)
    send("Delete", "Custom::Route", route(), physical_resource_id=rid)
    wait_until(lambda: get(base, "dyn.example.com").status_code == 404)


class _TcpEcho(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = self.request.recv(1024)
        self.request.sendall(self.server.name.encode() + b":" + data)  # type: ignore[attr-defined]


@pytest.fixture()
def tcp_backend() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _TcpEcho)
    server.daemon_threads = True
    server.name = "tcp-one"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_tcp_route(env: dict[str, Any], tcp_backend: str) -> None:
    send, registry = env["send"], env["registry"]
    registry.register("db", tcp_backend)
    send("Create", "Custom::App", {"Name": "shop"})
    port = free_port()
    created = send("Create", "Custom::Route", {"App": "shop", "Type": "tcp", "Service": "db", "Port": port})
    assert created["Data"]["Url"] == f"tcp://127.0.0.1:{port}"
    env["router"].refresh()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"ping")
        assert conn.recv(1024) == b"tcp-one:ping"
    send("Delete", "Custom::Route", {"App": "shop"}, physical_resource_id=created["PhysicalResourceId"])

    def closed() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return False
        except OSError:
            return True

    wait_until(closed)


def https_get(port: int, ca: Any, server_name: str) -> bytes:
    """One GET over TLS with the given SNI name, verified against the test CA."""
    import ssl

    context = ssl.create_default_context()
    ca.configure_trust(context)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(f"GET /tls HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
            chunks = []
            while chunk := tls.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


def test_https_route_terminates_tls_by_sni(home: Path, backends: list[Any], tls_site: tuple[Any, str, str]) -> None:
    import ssl

    ca, cert, key = tls_site
    repo = RouteRepository()
    registry = ServiceRegistry()
    registry.register("secure-web", backends[0].addr)
    repo.create_app("sec")
    from handlers.routes.model import Certificate, Route

    repo.create_route("sec", Route(type="http", service="secure-web", domain="secure.example.com",
                                   certificate=Certificate(cert=cert, key=key)))
    repo.create_route("sec", Route(type="http", service="secure-web", domain="plain.example.com"))
    router = Router(repo, registry, CookieSealer(b"k" * 32), https_port=0, poll_interval=0.05)
    with RouterThread(router) as running:
        reply = https_get(running.router.https_port, ca, "secure.example.com")
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b'"backend": "one"' in body and b'"path": "/tls"' in body
        with pytest.raises(ssl.SSLError):
            https_get(running.router.https_port, ca, "plain.example.com")  # no certificate for this name
