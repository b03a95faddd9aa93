"""``crhelper router serve``: the local reverse proxy, matching like Flynn's router (spec §9).

Plain HTTP/1.1 requests on the HTTP listeners take the fast path (``fastpath``: raw asyncio
protocols and pooled backend connections); everything else, and the HTTPS listener, is served by
aiohttp's low-level server, whose client forwards; Upgrade requests
(WebSocket and others) get the backend's 101 and are then spliced byte for byte; TCP routes get one
asyncio listener each. A poll loop watches the repository and the registry file, so route and
backend changes apply without a restart. :func:`serve_forever` runs ``CRHELPER_ROUTER_WORKERS``
processes (default: the CPU count) on the same ports with SO_REUSEPORT.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import re
import ssl
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

from aiohttp import (ClientConnectorError, ClientError, ClientResponse, ClientSession, ClientTimeout,
                     ConnectionTimeoutError, DummyCookieJar, TCPConnector, web)
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from crhelper.logs import get_logger
from crhelper.servers import LoopThread, site_port

from .matching import NOT_FOUND_BODY, UNAVAILABLE_BODY, Backend, RouteTable, attempt_order, candidates, ordered_backends
from .model import TCP, Route
from .registry import ServiceRegistry
from .repository import RouteRepository
from .fastpath import DIAL_TIMEOUT, MAX_ATTEMPTS, FastPath, _request_id
from .sticky import COOKIE_NAME, CookieSealer

log = get_logger("routes.proxy")

HOP_BY_HOP = frozenset(
    h.lower() for h in ("Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
                        "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade")
)
REQUEST_ID_RE = re.compile(r"^[a-zA-Z0-9+/=-]{20,200}$")
#: Flynn's ``ResponseHeaderTimeout`` (``router/proxy/transport.go``: ten minutes): how long a backend
#: may take to send its response headers. Once they are in, the body has no timeout, as in Flynn.
RESPONSE_TIMEOUT = 600.0
#: Only these are dropped from an Upgrade request (Flynn's ``hopHeaders``): Connection and Upgrade
#: must reach the backend.
UPGRADE_HOP_BY_HOP = frozenset(("te", "trailers", "transfer-encoding"))
#: A spliced (upgraded) connection stops reading one side while the other has this much unsent.
SPLICE_HIGH_WATER = 1 << 20
#: Responses with a Content-Length up to this are read whole and sent with their headers at once.
SMALL_BODY = 64 * 1024
#: On stop, in-flight requests get this long to finish before their connections are closed.
SHUTDOWN_GRACE = 1.0
#: ``0`` turns the plain-HTTP fast path off (every request through aiohttp; for comparisons).
FAST_PATH_ENV = "CRHELPER_ROUTER_FAST_PATH"


class Router:
    """The proxy state and handlers; run it inside an event loop (see :class:`RouterThread`).

    ``default_certificate`` is a ``(cert PEM, key PEM)`` pair served when the TLS client sends no
    name, or names a route that has no certificate of its own (Flynn's ``TLSCERT``/``TLSKEY``);
    None: ``$CRHELPER_ROUTER_TLS_CERT`` / ``$CRHELPER_ROUTER_TLS_KEY`` (files), else a self-signed
    one for ``localhost`` made at start. ``additional_http_ports`` are listeners whose routes are
    keyed by their own port, as Flynn's ``ADDITIONAL_HTTP_PORTS``. ``reuse_port`` binds with
    ``SO_REUSEPORT`` so several router processes share the ports (see :func:`serve_forever`).
    ``fast_path`` (None: unless ``$CRHELPER_ROUTER_FAST_PATH`` is ``0``) serves plain HTTP/1.1
    requests on raw protocols (:mod:`handlers.routes.fastpath`), the rest through aiohttp."""

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
        additional_http_ports: Sequence[int] = (),
        default_certificate: tuple[str, str] | None = None,
        workers: int | None = None,
        reuse_port: bool = False,
        fast_path: bool | None = None,
    ) -> None:
        self.repo, self.registry, self.sealer = repo, registry, sealer
        self.host, self.http_port, self.tcp_host = host, http_port, tcp_host
        self.https_port = https_port
        self.response_timeout = response_timeout
        self.additional_http_ports = list(additional_http_ports)
        self.default_certificate = default_certificate
        self.workers = workers
        self.reuse_port = reuse_port
        self.fast_path = fast_path if fast_path is not None else os.environ.get(FAST_PATH_ENV, "1") != "0"
        self._fast: FastPath | None = None
        self._default_ports: frozenset[int] = frozenset()
        self._tls_contexts: dict[str, ssl.SSLContext] = {}
        self.poll_interval = poll_interval
        self.table = RouteTable([])
        self.services: dict[str, list[Backend]] = {}
        self.inflight: dict[str, int] = {}
        self.tcp_routes: dict[int, Route] = {}
        self._tcp_servers: dict[int, asyncio.base_events.Server] = {}
        self._version = -1
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._tcp_tasks: set[asyncio.Task[Any]] = set()
        self._runner: web.ServerRunner | None = None
        self._poller: asyncio.Task[None] | None = None
        self._session: ClientSession | None = None
        self._no_keepalive: ClientSession | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        # No read timeout: the response-header timeout is :meth:`_send`'s, and bodies have none.
        timeout = ClientTimeout(total=None, sock_connect=DIAL_TIMEOUT, sock_read=None)
        self._session = ClientSession(connector=TCPConnector(limit=0), timeout=timeout,
                                      auto_decompress=False, cookie_jar=DummyCookieJar(), skip_auto_headers=("User-Agent",))
        self._no_keepalive = ClientSession(connector=TCPConnector(limit=0, force_close=True), timeout=timeout,
                                           auto_decompress=False, cookie_jar=DummyCookieJar(),
                                           skip_auto_headers=("User-Agent",))
        await self.refresh()
        # aiohttp's low-level server: every request comes here, with no URL dispatch or middlewares.
        self._runner = web.ServerRunner(web.Server(self.handle_http, access_log=None), shutdown_timeout=SHUTDOWN_GRACE)
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        self._fast = FastPath(self, server) if self.fast_path else None
        self.http_port = await self._listen(self.http_port, None)
        if self.https_port is not None:
            self.https_port = await self._listen(self.https_port, self._server_tls_context())
        self._default_ports = frozenset(p for p in (self.http_port, self.https_port) if p is not None)
        self.additional_http_ports = [await self._listen(p, None) for p in self.additional_http_ports]
        self._poller = asyncio.create_task(self._poll_loop())

    async def _listen(self, port: int, ssl_context: ssl.SSLContext | None) -> int:
        """Bind one listener: the fast path's for plain HTTP, else aiohttp's."""
        assert self._runner is not None
        if ssl_context is None and self._fast is not None:
            return await self._fast.listen(self.host, port, self.reuse_port)
        site = web.TCPSite(self._runner, self.host, port, ssl_context=ssl_context,
                           reuse_port=self.reuse_port or None)
        await site.start()
        return site_port(site) or port

    def _server_tls_context(self) -> ssl.SSLContext:
        """The listener's context holds the default certificate; the SNI callback switches to the
        route's own (Flynn: the route for ``(servername, port, "/")``). A name with no route fails
        the handshake, as Flynn's ``errMissingTLS`` does."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        # Resolved once, so worker processes serve the same default pair.
        self.default_certificate = (self.default_certificate or default_certificate_from_env()
                                    or self_signed_pair("localhost"))
        _load_pair(context, *self.default_certificate)
        context.sni_callback = self._sni
        return context

    def _sni(self, sslobj: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> int | None:
        if server_name is None:
            return None  # no name: the default certificate
        route = self.table.lookup(server_name, "/")
        if route is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        chosen = self._tls_contexts.get(route.certificate.id) if route.certificate is not None else None
        if chosen is not None:
            sslobj.context = chosen
        return None

    def _load_tls_contexts(self, routes: list[Route]) -> None:
        """One server context per certificate id."""
        wanted = {r.certificate.id: r.certificate for r in routes if r.certificate is not None and r.certificate.id}
        contexts: dict[str, ssl.SSLContext] = {}
        for cert_id, cert in wanted.items():
            if cert_id in self._tls_contexts:
                contexts[cert_id] = self._tls_contexts[cert_id]
                continue
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                _load_pair(context, cert.cert, cert.key)
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
        if self._fast is not None:
            await self._fast.stop()
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

    async def refresh(self, *, force: bool = False) -> None:
        """Reload routes when the change counter moved, and backends when the registry changed.

        Both files are stat-ed first on the loop (microseconds); the threads that read them run only
        when one changed, so an idle poll costs the request path nothing."""
        stamp = _stamp(self.registry.path, self.repo.path, self.repo.path.with_name(self.repo.path.name + "-wal"))
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
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
                    functools.partial(self.handle_tcp, port), self.tcp_host, port,
                    reuse_port=self.reuse_port or None)
            except OSError as exc:
                log.error("tcp route port %d not served: %s", port, exc)

    # --- HTTP --------------------------------------------------------------------------------

    def _backends_for(self, route: Route) -> list[Backend]:
        return candidates(self.services.get(route.service, []), route.leader)

    async def handle_http(self, request: web.BaseRequest) -> web.StreamResponse:
        start_ms = int(time.time() * 1000)
        listener = _local_port(request)
        route = self.table.lookup(request.host, request.path,
                                  0 if listener is None or listener in self._default_ports else listener)
        if route is None:
            return web.Response(status=404, text=NOT_FOUND_BODY)
        backends = self._backends_for(route)
        sticky = None
        if route.sticky and COOKIE_NAME in request.cookies:
            sticky = self.sealer.open(request.cookies[COOKIE_NAME])
        if _is_upgrade(request.headers):
            return await self._upgrade(request, route, backends, sticky, start_ms, listener)
        headers = self._forward_headers(request, start_ms, listener, UPGRADE_HOP_BY_HOP | _hop_by_hop(request.headers))
        session = self._no_keepalive if route.disable_keep_alives else self._session
        assert session is not None
        for backend in islice(attempt_order(backends, sticky, self.inflight), MAX_ATTEMPTS):
            self.inflight[backend.addr] = self.inflight.get(backend.addr, 0) + 1
            try:
                # The body streams (no size cap, no buffering); a failed dial has not read it yet,
                # so the next backend still gets all of it.
                upstream = await self._send(session, request, backend, headers)
            except (ClientConnectorError, ConnectionTimeoutError):
                self.inflight[backend.addr] -= 1
                continue  # only dial errors are retried, as in Flynn
            except (ClientError, asyncio.TimeoutError, OSError) as exc:
                self.inflight[backend.addr] -= 1
                return self._failed(request, route, exc)
            except BaseException:  # cancelled (the router stopping): no longer in flight either
                self.inflight[backend.addr] -= 1
                raise
            try:
                return await self._relay(request, upstream, route, backend, sticky)
            except (ConnectionError, ClientError, asyncio.TimeoutError) as exc:
                return self._failed(request, route, exc)
            finally:
                upstream.release()
                self.inflight[backend.addr] -= 1
        return web.Response(status=503, text=UNAVAILABLE_BODY)

    async def _send(self, session: ClientSession, request: web.BaseRequest, backend: Backend,
                    headers: "CIMultiDict[str]") -> ClientResponse:
        """Send the request to one backend and wait for its response headers, at most
        ``response_timeout`` after the request body is written (Flynn's ResponseHeaderTimeout);
        the body is the caller's to read."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        expired: list[bool] = []
        timers: list[asyncio.TimerHandle] = []

        def expire() -> None:
            expired.append(True)
            task.cancel()

        def arm() -> None:
            timers.append(loop.call_later(self.response_timeout, expire))

        data = _body_then(request.content, arm) if request.body_exists else None
        if data is None:
            arm()
        try:
            return await session.request(
                request.method, URL(f"http://{backend.addr}{request.raw_path}", encoded=True), headers=headers,
                data=data, allow_redirects=False)
        except asyncio.CancelledError:
            if not expired:
                raise
            uncancel = getattr(task, "uncancel", None)  # Python >= 3.11 counts cancellations
            if uncancel is not None:
                uncancel()
            raise asyncio.TimeoutError("no response headers in time") from None
        finally:
            for timer in timers:
                timer.cancel()

    def _failed(self, request: web.BaseRequest, route: Route, exc: BaseException) -> web.Response:
        """A client that went away is routine (Flynn logs a 499): a debug line; anything else is a
        503 and a warning, without a traceback."""
        if _client_gone(request):
            log.debug("client went away during a request for route %s: %s", route.formatted_id, type(exc).__name__)
            return web.Response(status=499)
        log.warning("proxy error for route %s: %s", route.formatted_id, type(exc).__name__)
        return web.Response(status=503, text=UNAVAILABLE_BODY)

    @staticmethod
    def _forward_headers(request: web.BaseRequest, start_ms: int, listener: int | None,
                         hop: frozenset[str]) -> "CIMultiDict[str]":
        """End-to-end headers plus Flynn's X-Forwarded-* (``router/handlers.go``: prior values kept,
        several headers folded into one, ours appended), X-Request-Start and X-Request-Id.

        Content-Length stays (the body streams as sent); chunked bodies are re-chunked."""
        # ``Expect`` too: the listener already answered ``100 Continue``; forwarding it would make
        # the client wait for a second 100 that HTTP/1.0 backends never send.
        hop = hop | {"expect"}
        headers: CIMultiDict[str] = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in hop)
        for name, ours in (("X-Forwarded-For", request.remote or ""), ("X-Forwarded-Proto", request.scheme),
                           ("X-Forwarded-Port", "" if listener is None else str(listener))):
            prior = ", ".join(headers.getall(name, ()))
            headers[name] = f"{prior}, {ours}" if prior else ours
        headers["X-Request-Start"] = str(start_ms)
        if not REQUEST_ID_RE.match(headers.get("X-Request-Id", "")):
            headers["X-Request-Id"] = _request_id()
        return headers

    def _response_head(self, upstream: ClientResponse, route: Route, backend: Backend, sticky: str | None,
                       hop: frozenset[str]) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        self._copy_head(response, upstream, route, backend, sticky, hop)
        return response

    def _copy_head(self, response: web.StreamResponse, upstream: ClientResponse, route: Route, backend: Backend,
                   sticky: str | None, hop: frozenset[str]) -> None:
        headers = response.headers
        for key, value in upstream.headers.items():
            if key.lower() not in hop:
                headers.add(key, value)
        if route.sticky and backend.addr != sticky:
            headers.add("Set-Cookie", f"{COOKIE_NAME}={self.sealer.seal(backend.addr)}; Path=/")

    async def _relay(self, request: web.BaseRequest, upstream: ClientResponse, route: Route, backend: Backend,
                     sticky: str | None) -> web.StreamResponse:
        length = upstream.content_length
        if length is not None and length <= SMALL_BODY and request.method != "HEAD":
            # Small bodies go out with the headers in one write: a send fewer per request.
            small = web.Response(status=upstream.status, reason=upstream.reason, body=await upstream.read())
            self._copy_head(small, upstream, route, backend, sticky, _hop_by_hop(upstream.headers))
            return small
        response = self._response_head(upstream, route, backend, sticky, _hop_by_hop(upstream.headers))
        await response.prepare(request)
        async for chunk in upstream.content.iter_chunked(65536):
            await response.write(chunk)
        await response.write_eof()
        return response

    # --- Upgrade (WebSocket and others) -------------------------------------------------------

    async def _upgrade(self, request: web.BaseRequest, route: Route, backends: list[Backend], sticky: str | None,
                       start_ms: int, listener: int | None) -> web.StreamResponse:
        """Flynn's ``serveUpgrade``: dial the backends in :func:`ordered_backends` order, send the
        request with its Connection/Upgrade headers; a 101 is relayed and both connections are then
        spliced byte for byte until each side has ended; any other answer is relayed with
        ``Connection: close``."""
        assert self._no_keepalive is not None
        headers = self._forward_headers(request, start_ms, listener, UPGRADE_HOP_BY_HOP)
        for backend in ordered_backends(backends, sticky):
            try:
                upstream = await self._send(self._no_keepalive, request, backend, headers)
            except (ClientConnectorError, ConnectionTimeoutError):
                continue
            except (ClientError, asyncio.TimeoutError, OSError) as exc:
                return self._failed(request, route, exc)
            break
        else:
            return web.Response(status=503, text=UNAVAILABLE_BODY)
        try:
            if upstream.status != 101:
                response = await self._relay_closing(request, upstream, route, backend, sticky)
                return response
            hop = UPGRADE_HOP_BY_HOP | (frozenset() if _is_upgrade(upstream.headers) else _hop_by_hop(upstream.headers))
            response = self._response_head(upstream, route, backend, sticky, hop)
            await response.prepare(request)
            await _splice(request, upstream)
            return response
        except (ConnectionError, ClientError, asyncio.TimeoutError) as exc:
            return self._failed(request, route, exc)
        finally:
            upstream.close()

    async def _relay_closing(self, request: web.BaseRequest, upstream: ClientResponse, route: Route, backend: Backend,
                             sticky: str | None) -> web.StreamResponse:
        response = self._response_head(upstream, route, backend, sticky, _hop_by_hop(upstream.headers))
        response.force_close()
        response.headers["Connection"] = "close"
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
            order = ordered_backends(self._backends_for(route), None) if route else []  # Flynn's Connect
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
    if "Connection" not in headers:
        return HOP_BY_HOP
    listed = {token.strip().lower() for value in headers.getall("Connection", []) for token in value.split(",")}
    return HOP_BY_HOP | {name for name in listed if name}


async def _body_then(content: Any, done: Callable[[], None]) -> Any:
    """Stream a request body to the backend, then call ``done`` (the body is written)."""
    async for chunk in content.iter_chunked(65536):
        yield chunk
    done()


def _stamp(*paths: Path) -> tuple[tuple[int, int, int], ...]:
    """(mtime ns, size, inode) of each file, zeros for a missing one: changes on every write."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((0, 0, 0))
    return tuple(out)


