"""The built-in router's plain-HTTP fast path: raw asyncio protocols for HTTP/1.1 keep-alive requests.

aiohttp's server and client cost the proxy most of its time per request (header multidicts,
stream readers, a client session's request machinery). Most proxied requests need none of that:
an HTTP/1.1 request with no body or a small Content-Length one, to a plain route. Those are
framed here on the bytes (the head is parsed once, the body passes through), forwarded over a
pool of keep-alive backend connections, and the response is relayed as it arrives (framed by
Content-Length, chunked, or the backend closing). The common case (a pooled connection, a whole
response with a Content-Length) runs in the protocol callbacks without a task; a dial, a
streamed response or a retry continues in a task for that request.

Everything else is handed, at a request boundary, to aiohttp's server for the rest of that
connection: Upgrade/WebSocket requests, chunked or large request bodies, ``Expect``, HTTP/1.0,
sticky and no-keep-alive routes, and anything unusual in the head (encoded or dot paths, folded
or repeated framing headers, a missing Host). TLS listeners stay on aiohttp entirely.
"""

from __future__ import annotations

import asyncio
import re
import time
from itertools import islice
import random
import weakref
from typing import Any, Callable, Protocol

from crhelper.logs import get_logger

from .matching import NOT_FOUND_BODY, UNAVAILABLE_BODY, Backend, RouteTable, attempt_order
from .model import Route

log = get_logger("routes.proxy")

#: Request heads larger than this go to aiohttp (which answers 431/400 as it does today).
MAX_HEAD = 16 * 1024
#: Request bodies up to this are read whole first (so a stale pooled connection can be retried).
MAX_BODY = 64 * 1024
#: Idle backend connections kept per backend address.
POOL_SIZE = 128
#: Request headers never forwarded (RFC 7230 §6.1 plus ``Expect``; see ``proxy.HOP_BY_HOP``).
HOP = frozenset((b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
                 b"proxy-connection", b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade",
                 b"expect"))
