"""The local ROS on loopback: the 2019-09-10 OpenAPI and the console on one port.

    with LocalRos(access_keys={"LTAI...": "secret"}) as ros:
        client = ros20190910.Client(Config(access_key_id=..., access_key_secret=..., endpoint=ros.endpoint,
                                           protocol="http", region_id=ros.region))

A request naming an action (`x-acs-action` header, or an `Action` query or form parameter) goes to
`RosApi`; every other request is the console's (`crhelper.ros.console.handle_console`,
imported on first use so the API works even if the console cannot load; 404 without it). The
console's pages need the token printed in its URL (`/?token=...`, made per start).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from crhelper.cloud.credentials import AcceptedKeys, Credentials
from crhelper.cloud.signing.alibaba import MAX_CLOCK_SKEW_SECONDS
from crhelper.cloud.signing.core import Headers, WireRequest
from crhelper.cloud.signing.replay import nonce_cache
from crhelper.emulator.delivery_bindings import Bindings
from crhelper.ros.api import RosApi, error_response, is_api_request, request_id
from crhelper.ros.stacks import LocalStacks, RosError
from crhelper.logs import get_logger
from crhelper.servers import ApiRequestHandler, ApiResponse, LocalHTTPServer, ServerThread

__all__ = ["LocalRos", "MAX_BODY_BYTES", "is_loopback"]

_log = get_logger("local")
#: A TemplateBody may be 524,288 bytes; its form encoding can triple that.
MAX_BODY_BYTES = 4 * 1024 * 1024


class _RosHttpServer(LocalHTTPServer):
    ros: "LocalRos"


class _RosRequestHandler(ApiRequestHandler):
    """HTTP to the API or the console and back; HTTP the stdlib refuses itself (a bad request line,
    too long headers) also answers ROS's JSON error document."""

    server: _RosHttpServer
    #: A client that stops sending mid-request frees its thread after this many seconds.
    timeout = 60

    def _dispatch(self) -> None:
        length = self.headers.get("Content-Length", "0") or "0"
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return self._refuse(f"Content-Length is invalid, it must be a whole number up to {MAX_BODY_BYTES} bytes")
        if self.headers.get("Transfer-Encoding"):
            return self._refuse("Transfer-Encoding is invalid, the local ROS reads bodies sent with a "
                                "Content-Length only")
        body = self.rfile.read(int(length)) if int(length) else b""
        self.write_response(self.server.ros.answer(self.command, self.path, self.headers, body))

    def _refuse(self, problem: str) -> None:
        """ROS's InvalidParameter for a body it will not read; the connection ends (its rest is unread)."""
        self.close_connection = True
        error = RosError("InvalidParameter", f"The specified parameter {problem}.", 400)
        self.write_response(error_response(error, request_id(), self.headers.get("Host") or "ros.aliyuncs.com"))

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _dispatch

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's refusals (400 bad request line, 414, 431, 501) in ROS's error shape."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # the stdlib's guess for a line it cannot read: answer with headers
            self.request_version = "HTTP/1.1"
        error = RosError("InvalidRequest" if code < 500 else "InternalError",
                         f"The HTTP request is malformed: {message or explain or code}.", code)
        self.write_response(error_response(error, request_id()))

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # Called for refused request lines too, before `path` is known.
        _log.debug("%s %s", getattr(self, "command", None) or "-", (getattr(self, "path", "") or "").partition("?")[0])


