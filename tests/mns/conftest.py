"""Fixtures for the MNS tests: a LocalMNS account and a push receiver that verifies signatures."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from crhelper import mns_push
from crhelper.local.mns_server import LocalMNS


@pytest.fixture(scope="module")
def local_mns() -> Iterator[LocalMNS]:
    with LocalMNS(retry_time_scale=0.005) as mns:
        yield mns


@pytest.fixture()
def account(local_mns: LocalMNS) -> Any:
    return local_mns.account()


@pytest.fixture()
def name() -> str:
    """A fresh queue/topic name so tests sharing one LocalMNS never collide."""
    return "t-" + uuid.uuid4().hex[:12]


@dataclass
class CapturedPush:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    verdict: mns_push.PushVerdict | None
    error: str | None


@dataclass
class PushReceiver:
    """An HTTP endpoint that verifies each push with mns_push.verify and answers with scripted statuses."""

    allowed_hosts: set[str]
    statuses: list[int] = field(default_factory=list)
    pushes: list[CapturedPush] = field(default_factory=list)
    url: str = ""
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[CapturedPush]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.pushes) >= count, timeout=timeout)
            return list(self.pushes)


@pytest.fixture()
def push_receiver(local_mns: LocalMNS) -> Iterator[PushReceiver]:
    receiver = PushReceiver(allowed_hosts={"127.0.0.1"})

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = dict(self.headers.items())
            verdict, error = None, None
            try:
                verdict = mns_push.verify(
                    "POST", self.path, headers, body,
                    allowed_hosts=receiver.allowed_hosts, require_https=False,
                )
            except mns_push.PushVerificationError as exc:
                error = exc.reason
            status = receiver.statuses.pop(0) if receiver.statuses else (204 if verdict else 403)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            with receiver.arrived:
                receiver.pushes.append(CapturedPush("POST", self.path, headers, body, verdict, error))
                receiver.arrived.notify_all()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/notifications?token=abc"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