#: Request headers that send a request to aiohttp, whatever their value.
HAND_OVER = frozenset((b"transfer-encoding", b"expect", b"upgrade"))
FORWARDED = (b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-port")
NO_BODY_STATUS = frozenset((204, 304))
_UNSAFE_PATH = (b"%", b"/.", b"#")
#: ``proxy.REQUEST_ID_RE`` on bytes: a client's X-Request-Id that is kept.
REQUEST_ID = re.compile(rb"^[a-zA-Z0-9+/=-]{20,200}$")

_HandOver = object()  # the request is aiohttp's
#: Flynn: four attempts, each on another backend, after a failed dial of one second.
MAX_ATTEMPTS = 4
DIAL_TIMEOUT = 1.0


class RouterState(Protocol):
    """What the fast path reads of :class:`handlers.routes.proxy.Router` (no import: no cycle)."""

    table: RouteTable
    inflight: dict[str, int]
    response_timeout: float
    _default_ports: frozenset[int]

    def _backends_for(self, route: Route) -> list[Backend]: ...


def _request_id() -> str:
    """A version-4 UUID string from the non-cryptographic generator: an X-Request-Id needs to be
    unique, not secret, and ``uuid4`` costs a ``getrandom`` system call per request."""
    h = f"{random.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


class Closed(Exception):
    """The backend connection ended (or failed) before the response was complete."""


class FastPath:
    """Listens for plain HTTP on behalf of a :class:`~handlers.routes.proxy.Router`.

    ``fallback`` makes aiohttp's protocol for a connection handed over."""

    def __init__(self, router: "RouterState", fallback: Callable[[], asyncio.Protocol]) -> None:
        self.router = router
        self.fallback = fallback
        self.pools: dict[str, list[Upstream]] = {}
        self.clients: set[Client] = set()
        #: Connections handed over to aiohttp: still this server's transports, so since Python
        #: 3.12.1 ``wait_closed`` waits for them too; stop aborts them like its own.
        self.handed: "weakref.WeakSet[asyncio.Transport]" = weakref.WeakSet()
        self.servers: list[asyncio.base_events.Server] = []

    async def listen(self, host: str, port: int, reuse_port: bool) -> int:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Client(self), host, port, reuse_port=reuse_port or None)
        self.servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, end every connection and its task (none is left pending on the loop)."""
        for server in self.servers:
            server.close()
        tasks = [c.task for c in self.clients if c.task is not None and not c.task.done()]
        for client in list(self.clients):
            client.abort()
        for transport in list(self.handed):
            if not transport.is_closing():
                transport.abort()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for pool in self.pools.values():
            for upstream in pool:
                upstream.close()
        self.pools.clear()
        for server in self.servers:
            await server.wait_closed()
        self.servers.clear()

    # --- backend connections ---------------------------------------------------------------

    def idle(self, addr: str) -> "Upstream | None":
        pool = self.pools.get(addr)
        while pool:
            upstream = pool.pop()
            if not upstream.closed:
                return upstream
        return None

    def give_back(self, upstream: "Upstream") -> None:
        pool = self.pools.setdefault(upstream.addr, [])
        if upstream.closed or len(pool) >= POOL_SIZE:
            upstream.close()
            return
        upstream.owner = None
        pool.append(upstream)

    async def dial(self, addr: str, owner: "Client") -> "Upstream":
        host, _, port = addr.rpartition(":")
        loop = asyncio.get_running_loop()
        _, upstream = await asyncio.wait_for(
            loop.create_connection(lambda: Upstream(addr), host.strip("[]"), int(port)), DIAL_TIMEOUT)
        upstream.owner = owner
        return upstream


class Upstream(asyncio.Protocol):
    """One keep-alive connection to a backend; wakes the client connection using it."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.buf = bytearray()
        self.closed = False
        self.eof = False
        self.owner: Client | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.owner is None:  # an idle connection spoke: it cannot be reused
            self.close()
            return
        self.buf += data
        self.owner.upstream_news()

    def eof_received(self) -> bool:
        self.eof = True
        if self.owner is not None:
            self.owner.upstream_news()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.eof = True
        if self.owner is not None:
            self.owner.upstream_news()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Request:
    """One request read off a client connection, ready to send (its head already rewritten)."""

    __slots__ = ("route", "data", "is_head", "close", "replayable", "upstream", "timer", "deadline")

    def __init__(self, route: Any, data: bytes, is_head: bool, close: bool, replayable: bool) -> None:
        self.route, self.data, self.is_head, self.close, self.replayable = route, data, is_head, close, replayable
        self.upstream: Upstream | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0