def _is_upgrade(headers: "CIMultiDictProxy[str] | CIMultiDict[str]") -> bool:
    """Flynn's ``isConnectionUpgrade``: ``upgrade`` among the first Connection header's tokens."""
    value = headers.get("Connection")
    return value is not None and any(t.strip().lower() == "upgrade" for t in value.split(","))


def _local_port(request: web.BaseRequest) -> int | None:
    """The port of the listener the request came in on."""
    transport = request.transport
    sock = transport.get_extra_info("sockname") if transport is not None else None
    return int(sock[1]) if sock else None


def _client_gone(request: web.BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class _SpliceSide:
    """Receives one side's bytes after a 101 (as the parser the aiohttp protocols accept after an
    upgrade) and writes them to the other side's transport, pausing the source while the
    destination has more than :data:`SPLICE_HIGH_WATER` unsent."""

    def __init__(self, source: asyncio.Transport, dest: asyncio.Transport) -> None:
        self.source, self.dest = source, dest
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._paused = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if not self.dest.is_closing():
            self.dest.write(data)
            if not self._paused and self.dest.get_write_buffer_size() > SPLICE_HIGH_WATER:
                self._paused = True
                self.source.pause_reading()
                asyncio.get_running_loop().call_later(0.005, self._resume_when_drained)
        return False, b""

    def _resume_when_drained(self) -> None:
        if self.dest.is_closing() or self.source.is_closing():
            return
        if self.dest.get_write_buffer_size() > SPLICE_HIGH_WATER // 2:
            asyncio.get_running_loop().call_later(0.005, self._resume_when_drained)
            return
        self._paused = False
        self.source.resume_reading()

    def feed_eof(self) -> None:
        """The source ended: half-close the destination (Flynn's ``closeWrite``)."""
        if not self.dest.is_closing():
            if self.dest.can_write_eof():
                self.dest.write_eof()
            else:
                self.dest.close()
        if not self.done.done():
            self.done.set_result(None)

    def set_exception(self, exc: BaseException, cause: BaseException | None = None) -> None:
        self.feed_eof()

    def is_eof(self) -> bool:
        return self.done.done()


async def _splice(request: web.BaseRequest, upstream: ClientResponse) -> None:
    """Pipe bytes both ways between the client and the backend of an upgraded connection until
    both directions have ended (Flynn's ``joinConns``), then close both."""
    connection = upstream.connection
    client, server_proto = request.transport, request.protocol
    if connection is None or connection.transport is None or connection.protocol is None or client is None:
        raise ConnectionResetError("a side of the upgraded connection is gone")
    backend = connection.transport
    assert isinstance(backend, asyncio.Transport) and isinstance(client, asyncio.Transport)
    to_backend, to_client = _SpliceSide(client, backend), _SpliceSide(backend, client)
    connection.protocol.read_timeout = None
    connection.protocol.set_parser(to_client, to_client)
    server_proto.set_parser(to_backend)  # type: ignore[arg-type]  # duck-typed like WebSocketReader
    try:
        await asyncio.gather(to_backend.done, to_client.done)
    finally:
        backend.close()
        client.close()


def _load_pair(context: ssl.SSLContext, cert: str, key: str) -> None:
    """``ssl`` loads key pairs only from files: PEMs pass through a private temp dir."""
    with tempfile.TemporaryDirectory(prefix="crhelper-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        for path, text in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text + "\n")
        context.load_cert_chain(cert_path, key_path)


TLS_CERT_ENV, TLS_KEY_ENV = "CRHELPER_ROUTER_TLS_CERT", "CRHELPER_ROUTER_TLS_KEY"


def default_certificate_from_env(environ: "os._Environ[str] | dict[str, str] | None" = None) -> tuple[str, str] | None:
    """The router's default pair from the PEM files named by ``$CRHELPER_ROUTER_TLS_CERT`` and
    ``$CRHELPER_ROUTER_TLS_KEY``; None when neither is set. One without the other is an error."""
    env = os.environ if environ is None else environ
    cert_path, key_path = env.get(TLS_CERT_ENV, ""), env.get(TLS_KEY_ENV, "")
    if not cert_path and not key_path:
        return None
    if not (cert_path and key_path):
        raise ValueError(f"{TLS_CERT_ENV} and {TLS_KEY_ENV}: set both (PEM files) or neither")
    with open(cert_path, encoding="utf-8") as cert_file, open(key_path, encoding="utf-8") as key_file:
        return cert_file.read(), key_file.read()


def self_signed_pair(name: str) -> tuple[str, str]:
    """A throw-away self-signed (cert PEM, key PEM) for ``name``: the default certificate when none
    is configured, so a route without its own certificate still completes the handshake."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


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
        await _cancel_leftovers()

    def refresh(self) -> None:
        """Force a reload now (tests use it instead of waiting a poll interval)."""
        self.run(self.router.refresh(force=True))


async def _cancel_leftovers() -> None:
    """Cancel and await the tasks still on this loop (as ``asyncio.run`` does before closing its
    loop): a handler task left pending would be garbage-collected after the loop closed, which
    asyncio reports as "Task was destroyed but it is pending"."""
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)


WORKERS_ENV = "CRHELPER_ROUTER_WORKERS"


def worker_count(explicit: int | None = None, environ: "os._Environ[str] | dict[str, str] | None" = None) -> int:
    """Router processes sharing the ports: ``explicit``, else ``$CRHELPER_ROUTER_WORKERS``, else the
    CPU count. One event loop is one core; more processes on SO_REUSEPORT sockets use the others."""
    if explicit is not None:
        count = explicit
    else:
        raw = (os.environ if environ is None else environ).get(WORKERS_ENV, "")
        try:
            count = int(raw) if raw else (os.cpu_count() or 1)
        except ValueError:
            raise ValueError(f"{WORKERS_ENV}: must be a whole number of router processes (1 or more)") from None
    if not 1 <= count <= 256:
        raise ValueError(f"{WORKERS_ENV}: must be 1-256 router processes, got {count}")
    return count


def _worker_config(router: Router) -> dict[str, Any]:
    """What a worker process needs to build the same router on the ports already bound."""
    return {
        "db": str(router.repo.path), "default_domain": router.repo.default_domain,
        "services": str(router.registry.path), "cookie_key": base64.b64encode(router.sealer.key).decode(),
        "host": router.host, "http_port": router.http_port, "https_port": router.https_port,
        "tcp_host": router.tcp_host, "poll_interval": router.poll_interval,
        "response_timeout": router.response_timeout, "additional_http_ports": router.additional_http_ports,
        "default_certificate": list(router.default_certificate) if router.default_certificate else None,
        "fast_path": router.fast_path,
    }


def worker_main() -> None:
    """A router worker process: its config arrives as JSON on stdin (the cookie key is never on a
    command line or in the environment); it ends when stdin closes (the parent went away)."""
    from .registry import ServiceRegistry as Registry
    from .repository import RouteRepository as Repository

    line = sys.stdin.readline()
    if not line:
        return  # the parent stopped before this worker got its config
    config = json.loads(line)
    cert = config["default_certificate"]
    router = Router(Repository(config["db"], default_domain=config["default_domain"]), Registry(config["services"]),
                    CookieSealer(base64.b64decode(config["cookie_key"])), host=config["host"],
                    http_port=config["http_port"], https_port=config["https_port"], tcp_host=config["tcp_host"],
                    poll_interval=config["poll_interval"], response_timeout=config["response_timeout"],
                    additional_http_ports=config["additional_http_ports"],
                    default_certificate=tuple(cert) if cert else None, workers=1, reuse_port=True,
                    fast_path=config.get("fast_path"))

    async def run() -> None:
        gone = asyncio.Event()
        asyncio.get_running_loop().add_reader(sys.stdin.fileno(), gone.set)
        await router.start()
        try:
            await gone.wait()
        finally:
            await router.stop()

    try:
        event_loop_runner()(run())
    except KeyboardInterrupt:
        pass


def event_loop_runner() -> Callable[[Any], Any]:
    """``uvloop.run`` when uvloop is installed (a faster loop, same behaviour), else ``asyncio.run``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run  # type: ignore[no-any-return]


async def _spawn_workers(router: Router, count: int) -> list[asyncio.subprocess.Process]:
    config = (json.dumps(_worker_config(router)) + "\n").encode()
    code = "from handlers.routes.proxy import worker_main; worker_main()"
    procs = []
    for _ in range(count):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None
        proc.stdin.write(config)
        await proc.stdin.drain()
        procs.append(proc)
    return procs


async def _stop_workers(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.close()  # the worker stops when its stdin ends
    for proc in procs:
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


async def serve_forever(router: Router, on_ready: Callable[[], None] | None = None) -> None:
    """CLI entry: start and wait until cancelled (Ctrl-C). With more than one worker
    (:func:`worker_count`), this process binds the ports with SO_REUSEPORT and starts the other
    workers on them; the kernel spreads connections over all. A failed start (port in use) still
    closes whatever was opened, then raises the ``OSError``."""
    workers = worker_count(router.workers)
    router.reuse_port = router.reuse_port or workers > 1
    procs: list[asyncio.subprocess.Process] = []
    try:
        await router.start()
        procs = await _spawn_workers(router, workers - 1)
        if on_ready is not None:
            on_ready()
        await _supervise(router, procs)
    finally:
        await _stop_workers(procs)
        await router.stop()


async def _supervise(router: Router, procs: list[asyncio.subprocess.Process]) -> None:
    """Serve until cancelled; a worker that ends is replaced (after a second, so a worker that
    cannot start does not spin)."""
    if not procs:
        await asyncio.Event().wait()
    waits = {asyncio.ensure_future(proc.wait()): proc for proc in procs}
    try:
        while True:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                proc = waits.pop(task)
                log.warning("router worker %d ended (exit %s); starting another", proc.pid, proc.returncode)
                await asyncio.sleep(1.0)
                [new] = await _spawn_workers(router, 1)
                procs[procs.index(proc)] = new
                waits[asyncio.ensure_future(new.wait())] = new
    finally:
        for task in waits:
            task.cancel()
