"""A lean HTTPS ResponseURL endpoint on loopback that records what each contender delivered.

Kept deliberately cheap per request (no protocol checks) so that the server, which shares the two
cores with the contender, costs every contender the same and little. Verification happens after a
run, from the recorded bodies.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Delivery:
    """One request received on a response URL."""

    method: str
    path_token: str
    body: dict[str, Any] | None
    at: float  # time.perf_counter() when the body had been read, before the reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext, sink: "CaptureServer") -> None:
        self.context = context
        self.sink = sink
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self):  # type: ignore[no-untyped-def]
        """Wrap each accepted socket without handshaking, so the handshake runs in the worker thread."""
        sock, address = self.socket.accept()
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client closing early is not the bench's concern; missing deliveries are caught later


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: AWS crhelper never closes its connections

    def setup(self) -> None:
        self.request.do_handshake()
        super().setup()

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        token = self.path.split("?", 1)[0].rsplit("/", 1)[-1]
        self.server.sink.record(Delivery(self.command, token, body, time.perf_counter()))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_PUT = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return


class CaptureServer:
    """`with CaptureServer(ctx) as server:` then `server.base_url`, `server.take(request_ids)`."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._lock = threading.Lock()
        self._by_request: dict[str, list[Delivery]] = {}
        self._httpd = _Server(context, self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"  # bound to 127.0.0.1 above

    def record(self, delivery: Delivery) -> None:
        request_id = str((delivery.body or {}).get("RequestId", f"<unparsed:{delivery.path_token}>"))
        with self._lock:
            self._by_request.setdefault(request_id, []).append(delivery)

    def take(self, request_ids: list[str]) -> dict[str, list[Delivery]]:
        """Remove and return what arrived for these request ids (an empty list where nothing did)."""
        with self._lock:
            return {rid: self._by_request.pop(rid, []) for rid in request_ids}

    def __enter__(self) -> "CaptureServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