class Client(asyncio.Protocol):
    """One client connection. Requests are served one at a time (pipelined ones wait their turn).

    The common case runs in the protocol callbacks with no task: a complete request on a pooled
    backend connection whose response arrives whole with a Content-Length. Anything else (a dial,
    a streamed, chunked or 1xx response, a failure to retry) continues in a task, which hands the
    connection back to the callbacks when its request is done."""

    def __init__(self, fast: FastPath) -> None:
        self.fast = fast
        self.port = 0  # the listener's, from the socket
        self.buf = bytearray()
        self.gone = False
        self.eof = False
        self.task: asyncio.Task[None] | None = None
        self.pending: _Request | None = None  # a request sent from the callbacks, its answer awaited there
        self.transport: asyncio.Transport | None = None
        self.upstream: Upstream | None = None
        self.peer = ""
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._handed = False
        self._counted: str | None = None  # the backend address this request counts as in flight on
        self._forwarded = b""

    # --- protocol callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self.peer = str(peer[0]) if peer else ""
        self.port = int(local[1]) if local else 0
        #: Flynn's X-Forwarded-* when the client sent none (the usual case): the same for every request
        self._forwarded = (b"X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Port: %d\r\n"
                           % (self.peer.encode(), self.port))
        self.fast.clients.add(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._client_news()

    def eof_received(self) -> bool:
        self.eof = True
        self._client_news()
        return True  # keep the write side open for a response in flight

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = self.eof = True
        self.fast.clients.discard(self)
        request = self.pending
        if request is not None:
            self._drop_pending()
            log.debug("client went away during a request for route %s", request.route.formatted_id)
        self.wake()

    def pause_writing(self) -> None:
        self._paused = True
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def _client_news(self) -> None:
        if self.task is not None:
            self.wake()
        elif self.pending is None and not self._handed:
            self._guarded(self._pump)

    def upstream_news(self) -> None:
        """The backend connection in use got data, EOF or closed."""
        if self.pending is not None:
            self._guarded(self._on_upstream)
        else:
            self.wake()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def abort(self) -> None:
        self.gone = True
        self._drop_pending()
        if self.transport is not None and not self._handed:
            self.transport.abort()
        if self.upstream is not None:
            self.upstream.close()

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception:
            log.exception("router fast path failed; connection closed")
            self.abort()

    async def _wait(self, deadline: float | None = None) -> bool:
        """Until either side has news; False when ``deadline`` (loop time) passed first."""
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = loop.call_at(deadline, self.wake) if deadline is not None else None
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        return deadline is None or loop.time() < deadline

    # --- requests, in the callbacks -----------------------------------------------------------

    def _pump(self) -> None:
        """Serve the complete requests in the buffer while each can be answered here."""
        while self.task is None and self.pending is None and not self.gone and not self._handed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if self.eof or len(self.buf) > MAX_HEAD:
                    if self.buf:
                        self._hand_over()  # aiohttp answers a bad or unfinished head its way
                    elif self.transport is not None:
                        self.transport.close()
                return
            request = self._take(end)
            if request is None:  # the body is still coming
                if self.eof and self.transport is not None:
                    self.transport.close()
                return
            if request is _HandOver:
                self._hand_over()
                return
            keep = self._start(request)
            if keep is False:
                if self.transport is not None:
                    self.transport.close()
                return
            if keep is None:
                return  # the answer comes later

    def _start(self, request: _Request) -> bool | None:
        """Answer 404/503 at once, send on a pooled connection (None: the answer comes in the
        callbacks), or leave it to a task (None)."""
        router = self.fast.router
        if request.route is None:
            return self._reply(404, b"Not Found", NOT_FOUND_BODY, request.close)
        backends: list[Backend] = router._backends_for(request.route)
        if not backends:
            return self._reply(503, b"Service Unavailable", UNAVAILABLE_BODY, request.close)
        backend = next(iter(attempt_order(backends, None, router.inflight)))
        upstream = self.fast.idle(backend.addr)
        if upstream is None or upstream.transport is None or self._paused:
            self._start_task(self._forward(request))
            return None
        router.inflight[backend.addr] = router.inflight.get(backend.addr, 0) + 1
        self._counted = backend.addr
        upstream.owner = self
        self.upstream = request.upstream = upstream
        self.pending = request
        loop = asyncio.get_running_loop()
        request.deadline = loop.time() + router.response_timeout
        request.timer = loop.call_at(request.deadline, self._pending_timed_out)
        upstream.transport.write(request.data)
        return None

    def _on_upstream(self) -> None:
        """News on the pending request's backend connection: relay a whole response here, wait
        for the rest of a small one, or let a task take over."""
        request = self.pending
        assert request is not None and request.upstream is not None and self.transport is not None
        upstream = request.upstream
        buf = upstream.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if upstream.eof or len(buf) > MAX_HEAD:
                self._pending_to_task()
            return
        try:
            status, reason, headers, framing, backend_close = _response_head(bytes(buf[:end]))
        except Closed:
            self._pending_to_task()  # the task fails it the usual way
            return
        if status < 200:
            self._pending_to_task()
            return
        if request.is_head or status in NO_BODY_STATUS:
            framing = 0
        if framing < 0 or framing > MAX_BODY:
            self._pending_to_task()
            return
        total = end + 4 + framing
        if len(buf) < total:
            if upstream.eof:
                self._pending_to_task()
            return  # a small body still coming
        out = b"HTTP/1.1 " + reason + b"\r\n" + headers
        if request.close:
            out += b"Connection: close\r\n"
        self._settle()
        self.transport.write(out + b"\r\n" + bytes(buf[end + 4:total]))
        del buf[:total]
        self.pending = None
        if request.timer is not None:
            request.timer.cancel()
        self._done_with(upstream, backend_close)
        if request.close:
            self.transport.close()
            return
        self._pump()

    def _pending_to_task(self) -> None:
        request = self.pending
        assert request is not None
        self.pending = None
        if request.timer is not None:
            request.timer.cancel()
        self._start_task(self._resume(request))

    def _pending_timed_out(self) -> None:
        request = self.pending
        if request is None:
            return
        self._drop_pending()
        keep = self._failed(request.route, asyncio.TimeoutError("no response headers in time"))
        if not keep and self.transport is not None:
            self.transport.close()
        else:
            self._guarded(self._pump)

    def _drop_pending(self) -> None:
        """Give up the pending request: its backend connection cannot be reused."""
        request, self.pending = self.pending, None
        if request is None:
            return
        if request.timer is not None:
            request.timer.cancel()
        if request.upstream is not None:
            request.upstream.owner = None  # its close is no news for this connection's next request
            request.upstream.close()
        self.upstream = None
        self._settle()

    # --- requests, in a task --------------------------------------------------------------------

    def _start_task(self, first: Any) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(first))

    async def _run(self, first: Any) -> None:
        """Finish one request, then give the connection back to the callbacks."""
        keep: Any = False
        try:
            keep = await first
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("router fast path failed; connection closed")
            self.abort()
            return
        finally:
            self.task = None
        if self.gone or self.transport is None:
            return
        if not keep:
            self.transport.close()
            return
        self._guarded(self._pump)

    async def _resume(self, request: _Request) -> bool:
        """A request sent from the callbacks whose response needs more than they do."""
        upstream = request.upstream
        assert upstream is not None
        try:
            try:
                return await self._receive(upstream, request.is_head, request.close, request.deadline)
            except Closed as exc:
                if not (request.replayable and exc.args and exc.args[0] == "fresh"):
                    raise
            self._settle()
            self.upstream = None
            return await self._forward(request, fresh=True)
        except (Closed, OSError, asyncio.TimeoutError, ValueError) as exc:
            return self._failed(request.route, exc)
        finally:
            self._settle()
            self.upstream = None

    def _hand_over(self) -> None:
        """The rest of this connection is aiohttp's: its protocol takes the transport and the bytes
        not yet consumed (nothing has been answered for them)."""
        assert self.transport is not None
        self._handed = True
        self.fast.clients.discard(self)
        self.fast.handed.add(self.transport)
        protocol = self.fast.fallback()
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        if self.buf:
            protocol.data_received(bytes(self.buf))
        if self.eof:
            protocol.eof_received()

    def _take(self, end: int) -> Any:
        """The request whose head ends at ``end``, taken off the buffer: a :class:`_Request`,
        ``_HandOver`` (aiohttp's), or None while its body is still coming."""
        router = self.fast.router
        parsed = parse_request_head(bytes(self.buf[:end]))
        if parsed is None:
            return _HandOver
        request_line, raw_path, is_head, host, length, close, kept, prior = parsed
        total = end + 4 + length
        if len(self.buf) < total:
            return None
        port = self.port
        route = router.table.lookup(host.decode("latin-1"), raw_path.decode("latin-1"),
                                    0 if port in router._default_ports else port)
        if route is not None and (route.sticky or route.disable_keep_alives):
            return _HandOver
        body = bytes(self.buf[end + 4:total])
        del self.buf[:total]
        if route is None:
            return _Request(None, b"", is_head, close, False)
        out = bytearray(request_line)
        out += b"\r\n"
        out += kept
        if not prior:
            out += self._forwarded
        else:
            for name, ours in ((b"X-Forwarded-For", self.peer.encode()), (b"X-Forwarded-Proto", b"http"),
                               (b"X-Forwarded-Port", str(port).encode())):
                values = prior.get(name.lower())
                out += name + b": " + (b", ".join(values) + b", " + ours if values else ours) + b"\r\n"
        out += b"X-Request-Start: " + str(int(time.time() * 1000)).encode() + b"\r\n"
        if b"\r\nx-request-id:" not in kept.lower() and not kept.lower().startswith(b"x-request-id:"):
            out += b"X-Request-Id: " + _request_id().encode() + b"\r\n"  # a valid one was kept by the parser
        out += b"\r\n"
        out += body
        replayable = not body and request_line.startswith((b"GET ", b"HEAD ", b"OPTIONS ", b"TRACE "))
        return _Request(route, bytes(out), is_head, close, replayable)

    async def _forward(self, request: _Request, fresh: bool = False) -> Any:
        """Send on a pooled or new connection, trying other backends when a dial fails (``fresh``:
        never a pooled one)."""
        router = self.fast.router
        backends: list[Backend] = router._backends_for(request.route)
        inflight = router.inflight
        for backend in islice(attempt_order(backends, None, inflight), MAX_ATTEMPTS):
            addr = backend.addr
            inflight[addr] = inflight.get(addr, 0) + 1
            self._counted = addr
            try:
                upstream = None if fresh else self.fast.idle(addr)
                reused = upstream is not None
                if upstream is None:
                    try:
                        upstream = await self.fast.dial(addr, self)
                    except (OSError, asyncio.TimeoutError, ValueError):
                        continue  # only dial errors are retried, as in Flynn
                upstream.owner = self
                try:
                    return await self._exchange(upstream, request.data, request.is_head, request.close)
                except Closed as exc:
                    if not (reused and request.replayable and exc.args and exc.args[0] == "fresh"):
                        raise
                # A pooled connection the backend had closed before answering: once more on a new
                # one, for a request that can be replayed (Go's transport: body-less GET, HEAD...).
                upstream = await self.fast.dial(addr, self)
                return await self._exchange(upstream, request.data, request.is_head, request.close)
            except (Closed, OSError, asyncio.TimeoutError, ValueError) as exc:
                return self._failed(request.route, exc)
            finally:
                self._settle()
                self.upstream = None
        return self._reply(503, b"Service Unavailable", UNAVAILABLE_BODY, request.close)

    def _failed(self, route: Any, exc: BaseException) -> bool:
        if self.gone:
            log.debug("client went away during a request for route %s: %s", route.formatted_id, type(exc).__name__)
            return False
        if isinstance(exc, Closed) and exc.args and exc.args[0] == "relayed":
            log.warning("proxy error for route %s: the backend ended the response early", route.formatted_id)
            return False  # the head is out: only closing tells the client
        log.warning("proxy error for route %s: %s", route.formatted_id, type(exc).__name__)
        return self._reply(503, b"Service Unavailable", UNAVAILABLE_BODY, False)

    def _reply(self, status: int, reason: bytes, text: str, close: bool) -> bool:
        self._settle()
        body = text.encode()
        head = (b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
                % (status, reason, len(body)))
        if close:
            head += b"Connection: close\r\n"
        if self.transport is not None and not self.gone:
            self.transport.write(head + b"\r\n" + body)
        return not close

    async def _exchange(self, upstream: Upstream, request: bytes, is_head: bool, close: bool) -> bool:
        """Send one request on ``upstream`` and relay its response; True to keep the client."""
        assert upstream.transport is not None
        self.upstream = upstream
        upstream.transport.write(request)
        deadline = asyncio.get_running_loop().time() + self.fast.router.response_timeout
        return await self._receive(upstream, is_head, close, deadline)

    async def _receive(self, upstream: Upstream, is_head: bool, close: bool, deadline: float) -> bool:
        """Relay the response to a request sent on ``upstream``; True to keep the client."""
        assert upstream.transport is not None and self.transport is not None
        self.upstream = upstream
        if self._paused:
            upstream.transport.pause_reading()
        buf = upstream.buf
        while True:  # the response head (after any 1xx ones)
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                status, reason, headers, framing, backend_close = _response_head(bytes(buf[:end]))
                if 100 <= status < 200:
                    if status == 101:
                        raise Closed("relayed")  # an Upgrade nobody asked for
                    self.transport.write(b"HTTP/1.1 " + reason + b"\r\n" + headers + b"\r\n")
                    del buf[:end + 4]
                    continue
                del buf[:end + 4]
                break
            if self.gone:
                upstream.close()
                raise Closed("gone")
            if upstream.eof:
                upstream.close()
                raise Closed("fresh" if not buf else "failed")
            if not await self._wait(deadline):
                upstream.close()
                raise asyncio.TimeoutError("no response headers in time")
        if is_head or status in NO_BODY_STATUS:
            framing = 0
        out = b"HTTP/1.1 " + reason + b"\r\n" + headers
        if framing == -2:  # until the backend closes: so must we
            out += b"Connection: close\r\n"
            close = True
        elif close:
            out += b"Connection: close\r\n"
        if framing >= 0 and len(buf) >= framing:  # the whole body is in: one write
            self._settle()
            self.transport.write(out + b"\r\n" + bytes(buf[:framing]))
            del buf[:framing]
            self._done_with(upstream, backend_close)
            return not close
        self.transport.write(out + b"\r\n")
        await self._relay_body(upstream, framing)
        self._done_with(upstream, backend_close or framing == -2)
        return not close

    def _settle(self) -> None:
        """The request is no longer in flight on its backend: counted down once, before the last
        bytes of the response go out (so a client that has its answer sees the count settled)."""
        addr, self._counted = self._counted, None
        if addr is not None:
            self.fast.router.inflight[addr] -= 1

    def _done_with(self, upstream: Upstream, backend_close: bool) -> None:
        self.upstream = None
        if self._paused and upstream.transport is not None:
            upstream.transport.resume_reading()
        if backend_close or upstream.buf or upstream.eof:
            upstream.close()
        else:
            self.fast.give_back(upstream)

    async def _relay_body(self, upstream: Upstream, framing: int) -> None:
        """Pass the body through as it arrives: ``framing`` bytes, chunked (-1), or to EOF (-2)."""
        assert self.transport is not None
        buf = upstream.buf
        left = framing
        chunks = _Chunks() if framing == -1 else None
        while True:
            if buf:
                if chunks is not None:
                    take = chunks.feed(buf)
                elif framing == -2:
                    take = len(buf)
                else:
                    take = min(left, len(buf))
                    left -= take
                if take:
                    if (chunks is not None and chunks.done) or (framing >= 0 and left == 0):
                        self._settle()
                    self.transport.write(bytes(buf[:take]))
                    del buf[:take]
                if (chunks is not None and chunks.done) or (framing >= 0 and left == 0):
                    return
            if self.gone:
                upstream.close()
                raise Closed("gone")
            if upstream.eof and not buf:
                upstream.close()
                if framing == -2:
                    return
                raise Closed("relayed")
            if chunks is not None and buf and not chunks.needs_more:
                continue
            await self._wait()


