"""The shared infrastructure: environment parsers, background servers, provider logs."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from crhelper import Provider
from crhelper.config import (
    ConfigError,
    DeliverySettings,
    Settings,
    env_base64,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_port,
)
from crhelper.servers import LocalHTTPServer, LoopThread, ServerThread
from crhelper.testing import ResponseServer, make_event
from handlers.routes.backends import RouterConfig
from handlers.routes.provider import build_provider
from handlers.routes.repository import RouteRepository
from handlers.routes.model import Route

# --- environment parsers ---------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [("1", True), ("YES", True), (" on ", True), ("true", True),
                                          ("0", False), ("No", False), ("off", False), ("FALSE", False)])
def test_env_bool_values(raw: str, expected: bool) -> None:
    assert env_bool({"X_FLAG": raw}, "X_FLAG", not expected) is expected


def test_unset_or_empty_means_the_default() -> None:
    for env in ({}, {"X": ""}):
        assert env_bool(env, "X", True) is True
        assert env_float(env, "X", 2.5) == 2.5
        assert env_float(env, "X", None) is None
        assert env_int(env, "X", 7) == 7
        assert env_port(env, "X", 8080) == 8080
        assert env_choice(env, "X", "auto", ("auto", "local")) == "auto"
        assert env_base64(env, "X", 32) is None


@pytest.mark.parametrize("call,message", [
    (lambda: env_bool({"V": "maybe"}, "V", True), "V: expected true or false, got 'maybe'"),
    (lambda: env_float({"V": "soon"}, "V", 1.0), "V: expected a number of seconds, got 'soon'"),
    (lambda: env_float({"V": "nan"}, "V", 1.0), "V: expected a finite number, got 'nan'"),
    (lambda: env_float({"V": "inf"}, "V", 1.0), "V: expected a finite number, got 'inf'"),
    (lambda: env_float({"V": "0.01"}, "V", 1.0, minimum=0.1), "V: must be at least 0.1, got 0.01"),
    (lambda: env_float({"V": "99"}, "V", 1.0, maximum=60), "V: must be at most 60, got 99.0"),
    (lambda: env_int({"V": "2.5"}, "V", 1), "V: expected a whole number, got '2.5'"),
    (lambda: env_int({"V": "٣"}, "V", 1), "V: expected a whole number, got '٣'"),
    (lambda: env_int({"V": "-1"}, "V", 1, minimum=0), "V: must be at least 0, got -1"),
    (lambda: env_int({"V": "11"}, "V", 1, maximum=10), "V: must be at most 10, got 11"),
    (lambda: env_port({"V": "eighty"}, "V", 80), "V: must be a port number 1-65535, got 'eighty'"),
    (lambda: env_port({"V": "0"}, "V", 80), "V: must be a port number 1-65535, got '0'"),
    (lambda: env_port({"V": "70000"}, "V", 80, allow_any=True), "V: must be a port number 0-65535, got '70000'"),
    (lambda: env_choice({"V": "PATCH"}, "V", "POST", ("POST", "PUT")), "V: must be one of POST, PUT, got 'PATCH'"),
    (lambda: env_choice({"V": "line\nbreak"}, "V", "a", ("a", "b")), "V: must be one of a, b, got 'line\\nbreak'"),
])
def test_errors_name_the_variable_the_value_and_the_rule(call: Any, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)  # callers that catch ValueError keep working


def test_parsed_values() -> None:
    assert env_float({"V": " 0.5 "}, "V", 1.0) == 0.5
    assert env_int({"V": "+42"}, "V", 1) == 42
    assert env_port({"V": "0"}, "V", 80, allow_any=True) == 0
    assert env_choice({"V": " Put "}, "V", "POST", ("POST", "PUT")) == "PUT"
    assert env_choice({"V": "LOCAL"}, "V", "auto", ("auto", "local")) == "local"
    key = bytes(range(32))
    assert env_base64({"K": base64.b64encode(key).decode()}, "K", 32) == key


def test_base64_errors_never_show_the_key() -> None:
    short = base64.b64encode(b"secret-ish").decode()
    with pytest.raises(ConfigError) as info:
        env_base64({"K": short}, "K", 32)
    assert str(info.value) == "K: must be Base64 of 32 bytes, got 10 bytes"
    with pytest.raises(ConfigError) as info:
        env_base64({"K": "not base64 at all!"}, "K", 32)
    assert str(info.value) == "K: must be Base64 of 32 bytes, got something that is not Base64"
    assert short not in str(info.value) and "at all" not in str(info.value)


def test_settings_keep_their_defaults_and_names() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({}).delivery == DeliverySettings()
    parsed = Settings.from_env({"CRHELPER_RESPONSE_ATTEMPTS": "2.7", "CRHELPER_TLS_VERIFY": "off",
                                "CRHELPER_REENTRY": "MNS", "CRHELPER_STEP_LEASE": "3"})
    assert (parsed.delivery.max_attempts, parsed.delivery.verify_tls, parsed.reentry, parsed.step_lease) == (
        2, False, "mns", 3.0)
    with pytest.raises(ConfigError, match="^CRHELPER_READ_TIMEOUT: must be at least 0.1, got 0.0$"):
        Settings.from_env({"CRHELPER_READ_TIMEOUT": "0"})


def test_the_process_settings_are_parsed_again_only_when_one_of_their_variables_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import crhelper.config as config

    for name in config._SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    first = Settings.from_env()
    assert Settings.from_env() is first  # unchanged environment: the parsed settings again
    monkeypatch.setenv("CRHELPER_REENTRY", "none")
    assert Settings.from_env().reentry == "none"
    monkeypatch.setenv("CRHELPER_READ_TIMEOUT", "0")
    for _ in range(2):  # a bad value is refused every time, never remembered as the settings
        with pytest.raises(ConfigError, match="^CRHELPER_READ_TIMEOUT: must be at least 0.1, got 0.0$"):
            Settings.from_env()
    monkeypatch.delenv("CRHELPER_READ_TIMEOUT")
    monkeypatch.delenv("CRHELPER_REENTRY")
    assert Settings.from_env() == first
    monkeypatch.setenv("UNRELATED_VARIABLE", "1")
    assert Settings.from_env() == first
    # every variable the parser reads is part of the cache's key
    reads: list[str] = []

    class Recording(dict):  # type: ignore[type-arg]
        def get(self, name: str, default: Any = None) -> Any:
            reads.append(name)
            return super().get(name, default)

    Settings.from_env(Recording())
    assert set(reads) <= set(config._SETTINGS_VARIABLES)


def test_router_config_uses_the_parsers() -> None:
    with pytest.raises(ConfigError, match="^CRHELPER_ROUTER_BACKEND: must be one of local, flynn, got 'k8s'$"):
        RouterConfig.from_env({"CRHELPER_ROUTER_BACKEND": "k8s"})
    with pytest.raises(ConfigError, match="^CRHELPER_ROUTER_HTTPS_PORT: must be a port number 1-65535, got '0'$"):
        RouterConfig.from_env({"CRHELPER_ROUTER_HTTPS_PORT": "0"})
    config = RouterConfig.from_env({"CRHELPER_ROUTER_HTTP_PORT": "8000"})
    assert (config.backend, config.http_port, config.https_port) == ("local", 8000, 4433)


# --- background servers ----------------------------------------------------------------------


class _Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the connection stays open after the answer

    server: "_Recording"

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.server.handler_threads.append(threading.current_thread())
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


class _Recording(LocalHTTPServer):
    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.handler_threads: list[threading.Thread] = []
        super().__init__(address, handler)


class _JoinedServer(_Recording):
    """Like the local MNS: handler threads are joined when the server closes."""

    daemon_threads = False
    block_on_close = True


@pytest.mark.parametrize("server_class", [_Recording, _JoinedServer])
def test_server_thread_stops_promptly_with_an_idle_keep_alive_connection(server_class: type[_Recording]) -> None:
    server = server_class(("127.0.0.1", 0), _Hello)
    serving = ServerThread(server, "test-http").start()
    port = server.port
    conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"ok"):
            answer += conn.recv(1024)
        assert answer.startswith(b"HTTP/1.1 200")
        (handler,) = server.handler_threads
        assert handler.is_alive()  # waiting for the next request on the idle connection
        started = time.monotonic()
        stopper = threading.Thread(target=serving.stop, daemon=True)
        stopper.start()
        stopper.join(2.0)
        assert not stopper.is_alive(), "stop() waits for an idle keep-alive connection"
        assert time.monotonic() - started < 1.0
        assert conn.recv(1024) == b""  # the idle connection was closed by the server, not left open
        handler.join(1.0)
        assert not handler.is_alive()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        serving.stop()  # idempotent
    finally:
        conn.close()


def test_server_thread_logs_handler_bugs_but_not_clients_that_leave(capsys: pytest.CaptureFixture[str]) -> None:
    class Buggy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/bug":
                raise KeyError("a bug in the handler")
            raise ConnectionResetError("the client left")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    from crhelper.logs import configure

    configure()
    with ServerThread(LocalHTTPServer(("127.0.0.1", 0), Buggy), "test-buggy") as serving:
        port = serving.server.server_address[1]
        for path in ("/left", "/bug"):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(f"GET {path} HTTP/1.0\r\n\r\n".encode())
                assert conn.recv(1024) == b""
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    errors = [line for line in lines if line.get("logger") == "crhelper.servers"]
    assert len(errors) == 1 and "KeyError" in errors[0]["exception"]
    assert "ConnectionResetError" not in json.dumps(lines)


class _EchoLoop(LoopThread):
    """An asyncio TCP echo server on a LoopThread, the way the router and controller use it."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__("test-echo-loop")
        self.fail = fail
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def startup(self) -> None:
        if self.fail:
            raise OSError("address in use")

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(100))
            await writer.drain()
            writer.close()

        self.server = await asyncio.start_server(echo, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def cleanup(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def test_loop_thread_runs_and_stops() -> None:
    with _EchoLoop() as running:
        assert running._thread.is_alive()  # noqa: SLF001

        async def on_loop() -> int:
            return threading.get_ident()

        assert running.run(on_loop()) == running._thread.ident  # noqa: SLF001
        with socket.create_connection(("127.0.0.1", running.port), timeout=5) as conn:
            conn.sendall(b"ping")
            assert conn.recv(100) == b"ping"
    assert running.stopped and not running._thread.is_alive()  # noqa: SLF001
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", running.port), timeout=1).close()
    running.stop()  # idempotent


def test_loop_thread_start_failure_propagates_and_stop_still_ends_the_thread() -> None:
    failing = _EchoLoop(fail=True)
    with pytest.raises(OSError, match="address in use"):
        failing.start()
    failing.stop()
    assert failing.stopped and not failing._thread.is_alive()  # noqa: SLF001


def test_loop_thread_never_started_stops_at_once() -> None:
    idle = _EchoLoop()
    started = time.monotonic()
    idle.stop()
    assert idle.stopped and time.monotonic() - started < 0.5


# --- the routing provider: logs through crhelper, several providers in one function -----------


@pytest.fixture()
def router_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path))
    for name in ("CRHELPER_ROUTER_BACKEND", "CRHELPER_ROUTER_DB", "CRHELPER_ROUTER_DEFAULT_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_routing_warning_on_create_is_a_crhelper_json_line_with_the_request_fields(
        router_home: Path, response_server: ResponseServer, capsys: pytest.CaptureFixture[str]) -> None:
    db = router_home / "router" / "routes.db"
    repo = RouteRepository(db)
    repo.create_app("first")
    # Another app already holds the domain the new app's default route would get.
    repo.create_route("first", Route(type="http", service="x", domain="shop.apps.test"))
    provider = build_provider(RouterConfig(db_path=str(db), default_domain="apps.test"))
    event = response_server.attach(make_event("Create", "Custom::App", {"Name": "shop"}, logical_resource_id="Shop"))
    capsys.readouterr()
    provider.handle(event)
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "SUCCESS"  # the app exists; only its default route was refused
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    warnings = [line for line in lines if "default route for app shop not created" in line["message"]]
    assert len(warnings) == 1, lines
    warning = warnings[0]
    assert warning["level"] == "WARNING" and warning["logger"] == "crhelper.routes.repository"
    assert {k: warning.get(k) for k in ("RequestType", "RequestId", "StackId", "LogicalResourceId", "ResourceType")} == {
        "RequestType": "Create", "RequestId": event["RequestId"], "StackId": event["StackId"],
        "LogicalResourceId": "Shop", "ResourceType": "Custom::App"}


def test_build_provider_registers_on_a_shared_provider(router_home: Path, response_server: ResponseServer) -> None:
    shared = Provider()

    @shared.create("Custom::Other")
    def create_other(props: dict, request: Any) -> None:
        return None

    assert build_provider(RouterConfig(db_path=str(router_home / "r.db")), provider=shared) is shared
    assert set(shared.types) == {"Custom::Other", "Custom::App", "Custom::Route"}
    for resource_type, props in (("Custom::Other", {}), ("Custom::App", {"Name": "web"})):
        event = response_server.attach(make_event("Create", resource_type, props))
        shared.handle(event)
        assert response_server.wait_for(event["RequestId"])["Status"] == "SUCCESS"
    shared.close()
