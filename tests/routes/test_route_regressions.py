"""Review findings: Go-style decoding, the delete guard across apps, and the Flynn client's update."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from handlers.routes import errors as E
from handlers.routes.flynn_client import FlynnClient
from handlers.routes.model import PARENT_REF_PREFIX, Route
from handlers.routes.repository import RouteRepository
from handlers.routes.validation import decode_route


@pytest.mark.parametrize("raw", ['{"type":"tcp","service":"s","port":3001.0}',
                                 '{"type":"tcp","service":"s","port":3e3}'])
def test_non_integer_json_number_for_port_is_a_syntax_error(raw: str) -> None:
    """Go's decoder refuses ``3001.0`` and ``3e3`` for an int32 field."""
    with pytest.raises(E.FlynnError) as info:
        decode_route(raw, "application/json")
    assert (info.value.status, info.value.code, info.value.message) == (400, "syntax_error", E.SYNTAX)


def test_deleting_an_app_keeps_the_guard_for_other_apps_sub_paths(repo: RouteRepository) -> None:
    repo.create_app("owner")
    repo.create_app("tenant")
    root = repo.create_route("owner", Route(type="http", service="w", domain="shared.example.com"))
    repo.create_route("owner", Route(type="http", service="w", domain="shared.example.com", path="/own/"))
    api = repo.create_route("tenant", Route(type="http", service="t", domain="shared.example.com", path="/api/"))
    with pytest.raises(E.FlynnError) as info:
        repo.delete_app("owner")
    assert (info.value.status, info.value.message) == (400, E.DEPENDENT_ROUTES)
    assert repo.get_route("owner", "http", root.id).path == "/"  # nothing was removed
    assert len(repo.list_routes("owner")) == 2
    repo.delete_route("tenant", "http", api.id)
    repo.delete_app("owner")  # its own sub-path goes before its `/`
    assert repo.list_routes() == []


class _FakeController(BaseHTTPRequestHandler):
    """Flynn's route GET and PUT as a real controller does them: PUT writes the body as given."""

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._send(self.server.stored)  # type: ignore[attr-defined]

    def do_PUT(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.puts.append(body)  # type: ignore[attr-defined]
        self._send({**self.server.stored, **body})  # type: ignore[attr-defined]

    def _send(self, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def fake_controller() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeController)
    server.daemon_threads = True
    server.puts = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize("stored,update", [
    ({"type": "tcp", "id": "r1", "service": "db", "port": 3007, "leader": False},
     Route(type="tcp", service="db2")),
    ({"type": "http", "id": "r1", "service": "web", "domain": "a.example.com", "path": "/", "leader": False},
     Route(type="http", service="web2", domain="a.example.com")),
])
def test_flynn_update_keeps_parent_ref_and_auto_assigned_port(fake_controller: ThreadingHTTPServer,
                                                              stored: dict[str, Any], update: Route) -> None:
    app_id = "6f9b1c9e-0d7e-4a43-9d55-2b0d8b3c1a11"
    fake_controller.stored = {**stored, "parent_ref": PARENT_REF_PREFIX + app_id}  # type: ignore[attr-defined]
    client = FlynnClient(f"http://127.0.0.1:{fake_controller.server_address[1]}", "key")
    try:
        updated = client.update_route(app_id, stored["type"], "r1", update)
    finally:
        client.close()
    sent = fake_controller.puts[0]  # type: ignore[attr-defined]
    assert sent["parent_ref"] == PARENT_REF_PREFIX + app_id  # Flynn writes it as given
    assert sent["service"] == update.service and updated.service == update.service
    if stored["type"] == "tcp":
        assert sent["port"] == 3007  # Flynn would write port 0 and fail its CHECK


def test_event_stream_ends_when_the_client_leaves(repo: RouteRepository) -> None:
    """A quiet SSE stream must not keep polling the store for a client that is gone."""
    import asyncio
    import time

    import requests

    from handlers.routes.controller import Controller, ControllerThread, parse_keys

    def tasks(server: ControllerThread) -> int:
        async def count() -> int:
            return len(asyncio.all_tasks())
        return asyncio.run_coroutine_threadsafe(count(), server.loop).result(5)

    with ControllerThread(Controller(repo, parse_keys("k"))) as server:
        baseline = tasks(server)
        with requests.get(server.url + "/events", stream=True, timeout=5, auth=("", "k"),
                          headers={"Accept": "text/event-stream"}) as resp:
            assert resp.status_code == 200
            assert tasks(server) > baseline
        deadline = time.monotonic() + 3
        while tasks(server) > baseline and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tasks(server) == baseline
