"""Background servers, written once: a threaded stdlib HTTP server and an asyncio loop on a thread.

The local endpoints (ResponseURL, Function Compute, MNS) and the router's proxy and controller all
run beside the caller (tests, the emulator, the CLI) and must stop cleanly and promptly.
"""

from __future__ import annotations

import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Coroutine, TypeVar, cast

from .logs import get_logger

T = TypeVar("T")
_ServerThreadT = TypeVar("_ServerThreadT", bound="ServerThread")
_LoopThreadT = TypeVar("_LoopThreadT", bound="LoopThread")

#: A stack operation answers dozens of requests at once; the stdlib default backlog of 5 resets them.
REQUEST_QUEUE_SIZE = 128

_log = get_logger("servers")


@dataclass(frozen=True)
class ApiResponse:
    """One answer of a local cloud endpoint (Function Compute, ECS, CloudStack), built by its pure API layer."""

    status: int
    headers: dict[str, str]
    body: bytes


class ApiRequestHandler(BaseHTTPRequestHandler):
    """The HTTP side every local cloud endpoint shares: keep-alive HTTP/1.1, answers written once.

    Headers and body go out as two writes: with Nagle's algorithm on, a keep-alive client's delayed
    ACK held every answer about 40 ms (one SDK call: 44.6 ms before, 2.1 ms after)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def write_response(self, response: ApiResponse) -> None:
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)


class LocalHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server for loopback endpoints.

    It keeps a deep accept backlog, stays quiet about clients that leave mid-reply (read timeouts
    under test are expected, not worth a traceback) while still logging a handler's own bugs, and
    tracks open connections so `ServerThread.stop` can end keep-alive handler threads too.
    Handler threads are daemons; a server whose `stop` must also wait for them sets
    `daemon_threads = False` (then `server_close` joins them, after their connections are closed)."""

    request_queue_size = REQUEST_QUEUE_SIZE
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    @property
    def host(self) -> str:
        # An AF_INET server's address is always (host, port); the stub also allows AF_UNIX bytes.
        return cast("tuple[str, int]", self.server_address[:2])[0]

    @property
    def port(self) -> int:
        return cast("tuple[str, int]", self.server_address[:2])[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A socket error is a client that left (or timed out); anything else is our bug: log it."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            return
        _log.error("%s: unhandled error in a request handler", type(self).__name__, exc_info=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End every open connection (idle keep-alive ones included)."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ServerThread:
    """Serve an `http.server` server from a daemon thread: `start()`, `stop()`, or `with`.

    `stop` is `stop_accepting` (no new connections; requests in flight go on), then open
    connections closed, the socket released and the thread joined. A server with work of its own
    to end in between (kill workers, wake long polls) calls `stop_accepting` first."""

    def __init__(self, server: ThreadingHTTPServer, name: str, poll_interval: float = 0.05) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(poll_interval,), name=name, daemon=True)
        self._accepting = False
        self._closed = False

    def start(self: _ServerThreadT) -> _ServerThreadT:
        self._thread.start()
        self._accepting = True
        return self

    def stop_accepting(self) -> None:
        """Stop the accept loop (returns once it has stopped); idempotent."""
        if self._accepting:
            self._accepting = False
            self.server.shutdown()

    def stop(self, join: float | None = 5.0) -> None:
        """Stop accepting, close open connections, release the socket; idempotent."""
        self.stop_accepting()
        if self._closed:
            return
        self._closed = True
        if isinstance(self.server, LocalHTTPServer):
            self.server.close_connections()
        self.server.server_close()
        if self._thread.is_alive():
            self._thread.join(join)

    def __enter__(self: _ServerThreadT) -> _ServerThreadT:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LoopThread:
    """An asyncio event loop on its own daemon thread, for async servers driven from sync code.

    `start` starts the thread and runs `startup` on the loop; `stop` runs `cleanup`, then stops
    and closes the loop. Subclasses override those two coroutines; `run` runs any other."""

    def __init__(self, name: str) -> None:
        import asyncio  # here, not at the top: the threaded HTTP servers (metad, local endpoints) skip its import

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    @property
    def stopped(self) -> bool:
        return self.loop.is_closed()

    async def startup(self) -> None:
        """Start the server on the loop (bind its sockets); a failure propagates out of `start`."""

    async def cleanup(self) -> None:
        """Close what `startup` opened; runs on the loop before it stops."""

    def start(self: _LoopThreadT) -> _LoopThreadT:
        self._thread.start()
        self.run(self.startup())
        return self

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = 10.0) -> T:
        """Run `coroutine` on the loop and wait for its result."""
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self, join: float = 10.0) -> None:
        """Run `cleanup`, stop the loop and close it; idempotent."""
        if self.loop.is_closed():
            return
        if not self._thread.is_alive():
            self.loop.close()
            return
        try:
            self.run(self.cleanup(), timeout=join)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(join)
            if not self._thread.is_alive():  # else a callback blocks the loop: closing it would raise
                self.loop.close()

    def __enter__(self: _LoopThreadT) -> _LoopThreadT:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def site_port(site: Any) -> int | None:
    """The port an aiohttp `TCPSite` listens on (useful after binding port 0); None before `start`.

    aiohttp < 3.12 has no public getter; it annotates `_server` as AbstractServer, whose stub lacks
    the `sockets` of the asyncio.Server it holds."""
    server = getattr(site, "_server", None)
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else None
