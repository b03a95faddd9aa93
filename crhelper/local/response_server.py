"""A real ResponseURL endpoint: fresh signed URLs per request, captures every response, checks ROS's rules.

Used by `crhelper invoke`, the stack emulator and the test suite. Faults can be planned per URL
(first N attempts answered 5xx, a slow reply) to exercise a provider's delivery path.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

from ..invariants import body_violations, header_violations
from ..servers import LocalHTTPServer, ServerThread

URL_LIFETIME_SECONDS = 43_200 + 3_600


@dataclass
class Capture:
    """One HTTP request the server received on a response URL."""

    method: str
    token: str
    kind: str
    headers: dict[str, str]
    raw: bytes
    body: dict[str, Any] | None
    violations: list[str]
    status: int
    received_at: float


@dataclass
class _Plan:
    request: Mapping[str, Any] | None = None
    fail_first: int = 0
    fail_status: int = 500
    delay: float = 0.0
    attempts: int = 0
    accepted: list[Capture] = field(default_factory=list)
    #: Set on every capture for this URL, cleared by `wait_answer`: its waiter sleeps until then.
    arrived: threading.Event = field(default_factory=threading.Event)


class ResponseServer:
    """`with ResponseServer() as server: url = server.new_url(event)`; then `server.wait_for(request_id)`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None) -> None:
        self._secret = secrets.token_bytes(32)
        self._plans: dict[str, _Plan] = {}
        self._lock = threading.Condition()
        self.captures: list[Capture] = []
        self.violations: list[str] = []
        self._httpd = LocalHTTPServer((host, port), self._handler_class())
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if ssl_context is not None else "http"
        self._serving = ServerThread(self._httpd, "response-server")

    # lifecycle -----------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self._httpd.host}:{self._httpd.port}"

    def start(self) -> "ResponseServer":
        self._serving.start()
        return self

    def stop(self) -> None:
        self._serving.stop()

    def __enter__(self) -> "ResponseServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # URLs -----------------------------------------------------------------------
    def _sign(self, token: str, expires: int) -> str:
        return hmac.new(self._secret, f"{token}:{expires}".encode(), hashlib.sha256).hexdigest()

    def _url(self, kind: str, token: str) -> str:
        expires = int(time.time()) + URL_LIFETIME_SECONDS
        return f"{self.base_url}/ros/{kind}/{token}?Expires={expires}&Signature={self._sign(token, expires)}"

    def new_urls(
        self,
        request: Mapping[str, Any] | None = None,
        *,
        fail_first: int = 0,
        fail_status: int = 500,
        delay: float = 0.0,
    ) -> tuple[str, str]:
        """(public, intranet) URLs for one request; both lead to the same capture slot."""
        token = secrets.token_hex(12)
        with self._lock:
            self._plans[token] = _Plan(request, fail_first, fail_status, delay)
        return self._url("public", token), self._url("intranet", token)

    def new_url(self, request: Mapping[str, Any] | None = None, **faults: Any) -> str:
        return self.new_urls(request, **faults)[0]

    def attach(self, event: dict[str, Any], **faults: Any) -> dict[str, Any]:
        """Give `event` fresh URLs and check the responses to it against it (echo and id rules)."""
        public, intranet = self.new_urls(event, **faults)
        event["ResponseURL"] = public
        event["IntranetResponseURL"] = intranet
        return event

    # reading -----------------------------------------------------------------------
    def responses_for(self, request_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [c.body for c in self.captures if c.status == 200 and c.body and c.body.get("RequestId") == request_id]

    def wait_for(self, request_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """The first accepted response whose RequestId matches; TimeoutError if none arrives in time."""
        end = time.monotonic() + timeout
        with self._lock:
            while True:
                for capture in self.captures:
                    if capture.status == 200 and capture.body and capture.body.get("RequestId") == request_id:
                        return capture.body
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response for RequestId {request_id} within {timeout} s")
                self._lock.wait(left)

    def wait_answer(self, url: str, timeout: float) -> None:
        """Sleep until a response arrives on `url`'s slot since the last call (or `timeout` passes):
        a waiter for one request wakes on its own answer, not by polling every URL's captures."""
        token = urlsplit(url).path.rsplit("/", 1)[-1]
        with self._lock:
            plan = self._plans.get(token)
        if plan is None:
            time.sleep(max(0.0, timeout))
        elif plan.arrived.wait(max(0.0, timeout)):
            plan.arrived.clear()  # what arrived before this is in `captures` already: the caller reads them next

    def attempts_for(self, url: str) -> int:
        token = urlsplit(url).path.rsplit("/", 1)[-1]
        with self._lock:
            plan = self._plans.get(token)
            return plan.attempts if plan else 0

    # serving -----------------------------------------------------------------------
    def _receive(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, bytes]:
        parts = urlsplit(path)
        segments = parts.path.strip("/").split("/")
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if len(segments) != 3 or segments[0] != "ros" or segments[1] not in ("public", "intranet"):
            return 404, b'{"Code":"NotFound"}'
        kind, token = segments[1], segments[2]
        try:
            expires = int(query.get("Expires", "0"))
        except ValueError:
            expires = 0
        signature_ok = hmac.compare_digest(query.get("Signature", ""), self._sign(token, expires))
        with self._lock:
            plan = self._plans.get(token)
        if plan is None or not signature_ok or expires < time.time():
            with self._lock:
                self.violations.append(f"response sent to an unknown, forged or expired URL ({kind}/{token[:6]}…)")
                self._lock.notify_all()
            return 403, b'{"Code":"SignatureDoesNotMatch"}'
        with self._lock:
            plan.attempts += 1
            attempt = plan.attempts
        if plan.delay:
            time.sleep(plan.delay)
        body, problems = body_violations(raw, plan.request)
        problems = header_violations(method, headers) + problems
        if attempt <= plan.fail_first:
            status = plan.fail_status
        else:
            status = 200
        capture = Capture(method, token, kind, headers, raw, body, problems, status, time.time())
        with self._lock:
            self.captures.append(capture)
            if status == 200:
                if plan.accepted and plan.accepted[0].body != body:
                    problems.append("a second, different response was sent for the same request")
                plan.accepted.append(capture)
            request_id = (body or {}).get("RequestId", "?")
            self.violations.extend(f"RequestId {request_id}: {p}" for p in problems)
            self._lock.notify_all()
        plan.arrived.set()
        if status != 200:
            return status, json.dumps({"Code": "InjectedFault", "Attempt": attempt}).encode()
        return 200, b"{}"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are two writes: with Nagle's algorithm on, the body of a reply on a kept
            # connection waits for the client's delayed ACK of the headers (~40 ms).
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, reply = server._receive(self.command, self.path, dict(self.headers.items()), raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_POST = do_PUT = _serve

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                server.violations.append(f"GET sent to a response URL ({self.path.split('?')[0]})")
                self.send_error(405)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: URLs carry signatures
                return

        return Handler
