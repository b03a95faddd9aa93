"""Fixtures for the shared store suite: a controllable clock and a moto S3 server on loopback.

The moto server is wrapped in `WireGate`, a WSGI middleware that
* serialises requests: moto 5.2 checks ``If-None-Match``/``If-Match`` and then writes in two
  steps without a lock, so two threads can both pass the check; real S3 and OSS make the
  conditional write atomic, and the gate restores that property instead of hiding a race;
* can replay a PUT (a retry whose first attempt landed) or run a test's hook before a PUT is served, to interleave writers deterministically;
* records every request's method, path and headers, so tests can assert what went on the wire;
* emulates OSS for buckets named ``oss-*``: it ignores the client's ``If-None-Match`` and enforces
  only ``x-oss-forbid-overwrite: true``, answering 409 ``FileAlreadyExists`` like OSS does.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import boto3
import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from crhelper.store import Store, open_store
from store_support import BACKENDS, CREDS, OSS_BUCKET, PLAIN_BUCKET, FakeClock, s3_url

_OSS_CONFLICT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>FileAlreadyExists</Code>'
    b"<Message>The object you specified already exists and can not be overwritten.</Message>"
    b"</Error>"
)


@dataclass
class WireRequest:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class WireGate:
    """Serialising, recording, OSS-emulating WSGI wrapper around moto's app."""

    app: Callable[..., Iterable[bytes]]
    requests: list[WireRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Called with the path of each PUT before it is served: lets a test interleave other writers.
    before_put: Callable[[str], None] | None = None
    #: When set, the next PUT is applied twice and the client sees the second answer: what a
    #: client sees when its first attempt landed but the response was lost and it retried.
    replay_next_put: bool = False
    #: When set (e.g. "403 Forbidden"), every PUT is refused with that status and an S3 error body:
    #: the store becoming unwritable mid-operation, as a revoked OSS policy would make it.
    refuse_puts_with: str | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        hook = self.before_put
        if hook is not None and environ["REQUEST_METHOD"] == "PUT":
            hook(environ.get("PATH_INFO", ""))
        if self.refuse_puts_with and environ["REQUEST_METHOD"] == "PUT":
            body = b"<Error><Code>AccessDenied</Code><Message>refused by the test</Message></Error>"
            start_response(self.refuse_puts_with, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        with self.lock:
            headers = {
                k[5:].replace("_", "-").lower(): v
                for k, v in environ.items()
                if k.startswith("HTTP_")
            }
            path = environ.get("PATH_INFO", "")
            method = environ["REQUEST_METHOD"]
            self.requests.append(WireRequest(method, path, headers))
            oss_put = method == "PUT" and path.startswith(f"/{OSS_BUCKET}/")
            if oss_put:
                environ.pop("HTTP_IF_NONE_MATCH", None)
                if headers.get("x-oss-forbid-overwrite", "").lower() == "true":
                    environ["HTTP_IF_NONE_MATCH"] = "*"
            captured: dict[str, Any] = {}

            def capture(status: str, response_headers: list[tuple[str, str]], *exc: Any) -> None:
                captured["status"], captured["headers"] = status, response_headers

            if method == "PUT" and self.replay_next_put:
                self.replay_next_put = False
                raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                environ["wsgi.input"] = io.BytesIO(raw)
                b"".join(self.app(dict(environ), capture))
                environ["wsgi.input"] = io.BytesIO(raw)
            body = b"".join(self.app(environ, capture))
            status, response_headers = captured["status"], captured["headers"]
            if oss_put and status.startswith("412"):
                status, body = "409 Conflict", _OSS_CONFLICT
                response_headers = [("Content-Type", "application/xml")]
            response_headers = [
                (k, v) for k, v in response_headers if k.lower() != "content-length"
            ] + [("Content-Length", str(len(body)))]
            start_response(status, response_headers)
            return [body]

    def puts(self, bucket: str) -> list[WireRequest]:
        return [r for r in self.requests if r.method == "PUT" and r.path.startswith(f"/{bucket}/")]


class GatedMotoServer(ThreadedMotoServer):
    """moto's threaded server with `WireGate` in front of the app."""

    def __init__(self) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.gate = WireGate(DomainDispatcherApplication(create_backend_app))
        self.endpoint = ""
        self.raw: Any = None

    def _server_entry(self) -> None:
        self._server = make_server(self._ip_address, self._port, self.gate, True)
        self._server_ready_event.set()
        self._server.serve_forever()


@contextmanager
def serving_buckets() -> Iterator[GatedMotoServer]:
    """A gated moto server on loopback holding the plain and the OSS-emulating bucket; `raw` is a
    boto3 client on it and `endpoint` its URL (the store suite's, and the providers' own stores')."""
    server = GatedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    server.endpoint = f"http://{host}:{port}"
    server.raw = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1", aws_access_key_id="x",
                              aws_secret_access_key="y", config=Config(s3={"addressing_style": "path"}))
    for bucket in (PLAIN_BUCKET, OSS_BUCKET):
        server.raw.create_bucket(Bucket=bucket)
    try:
        yield server
    finally:
        server.raw.close()
        server.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[GatedMotoServer]:
    with serving_buckets() as server:
        yield server


@pytest.fixture(scope="session")
def moto_endpoint(moto_server: GatedMotoServer) -> str:
    host, port = moto_server.get_host_and_port()
    return f"http://{host}:{port}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url_for(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str], str]:
    """backend name -> a fresh store URL (the moto server starts only when asked for)."""

    def make(backend: str) -> str:
        if backend == "sqlite":
            return "sqlite:///" + str(tmp_path / f"state-{uuid.uuid4().hex[:8]}.sqlite")
        if backend == "memory":
            return "memory://"
        return s3_url(request.getfixturevalue("moto_endpoint"), backend)

    return make


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(backend: str, store_url_for: Callable[[str], str], clock: FakeClock) -> Iterator[Store]:
    opened = open_store(store_url_for(backend), env=CREDS, clock=clock)
    yield opened
    opened.close()