class _Chunks:
    """Finds the end of a chunked body passing through (the bytes are relayed unchanged)."""

    def __init__(self) -> None:
        self.done = False
        self.needs_more = False
        self._data = 0  # bytes of chunk data (plus its CRLF) still to pass
        self._trailers = False

    def feed(self, buf: bytearray) -> int:
        """How many bytes at the start of ``buf`` belong to the body (``done`` once the end is in)."""
        pos = 0
        self.needs_more = False
        while pos < len(buf) and not self.done:
            if self._data:
                take = min(self._data, len(buf) - pos)
                self._data -= take
                pos += take
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > 4096:
                    raise Closed("relayed")  # no chunk-size line is that long
                self.needs_more = True
                break
            line = bytes(buf[pos:eol])
            pos = eol + 2
            if self._trailers:
                if not line:
                    self.done = True
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise Closed("relayed") from None
            if size == 0:
                self._trailers = True
            else:
                self._data = size + 2
        return pos


#: A header block (each line after a CRLF) of well-formed ``name: value`` lines: no folding, no
#: whitespace before the colon, token names (RFC 7230 §3.2). Anything else is aiohttp's to answer.
HEADER_BLOCK = re.compile(rb"(?:\r\n[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*)*")
#: Request headers the quick scan cannot just pass through.
def _names(names: Any) -> "re.Pattern[bytes]":
    """One scan for any of these header names in a lower-cased header block."""
    return re.compile(b"\r\n(?:" + b"|".join(re.escape(n) for n in sorted(names)) + b"):")


