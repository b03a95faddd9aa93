"""Background servers, written once: a threaded stdlib HTTP server and an asyncio loop on a thread.

The local endpoints (ResponseURL, Function Compute, MNS) and the router's proxy and controller all
run beside the caller (tests, the emulator, the CLI) and must stop cleanly and promptly.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Coroutine, TypeVar, cast

T = TypeVar("T")

#: A stack operation answers dozens of requests at once; the stdlib default backlog of 5 resets them.
REQUEST_QUEUE_SIZE = 128


class LocalHTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server for loopback endpoints.

    It keeps a deep accept backlog, stays quiet about clients that leave mid-reply (read timeouts
    under test are expected, not worth a traceback), and tracks open connections so `stop` can end
    keep-alive handler threads too."""

    request_queue_size = REQUEST_QUEUE_SIZE
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    @property
    def host(self) -> str:
        return cast("tuple[str, int]", self.server_address[:2])[0]

    @property
    def port(self) -> int:
        return cast("tuple[str, int]", self.server_address[:2])[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        return

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
    """Serve an `http.server` server from a daemon thread: `start()`, `stop()`, or `with`."""

    def __init__(self, server: ThreadingHTTPServer, name: str, poll_interval: float = 0.05) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(poll_interval,), name=name, daemon=True)

    def start(self) -> "ServerThread":
        self._thread.start()
        return self

    def stop(self, join: float | None = 5.0) -> None:
        """Stop accepting, close open connections, release the socket."""
        if self._thread.is_alive():
            self.server.shutdown()
        if isinstance(self.server, LocalHTTPServer):
            self.server.close_connections()
        self.server.server_close()
        if self._thread.is_alive():
            self._thread.join(join)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LoopThread:
    """An asyncio event loop on its own daemon thread, for async servers driven from sync code."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)

    def start(self) -> "LoopThread":
        self._thread.start()
        return self

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = 10.0) -> T:
        """Run `coroutine` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self, join: float = 10.0) -> None:
        """Stop the loop and close it (run your async cleanup with `run` first)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(join)
            self.loop.close()