def _form(headers: Mapping[str, str], body: bytes) -> dict[str, list[str]]:
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded" or not body:
        return {}
    try:
        return parse_qs(body.decode("ascii"), keep_blank_values=True)
    except (UnicodeDecodeError, ValueError):
        return {}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`: the addresses only this machine reaches."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class LocalRos(AcceptedKeys):
    """The local ROS endpoint: `start()`/`stop()` or `with`. See the module docstring.

    `access_keys` maps AccessKey IDs to secrets callers sign with, `credentials` adds keys (an STS
    one with its token); one pair is generated when neither is given. `stacks` shares a `LocalStacks` (else one is made on `home`, `region`, `bindings`)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, access_keys: Mapping[str, str] | None = None,
                 home: str | os.PathLike[str] | None = None, region: str = "cn-hangzhou",
                 bindings: str | os.PathLike[str] | Bindings | None = None, stacks: LocalStacks | None = None,
                 credentials: Sequence[Credentials] = (), capture_output: bool = False, refuse_replays: bool = True,
                 max_clock_skew: float = MAX_CLOCK_SKEW_SECONDS, console: bool | None = None) -> None:
        self._accept_keys(access_keys, credentials)
        self._address = (host, port)
        self._owns_stacks = stacks is None
        self.stacks = stacks if stacks is not None else LocalStacks(home, region, bindings, capture_output=capture_output)
        self.api = RosApi(self.stacks, self._keys, nonces=nonce_cache(max_clock_skew) if refuse_replays else None,
                          max_skew=max_clock_skew)
        self.console_token = secrets.token_urlsafe(24)
        #: The console (unsigned pages, able to delete stacks) only where nobody else can connect.
        self.console_enabled = is_loopback(host) if console is None else console
        self._server: _RosHttpServer | None = None
        self._serving: ServerThread | None = None

    @property
    def region(self) -> str:
        return self.stacks.region

    @property
    def endpoint(self) -> str:
        """`host:port`, as the SDK's `Config.endpoint` takes it (no scheme; with protocol='http')."""
        if self._server is None:
            raise RuntimeError("LocalRos is not started; call start() first")
        return f"{self._server.host}:{self._server.port}"

    @property
    def console_url(self) -> str | None:
        """The console's address with its token; None when the console is off (a non-loopback host)."""
        if not self.console_enabled:
            return None
        return f"http://{self.endpoint}/?token={self.console_token}"

    def client(self, **config: Any) -> Any:
        """An `alibabacloud_ros20190910` client for this endpoint (the SDK is imported here, lazily)."""
        from alibabacloud_ros20190910.client import Client
        from alibabacloud_tea_openapi.models import Config

        settings: dict[str, Any] = {"access_key_id": self.access_key_id, "access_key_secret": self.access_key_secret,
                                    "endpoint": self.endpoint, "protocol": "http", "region_id": self.region}
        settings.update(config)
        return Client(Config(**settings))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "LocalRos":
        if self._server is not None:
            raise RuntimeError("LocalRos is already started")
        server = _RosHttpServer(self._address, _RosRequestHandler)
        server.ros = self
        self._server = server
        self._serving = ServerThread(server, "ros-local-http").start()
        return self

    def stop(self) -> None:
        """Stop serving, then wait for running stack operations (`LocalStacks.close`)."""
        if self._serving is not None:
            self._serving.stop()
        self._server = self._serving = None
        if self._owns_stacks:
            self.stacks.close()

    def __enter__(self) -> "LocalRos":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ one request

    def answer(self, method: str, target: str, headers: Headers, body: bytes) -> ApiResponse:
        """The API's answer to an OpenAPI call, the console's to anything else."""
        request = WireRequest.of(method, target, headers, body)
        path, _, raw_query = target.partition("?")
        query = parse_qs(raw_query, keep_blank_values=True)
        if is_api_request(query, request.headers, _form(request.headers, body)):
            return self.api.handle(request)
        if not self.console_enabled:
            return ApiResponse(404, {"Content-Type": "text/plain; charset=utf-8"},
                               b"not found: this endpoint serves the ROS 2019-09-10 API only (the console is served "
                               b"on loopback addresses only)\n")
        try:
            from crhelper.ros.console import handle_console
        except ImportError:
            return ApiResponse(404, {"Content-Type": "text/plain; charset=utf-8"},
                               b"not found: this endpoint serves the ROS 2019-09-10 API (no console installed)\n")
        try:
            return handle_console(method, path, query, request.headers, body, self.stacks, self.console_token)
        except Exception:  # noqa: BLE001 - a console bug must not take the endpoint down
            _log.error("console request failed", exc_info=True)
            return ApiResponse(500, {"Content-Type": "text/plain; charset=utf-8"}, b"console error; see the server log\n")
