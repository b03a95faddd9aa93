"""Support for the cloud tests: a tiny real HTTP server that records every request exactly as it
arrived on the socket (method, request target, headers, body) and answers as the cloud would,
optionally checking signatures on the way; and the rule for optional SDKs: skipped with a reason
locally, a failure under CI=true."""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler
from types import ModuleType
from typing import Any, Callable, Optional

import pytest

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.servers import LocalHTTPServer, ServerThread

Check = Callable[[WireRequest], None]

#: The keys the Alibaba tests sign with: a permanent one and an STS one with its token.
ALIBABA_KEYS = {
    "AKIDTEST": Credentials("AKIDTEST", "SECRETTEST"),
    "STS.ROLE": Credentials("STS.ROLE", "ROLESECRET", "role-token"),
}


def sdk(module: str) -> ModuleType:
    """Import an SDK the test drives; skip when it is missing, except on CI, where it must be there."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} must be installed on CI (pip install -e '.[test]'): {exc}")
        pytest.skip(f"{module} is not installed: {exc}")
        raise  # unreachable: skip raises


class CaptureServer:
    """Records requests; answers 200 `{"RequestId": ...}` (CloudStack: its one-key wrapper), or the
    provider's error body when `check` rejects the request."""

    def __init__(self) -> None:
        self.requests: list[WireRequest] = []
        self.check: Optional[Check] = None
        #: Answers (status, headers, body) given in turn instead of the default ones, the last one
        #: again and again.
        self.replies: list[tuple[int, dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = WireRequest.of(self.command, self.path, self.headers, self.rfile.read(length))
                with owner._lock:
                    owner.requests.append(request)
                status, headers, body = owner.answer(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: object) -> None:
                pass

        self._server = LocalHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = ServerThread(self._server, "capture")

    @property
    def endpoint(self) -> str:
        """`host:port`, as the Tea SDKs take it."""
        return f"127.0.0.1:{self._server.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def answer(self, request: WireRequest) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            if self.replies:
                return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        cloudstack = request.path.startswith("/client/api")
        json_type = {"Content-Type": "application/json; charset=UTF-8" if cloudstack else "application/json"}
        try:
            if self.check is not None:
                self.check(request)
        except SignatureRejected as exc:
            if cloudstack:
                inner = {"uuidList": [], "errorcode": exc.status, "errortext": exc.message}
                return exc.status, json_type, json.dumps({"listusersresponse": inner}).encode()
            error = {"RequestId": "req-1", "HostId": self.endpoint, "Code": exc.code, "Message": exc.message}
            return exc.status, json_type, json.dumps(error).encode()
        return 200, json_type, b'{"listusersresponse": {"count": 0}}' if cloudstack else b'{"RequestId": "req-1"}'

    def take(self) -> WireRequest:
        """The one request recorded since the last `take`."""
        with self._lock:
            assert len(self.requests) == 1, [r.target for r in self.requests]
            return self.requests.pop()

    def __enter__(self) -> "CaptureServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop()


class _TeaModules:
    """The Tea SDK modules the tests drive, each imported (or skipped, see `sdk`) on first use:
    `tea.ecs.Client`, `tea.ros_models.CreateStackRequest`..."""

    MODULES = {
        "ecs": "alibabacloud_ecs20140526.client", "ecs_models": "alibabacloud_ecs20140526.models",
        "ros": "alibabacloud_ros20190910.client", "ros_models": "alibabacloud_ros20190910.models",
        "fc": "alibabacloud_fc20230330.client", "fc_models": "alibabacloud_fc20230330.models",
        "openapi": "alibabacloud_tea_openapi.client", "util_models": "alibabacloud_tea_openapi.utils_models",
        "exceptions": "alibabacloud_tea_openapi.exceptions", "runtime": "darabonba.runtime",
    }

    def __getattr__(self, name: str) -> Any:
        return sdk(self.MODULES[name])


tea = _TeaModules()


def tea_config(endpoint: str, key_id: str = "AKIDTEST", secret: str = "SECRETTEST", **extra: Any) -> Any:
    """A Tea SDK `Config` for our local endpoint (plain HTTP, explicit key)."""
    models = sdk("alibabacloud_tea_openapi.models")
    return models.Config(access_key_id=key_id, access_key_secret=secret, endpoint=endpoint, protocol="http", **extra)


def refused(verify: Callable[..., str], request: WireRequest, keys: Any, **kw: Any) -> SignatureRejected:
    """The error `verify(request, keys, now=..., **kw)` raises (`now` defaults to the current time)."""
    now = kw.pop("now") if "now" in kw else time.time()
    with pytest.raises(SignatureRejected) as info:
        verify(request, keys, now=now, **kw)
    return info.value