_SPECIAL = _names({*HOP, *FORWARDED, b"x-request-id"})
_HAND_OVER_NAMES = _names(HAND_OVER)
Parsed = tuple[bytes, bytes, bool, bytes, int, bool, bytes, dict[bytes, list[bytes]]]


def _single(low: bytes, block: bytes, needle: bytes) -> bytes | None:
    """The value of the one header ``needle`` names (``b""`` when it is repeated), None when absent."""
    at = low.find(needle)
    if at < 0:
        return None
    if low.find(needle, at + 1) >= 0:
        return b""
    eol = low.find(b"\r\n", at + 2)
    return block[at + len(needle):eol if eol >= 0 else len(block)].strip()


def parse_request_head(head: bytes) -> Parsed | None:
    """What the fast path needs of a request head (no final CRLF CRLF), or None: aiohttp's.

    (request line, raw path, is HEAD, Host, Content-Length, client asked to close, the header
    lines to forward (each ending in CRLF), prior X-Forwarded-* values by lower-cased name).
    The common head (no hop-by-hop or forwarding headers) is checked with a few C-level scans
    and passed on verbatim; the others are read line by line."""
    first = head.find(b"\r\n")
    request_line, block = (head, b"") if first < 0 else (head[:first], head[first:])
    parts = request_line.split(b" ")
    if len(parts) != 3:
        return None
    method, target, version = parts
    if version != b"HTTP/1.1" or not target.startswith(b"/") or method == b"CONNECT":
        return None
    raw_path = target.split(b"?", 1)[0]
    if any(mark in raw_path for mark in _UNSAFE_PATH):
        return None  # aiohttp decodes and normalises such paths: keep its reading
    if not HEADER_BLOCK.fullmatch(block):
        return None
    low = block.lower()
    if _HAND_OVER_NAMES.search(low):
        return None
    host = _single(low, block, b"\r\nhost:")
    if not host:
        return None  # none, repeated or empty
    length_text = _single(low, block, b"\r\ncontent-length:")
    length = 0
    if length_text is not None:
        if not length_text.isdigit() or int(length_text) > MAX_BODY:
            return None
        length = int(length_text)
    is_head = method == b"HEAD"
    if not _SPECIAL.search(low):
        return request_line, raw_path, is_head, host, length, False, block[2:] + b"\r\n" if block else b"", {}
    close = False
    kept: list[bytes] = []
    prior: dict[bytes, list[bytes]] = {}
    named: set[bytes] = set()
    for line in block[2:].split(b"\r\n"):
        name, _, value = line.partition(b":")
        lower = name.lower()
        value = value.strip()
        if lower == b"connection":
            tokens = {t.strip().lower() for t in value.split(b",")}
            if b"upgrade" in tokens:
                return None
            close = close or b"close" in tokens
            named |= tokens
        elif lower in FORWARDED:
            prior.setdefault(lower, []).append(value)
        elif lower == b"x-request-id":
            if REQUEST_ID.match(value):
                kept.append(line)  # a valid one is kept (Flynn's rule), an invalid one replaced
        elif lower not in HOP:
            kept.append(line)
    if named:
        kept = [line for line in kept if line.partition(b":")[0].lower() not in named]
    return request_line, raw_path, is_head, host, length, close, b"".join(line + b"\r\n" for line in kept), prior


