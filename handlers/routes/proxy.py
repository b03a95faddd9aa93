"""``crhelper router serve``: the local reverse proxy, matching like Flynn's router (spec §9).

aiohttp serves the HTTP listener and forwards with its client; TCP routes get one asyncio
listener each. A poll loop watches the repository's change counter and the registry file, so
route and backend changes apply without a restart.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
import tempfile
import time
import uuid
from typing import Any, Callable

from aiohttp import (ClientConnectorError, ClientError, ClientSession, ClientTimeout, ConnectionTimeoutError,
                     DummyCookieJar, TCPConnector, web)
from multidict import CIMultiDict, CIMultiDictProxy

from crhelper.logs import get_logger
from crhelper.servers import LoopThread, site_port

from .matching import Backend, RouteTable, candidates, choose_backends
from .model import TCP, Route
from .registry import ServiceRegistry
from .repository import RouteRepository
from .sticky import COOKIE_NAME, CookieSealer

log = get_logger("routes.proxy")

HOP_BY_HOP = frozenset(
    h.lower() for h in ("Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
                        "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade")
)
REQUEST_ID_RE = re.compile(r"^[a-zA-Z0-9+/=-]{20,200}$")
MAX_ATTEMPTS = 4
DIAL_TIMEOUT = 1.0
#: Flynn's ``ResponseHeaderTimeout`` (120 s): how long a backend may stay silent once the request
#: is written, for its headers and, here, between body chunks too (a stuck backend frees the slot).
RESPONSE_TIMEOUT = 120.0
#: On stop, in-flight requests get this long to finish before their connections are closed.
SHUTDOWN_GRACE = 1.0


class Router:
    """The proxy state and handlers; run it inside an event loop (see :class:`RouterThread`)."""

    def __init__(
        self,
        repo: RouteRepository,
        registry: ServiceRegistry,
        sealer: CookieSealer,
        *,
        host: str = "127.0.0.1",
        http_port: int = 0,
        tcp_host: str = "127.0.0.1",
        poll_interval: float = 0.2,
        https_port: int | None = None,
        response_timeout: float = RESPONSE_TIMEOUT,
    ) -> None:
        self.repo, self.registry, self.sealer = repo, registry, sealer
        self.host, self.http_port, self.tcp_host = host, http_port, tcp_host
        self.https_port = https_port
        self.response_timeout = response_timeout
        self._tls_contexts: dict[str, ssl.SSLContext] = {}
        self.poll_interval = poll_interval
        self.table = RouteTable([])
        self.services: dict[str, list[Backend]] = {}
        self.inflight: dict[str, int] = {}
        self.tcp_routes: dict[int, Route] = {}
        self._tcp_servers: dict[int, asyncio.base_events.Server] = {}
        self._version = -1
        self._tcp_tasks: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._poller: asyncio.Task[None] | None = None
        self._session: ClientSession | None = None
        self._no_keepalive: ClientSession | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        timeout = ClientTimeout(total=None, sock_connect=DIAL_TIMEOUT, sock_read=self.response_timeout)
        self._session = ClientSession(connector=TCPConnector(limit=0), timeout=timeout,
                                      auto_decompress=False, cookie_jar=DummyCookieJar())
        self._no_keepalive = ClientSession(connector=TCPConnector(limit=0, force_close=True), timeout=timeout,
                                           auto_decompress=False, cookie_jar=DummyCookieJar())
        await self.refresh()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle_http)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE)
        await self._runner.setup()
        self.http_port = await self._listen(self.http_port, None)
        if self.https_port is not None:
            self.https_port = await self._listen(self.https_port, self._server_tls_context())
        self._poller = asyncio.create_task(self._poll_loop())

    async def _listen(self, port: int, ssl_context: ssl.SSLContext | None) -> int:
        assert self._runner is not None
        site = web.TCPSite(self._runner, self.host, port, ssl_context=ssl_context)
        await site.start()
        return site_port(site) or port

    def _server_tls_context(self) -> ssl.SSLContext:
        """The listener's context only picks a per-route context by SNI (Flynn: the route for
        ``(servername, "/")``); a name without a certificate fails the handshake."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.sni_callback = self._sni
        return context

    def _sni(self, sslobj: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> int | None:
        route = self.table.lookup(server_name or "", "/")
        cert = route.certificate if route is not None else None
        chosen = self._tls_contexts.get(cert.id) if cert is not None else None
        if chosen is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        sslobj.context = chosen
        return None

    def _load_tls_contexts(self, routes: list[Route]) -> None:
        """One server context per certificate id; PEMs pass through a private temp dir because
        ``ssl`` loads key pairs only from files."""
        wanted = {r.certificate.id: r.certificate for r in routes if r.certificate is not None and r.certificate.id}
        contexts: dict[str, ssl.SSLContext] = {}
        for cert_id, cert in wanted.items():
            if cert_id in self._tls_contexts:
                contexts[cert_id] = self._tls_contexts[cert_id]
                continue
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            with tempfile.TemporaryDirectory(prefix="crhelper-tls-") as tmp:
                cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
                for path, text in ((cert_path, cert.cert), (key_path, cert.key)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "w") as handle:
                        handle.write(text + "\n")
                try:
                    context.load_cert_chain(cert_path, key_path)
                except (ssl.SSLError, OSError) as exc:
                    log.error("certificate %s not loaded: %s", cert_id, type(exc).__name__)
                    continue
            contexts[cert_id] = context
        self._tls_contexts = contexts

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            try:
                await self._poller
            except asyncio.CancelledError:
                pass
        for server in self._tcp_servers.values():
            server.close()
        # Connections first: since Python 3.12.1 wait_closed() also waits for every open connection.
        for task in list(self._tcp_tasks):
            task.cancel()
        await asyncio.gather(*self._tcp_tasks, return_exceptions=True)
        for server in self._tcp_servers.values():
            await server.wait_closed()
        self._tcp_servers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
        for session in (self._session, self._no_keepalive):
            if session is not None:
                await session.close()

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.refresh()
            except Exception:  # keep serving the last good table
                log.exception("router refresh failed")

    async def refresh(self) -> None:
        """Reload routes when the change counter moved, and backends when the registry changed."""
        self.services = await asyncio.to_thread(self.registry.load)
        version = await asyncio.to_thread(self.repo.version)
        if version == self._version:
            return
        routes = await asyncio.to_thread(self.repo.list_routes)
        if self.https_port is not None:
            self._load_tls_contexts(routes)
        self.table = RouteTable(routes)
        await self._sync_tcp({r.port: r for r in routes if r.type == TCP})
        self._version = version

    async def _sync_tcp(self, wanted: dict[int, Route]) -> None:
        self.tcp_routes = wanted
        for port in [p for p in self._tcp_servers if p not in wanted]:
            # close() stops listening at once; connections already open run on (as Go's listener close
            # leaves accepted conns). No wait_closed(): on Python >= 3.12.1 it waits for them to end,
            # which would stall every route refresh behind a long-lived connection.
            self._tcp_servers.pop(port).close()
        for port in wanted:
            if port in self._tcp_servers:
                continue
            try:
                self._tcp_servers[port] = await asyncio.start_server(
                    functools.partial(self.handle_tcp, port), self.tcp_host, port)
            except OSError as exc:
                log.error("tcp route port %d not served: %s", port, exc)

    # --- HTTP --------------------------------------------------------------------------------

    def _backends_for(self, route: Route) -> list[Backend]:
        return candidates(self.services.get(route.service, []), route.leader)

    async def handle_http(self, request: web.Request) -> web.StreamResponse:
        start_ms = int(time.time() * 1000)
        route = self.table.lookup(request.host, request.path)
        if route is None:
            return web.Response(status=404, text="Not Found\n")
        backends = self._backends_for(route)
        sticky = None
        if route.sticky and COOKIE_NAME in request.cookies:
            sticky = self.sealer.open(request.cookies[COOKIE_NAME])
        order = choose_backends(backends, sticky, self.inflight)[:MAX_ATTEMPTS]
        if not order:
            return web.Response(status=503, text="Service Unavailable\n")
        headers = self._forward_headers(request, start_ms)
        session = self._no_keepalive if route.disable_keep_alives else self._session
        assert session is not None
        for backend in order:
            self.inflight[backend.addr] = self.inflight.get(backend.addr, 0) + 1
            try:
                # The body streams (no size cap, no buffering); a failed dial has not read it yet,
                # so the next backend still gets all of it.
                upstream = await session.request(
                    request.method, f"http://{backend.addr}{request.rel_url}", headers=headers,
                    data=request.content if request.body_exists else None, allow_redirects=False)
            except (ClientConnectorError, ConnectionTimeoutError):
                self.inflight[backend.addr] -= 1
                continue  # only dial errors are retried, as in Flynn
            except (ClientError, asyncio.TimeoutError, OSError) as exc:
                self.inflight[backend.addr] -= 1
                log.warning("proxy error for route %s: %s", route.formatted_id, type(exc).__name__)
                return web.Response(status=503, text="Service Unavailable\n")
            try:
                return await self._relay(request, upstream, route, backend, sticky)
            finally:
                upstream.release()
                self.inflight[backend.addr] -= 1
        return web.Response(status=503, text="Service Unavailable\n")

    @staticmethod
    def _forward_headers(request: web.Request, start_ms: int) -> "CIMultiDict[str]":
        """End-to-end headers plus Flynn's X-Forwarded-*, X-Request-Start and X-Request-Id.

        Content-Length stays (the body streams as sent); chunked bodies are re-chunked."""
        # ``Expect`` too: the listener already answered ``100 Continue``; forwarding it would make
        # the client wait for a second 100 that HTTP/1.0 backends never send.
        hop = _hop_by_hop(request.headers) | {"expect"}
        headers: CIMultiDict[str] = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in hop)
        peer = request.remote or ""
        prior = ", ".join(headers.getall("X-Forwarded-For", []))  # several headers fold into one, as in Go
        headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
        headers["X-Forwarded-Proto"] = request.scheme
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        if sock:
            headers["X-Forwarded-Port"] = str(sock[1])
        headers["X-Request-Start"] = str(start_ms)
        if not REQUEST_ID_RE.match(headers.get("X-Request-Id", "")):
            headers["X-Request-Id"] = str(uuid.uuid4())
        return headers

    async def _relay(self, request: web.Request, upstream: Any, route: Route, backend: Backend,
                     sticky: str | None) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        hop = _hop_by_hop(upstream.headers)
        for key, value in upstream.headers.items():
            if key.lower() not in hop:
                response.headers.add(key, value)
        if route.sticky and backend.addr != sticky:
            response.headers.add("Set-Cookie", f"{COOKIE_NAME}={self.sealer.seal(backend.addr)}; Path=/")
        await response.prepare(request)
        async for chunk in upstream.content.iter_chunked(65536):
            await response.write(chunk)
        await response.write_eof()
        return response

    # --- TCP ---------------------------------------------------------------------------------

    async def handle_tcp(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Join the client to the first backend that answers; both sockets are closed at the end,
        and :meth:`stop` cancels open connections so none outlive the router."""
        task = asyncio.current_task()
        if task is not None:
            self._tcp_tasks.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            route = self.tcp_routes.get(port)
            order = choose_backends(self._backends_for(route), None, self.inflight)[:MAX_ATTEMPTS] if route else []
            for backend in order:
                host, _, bport = backend.addr.rpartition(":")
                try:
                    up_reader, connected = await asyncio.wait_for(
                        asyncio.open_connection(host, int(bport)), DIAL_TIMEOUT)
                except (OSError, asyncio.TimeoutError, ValueError):
                    continue
                up_writer = connected
                self.inflight[backend.addr] = self.inflight.get(backend.addr, 0) + 1
                try:
                    await asyncio.gather(_pipe(reader, connected), _pipe(up_reader, writer))
                finally:
                    self.inflight[backend.addr] -= 1
                return
        finally:
            if task is not None:
                self._tcp_tasks.discard(task)
            for stream in (writer, up_writer):
                if stream is not None:
                    stream.close()


def _hop_by_hop(headers: "CIMultiDictProxy[str] | CIMultiDict[str]") -> frozenset[str]:
    """RFC 7230 §6.1: the fixed hop-by-hop names plus every name listed in ``Connection``."""
    listed = {token.strip().lower() for value in headers.getall("Connection", []) for token in value.split(",")}
    return HOP_BY_HOP | {name for name in listed if name}


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close so the other side sees the end of the stream."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        if reader.at_eof():
            writer.close()


class RouterThread(LoopThread):
    """Run a :class:`Router` on its own event loop thread (tests, bench, the CLI)."""

    def __init__(self, router: Router) -> None:
        super().__init__("crhelper-router")
        self.router = router

    @property
    def http_port(self) -> int:
        return self.router.http_port

    async def startup(self) -> None:
        await self.router.start()

    async def cleanup(self) -> None:
        await self.router.stop()

    def refresh(self) -> None:
        """Force a reload now (tests use it instead of waiting a poll interval)."""
        self.run(self.router.refresh())


async def serve_forever(router: Router, on_ready: Callable[[], None] | None = None) -> None:
    """CLI entry: start and wait until cancelled (Ctrl-C). A failed start (port in use) still
    closes whatever was opened, then raises the ``OSError``."""
    try:
        await router.start()
        if on_ready is not None:
            on_ready()
        await asyncio.Event().wait()
    finally:
        await router.stop()
