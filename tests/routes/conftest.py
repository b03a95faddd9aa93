"""Fixtures for the routing provider: isolated state dir, TLS pairs, echo backends, schemas."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import pytest

from handlers.routes.repository import RouteRepository

from aiohttp import web as aiohttp_web

if TYPE_CHECKING:
    from aiohttp import web

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SCHEMA_DIR = SHARED / "flynn" / "schema"


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path))
    for name in ("CRHELPER_ROUTER_BACKEND", "CRHELPER_ROUTER_DB", "CRHELPER_ROUTER_DEFAULT_DOMAIN",
                 "CRHELPER_FLYNN_URL", "CRHELPER_FLYNN_KEY", "CRHELPER_ROUTER_SERVICES",
                 "CRHELPER_ROUTER_COOKIE_KEY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.fixture()
def repo(home: Path) -> RouteRepository:
    return RouteRepository()


@pytest.fixture(scope="session")
def tls_site() -> tuple[object, str, str]:
    """(trustme CA, cert PEM, key PEM) for ``secure.example.com`` and ``*.secure.example.com``."""
    import trustme

    ca = trustme.CA()
    leaf = ca.issue_cert("secure.example.com", "*.secure.example.com")
    return ca, leaf.cert_chain_pems[0].bytes().decode(), leaf.private_key_pem.bytes().decode()


@pytest.fixture(scope="session")
def tls_pairs() -> dict[str, tuple[str, str]]:
    """Two valid (cert, key) PEM pairs from different CAs; mixing them makes a mismatch."""
    import trustme

    out = {}
    for name in ("a", "b"):
        ca = trustme.CA()
        leaf = ca.issue_cert(f"{name}.example.com")
        cert = leaf.cert_chain_pems[0].bytes().decode()
        key = leaf.private_key_pem.bytes().decode()
        out[name] = (cert, key)
    return out


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with JSON naming the backend, the path and the Host it saw."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        payload = json.dumps({
            "backend": self.server.name,  # type: ignore[attr-defined]
            "path": self.path,
            "host": self.headers.get("Host"),
            "method": self.command,
            "body": body.decode(),
            "request_id": self.headers.get("X-Request-Id"),
            "request_start": self.headers.get("X-Request-Start"),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


class EchoBackend:
    def __init__(self, name: str) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
        self.httpd.daemon_threads = True
        self.httpd.name = name  # type: ignore[attr-defined]
        self.name = name
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture()
def backends() -> Iterator[list[EchoBackend]]:
    servers = [EchoBackend("one"), EchoBackend("two")]
    yield servers
    for server in servers:
        server.stop()


def _drop_any_type(node: object) -> object:
    """base.json uses draft-03's ``"type": "any"``, which draft-4 validators reject; it means no rule."""
    if isinstance(node, dict):
        return {k: _drop_any_type(v) for k, v in node.items() if not (k == "type" and v == "any")}
    if isinstance(node, list):
        return [_drop_any_type(v) for v in node]
    return node


@pytest.fixture(scope="session")
def schema_registry():  # type: ignore[no-untyped-def]
    """Flynn's schemas keyed by their ``https://flynn.io/schema/...`` ids (and path refs)."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    resources = []
    for path in SCHEMA_DIR.rglob("*.json"):
        doc = _drop_any_type(json.loads(path.read_text()))
        uri = doc.get("id", "").rstrip("#")
        if uri:
            resources.append((uri, Resource.from_contents(doc, default_specification=DRAFT4)))
    return Registry().with_resources(resources)


class AppServer:
    """An aiohttp application on 127.0.0.1 in its own loop thread (WebSocket and streaming
    backends for the proxy tests; any engine's tests may use it)."""

    def __init__(self, app: "web.Application") -> None:
        from crhelper.servers import LoopThread, site_port

        outer = self

        class _Thread(LoopThread):
            async def startup(self) -> None:
                from aiohttp import web as aioweb

                self.runner = aioweb.AppRunner(app, access_log=None, shutdown_timeout=0.5)
                await self.runner.setup()
                site = aioweb.TCPSite(self.runner, "127.0.0.1", 0)
                await site.start()
                outer.port = site_port(site) or 0

            async def cleanup(self) -> None:
                await self.runner.cleanup()

        self.port = 0
        self._thread = _Thread("test-app-server")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "AppServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop()


WS_SEEN: "web.AppKey[list[dict[str, str]]]" = aiohttp_web.AppKey("seen", list)
WS_CLOSED: "web.AppKey[list[int | None]]" = aiohttp_web.AppKey("closed", list)


def websocket_echo_app() -> "web.Application":
    """``/ws``: a WebSocket that greets, then echoes each text message upper-cased; it records
    the request headers it saw and how the connection ended. ``/refuse``: answers an Upgrade
    request with a plain 403."""
    from aiohttp import WSMsgType
    from aiohttp import web as aioweb

    app = aioweb.Application()
    app[WS_SEEN] = []
    app[WS_CLOSED] = []

    async def ws(request: "web.Request") -> "web.WebSocketResponse":
        app[WS_SEEN].append(dict(request.headers))
        sock = aioweb.WebSocketResponse()
        await sock.prepare(request)
        await sock.send_str("hello")
        async for msg in sock:
            if msg.type == WSMsgType.TEXT:
                await sock.send_str(msg.data.upper())
            elif msg.type == WSMsgType.BINARY:
                await sock.send_bytes(msg.data[::-1])
        app[WS_CLOSED].append(sock.close_code)
        return sock

    async def refuse(request: "web.Request") -> "web.Response":
        return aioweb.Response(status=403, text="no upgrade for you\n")

    app.router.add_get("/ws", ws)
    app.router.add_get("/refuse", refuse)
    return app


@pytest.fixture()
def app_server() -> Iterator[Callable[["web.Application"], AppServer]]:
    """Start aiohttp applications as backends (``app_server(app)`` -> a running :class:`AppServer`);
    all are stopped at the end. A fixture, so test modules need not import this conftest."""
    started: list[AppServer] = []

    def start(app: "web.Application") -> AppServer:
        server = AppServer(app).__enter__()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.__exit__(None, None, None)


@pytest.fixture()
def ws_backend(app_server: Callable[["web.Application"], AppServer]
               ) -> tuple[AppServer, list[dict[str, str]], list[int | None]]:
    """A running :func:`websocket_echo_app`, the request headers it saw and the close codes it got."""
    app = websocket_echo_app()
    return app_server(app), app[WS_SEEN], app[WS_CLOSED]