RESPONSE_HOP = HOP - {b"expect"}


_RESPONSE_SPECIAL = _names(RESPONSE_HOP - {b"connection"})


def _response_head(head: bytes) -> tuple[int, bytes, bytes, int, bool]:
    """(status, "code reason", header lines to relay, framing, backend closes) of a response head.

    framing: the Content-Length, -1 chunked, -2 until the backend closes the connection. The
    common head (no hop-by-hop header but one ``Connection: keep-alive|close``) is read with a
    few C-level scans; others line by line."""
    first = head.find(b"\r\n")
    status_line, block = (head, b"") if first < 0 else (head[:first], head[first:])
    version, _, reason = status_line.partition(b" ")
    try:
        status = int(reason[:3])
    except ValueError:
        raise Closed("failed") from None
    low = block.lower()
    if not _RESPONSE_SPECIAL.search(low):
        connection = _single(low, block, b"\r\nconnection:")
        token = connection.lower() if connection else connection
        if token in (None, b"keep-alive", b"close"):
            length = _single(low, block, b"\r\ncontent-length:")
            if length is None or length.isdigit():
                if connection is not None:  # drop the Connection line
                    at = low.find(b"\r\nconnection:")
                    eol = low.find(b"\r\n", at + 2)
                    block = block[:at] + (block[eol:] if eol >= 0 else b"")
                closes = token == b"close" or (version != b"HTTP/1.1" and token != b"keep-alive")
                return (status, reason, block[2:] + b"\r\n" if block else b"",
                        int(length) if length is not None else -2, closes)
    return _response_head_lines(status, version, reason, block)


def _response_head_lines(status: int, version: bytes, reason: bytes, block: bytes) -> tuple[int, bytes, bytes, int, bool]:
    framing = -2
    closes = keep_alive = False
    named: set[bytes] = set()
    kept: list[bytes] = []
    for line in block[2:].split(b"\r\n") if block else ():
        name, _, value = line.partition(b":")
        lower = name.strip().lower()
        if lower == b"content-length" and framing == -2:
            value = value.strip()
            if not value.isdigit():
                raise Closed("failed")
            framing = int(value)
        elif lower == b"transfer-encoding":
            if value.strip().lower().endswith(b"chunked"):
                framing = -1
            continue  # re-added below for a chunked relay
        elif lower == b"connection":
            tokens = {t.strip().lower() for t in value.split(b",")}
            closes = closes or b"close" in tokens
            keep_alive = keep_alive or b"keep-alive" in tokens
            named |= tokens
            continue
        if lower in RESPONSE_HOP:
            continue
        kept.append(line)
    # HTTP/1.0 closes unless the backend said keep-alive
    backend_close = closes or (version != b"HTTP/1.1" and not keep_alive)
    if named:
        kept = [line for line in kept if line.partition(b":")[0].strip().lower() not in named]
    if framing == -1:
        kept.append(b"Transfer-Encoding: chunked")
    headers = b"".join(line + b"\r\n" for line in kept)
    return status, reason, headers, framing, backend_close
