"""`crhelper serve` and its HTTP transport under faults: absurd bodies, BaseExceptions escaping handlers,
SIGTERM with handlers still running, SIGKILL mid-operation then restart, Host spoofing, idle connections.

Real processes and sockets: `crhelper serve` subprocesses, a waitress `BackgroundServer`, the capturing
ResponseServer, raw sockets for the connection flood.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests

from crhelper import Result
from crhelper.cli.serve import BackgroundServer
from crhelper.testing import ResponseServer, make_event
from faults_support import KILLED_STEP_PROVIDER
from crhelper.transports.http import SHUTDOWN_REASON, wsgi_app
from crhelper.transports.http_config import ENV_SIGN_KEY, EndpointConfig
from crhelper.transports.signature import signed_body

REPO = Path(__file__).resolve().parents[2]
HTTP_PROVIDERS = REPO / "tests" / "http" / "http_providers.py"


@pytest.fixture(autouse=True)
def _fast_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRHELPER_BACKOFF_BASE", "0.05")
    monkeypatch.setenv("CRHELPER_BACKOFF_CAP", "0.2")


class ServeProcess:
    """A `crhelper serve` subprocess; `url` once it printed its listening line."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crhelper.cli.serve", *args], cwd=cwd, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self._listening = threading.Event()
        self.url = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                self.url = match.group(1)
                self._listening.set()

    def wait_listening(self, timeout: float = 20) -> str:
        assert self._listening.wait(timeout), "".join(self.lines)[-3000:]
        return self.url

    def output(self) -> str:
        self._reader.join(5)
        return "".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture()
def serve_process(tmp_path: Path) -> Iterator[Any]:
    started: list[ServeProcess] = []

    def start(*args: str, **env: str) -> ServeProcess:
        merged = {**os.environ, "CRHELPER_LOG_LEVEL": "INFO", "CRHELPER_BACKOFF_BASE": "0.05",
                  "CRHELPER_BACKOFF_CAP": "0.2", "PYTHONPATH": str(REPO), **env}
        process = ServeProcess(list(args), merged, tmp_path)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


# --------------------------------------------------------------------------------- absurd bodies
def test_absurd_bodies_get_a_precise_4xx_never_a_5xx(providers: Any, response_server: ResponseServer) -> None:
    provider = providers()

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    with BackgroundServer(wsgi_app(provider)) as server:
        deep = "[" * 100_000 + "]" * 100_000
        reply = requests.post(server.url, data=deep, headers={"Content-Type": "application/json"}, timeout=10)
        assert reply.status_code == 413  # over --max-body first
        nested = '{"a":' * 5000 + "1" + "}" * 5000
        reply = requests.post(server.url, data=nested, headers={"Content-Type": "application/json"}, timeout=10)
        assert reply.status_code == 400, reply.text
        assert reply.json()["Message"] == "must not nest JSON objects or arrays more than 100 levels deep"
        event = response_server.attach(make_event("Create", "Custom::Echo", {}))
        in_props = json.dumps({**event, "ResourceProperties": {"X": "PLACEHOLDER"}}).replace(
            '"PLACEHOLDER"', "[" * 900 + "]" * 900)
        reply = requests.post(server.url, data=in_props, headers={"Content-Type": "application/json"}, timeout=10)
        assert reply.status_code == 400 and "nest" in reply.json()["Message"], reply.text
        form = "RequestType=Create&ResourceProperties=" + "%5B" * 5000 + "%5D" * 5000
        reply = requests.post(server.url, data=form, timeout=10,
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert reply.status_code == 400 and "nest" in reply.json()["Message"], reply.text
        for raw, content_type in [(b"\xff\xfe{\x00", "application/json"), (b'{"a": "\xc3"}', "application/json"),
                                  (b"\x00" * 2000, "application/json"), (b"%ff%fe=%00", "application/x-www-form-urlencoded"),
                                  (b'{"a": 1e999999}', "application/json"), (b"[]" * 500, "application/json"),
                                  (b'{"a":' + b'"\\ud800"}', "application/json")]:
            reply = requests.post(server.url, data=raw, headers={"Content-Type": content_type}, timeout=10)
            assert 400 <= reply.status_code < 500, (raw[:20], reply.status_code, reply.text)
        # Still serving: a real request is answered.
        # The one with a readable ResponseURL was answered FAILED there as well as refused in-band.
        assert response_server.wait_for(event["RequestId"], timeout=10)["Status"] == "FAILED"
        real = response_server.attach(make_event("Create", "Custom::Echo", {}))
        assert requests.post(server.url, json=real, timeout=10).status_code == 200
        assert response_server.wait_for(real["RequestId"], timeout=10)["Status"] == "SUCCESS"


def test_depth_scan_ignores_brackets_inside_strings() -> None:
    from crhelper.transports.http import MAX_JSON_DEPTH, json_depth_exceeds

    assert not json_depth_exceeds(json.dumps({"a": "[" * 5000, "b": "\\\"{" * 500}), MAX_JSON_DEPTH)
    assert not json_depth_exceeds("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, MAX_JSON_DEPTH)
    assert json_depth_exceeds("[" * (MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)


# ------------------------------------------------------------------ BaseExceptions in async handlers
@pytest.mark.parametrize("store", ["none", "default"])
def test_base_exceptions_escaping_async_handlers_are_answered_failed_and_the_pool_survives(
    providers: Any, response_server: ResponseServer, store: str
) -> None:
    provider = providers(store="none") if store == "none" else providers()
    escapes = {"KeyboardInterrupt": KeyboardInterrupt, "CancelledError": asyncio.CancelledError, "SystemExit": SystemExit}

    @provider.create("Custom::Escape")
    def create(props: dict, request: Any) -> Result:
        raise escapes[props["Kind"]]()

    @provider.create("Custom::Echo")
    def echo(props: dict, request: Any) -> Result:
        return Result(physical_id="echo-ok")

    config = EndpointConfig(workers=1, backlog=4)
    with BackgroundServer(wsgi_app(provider, config=config)) as server:
        for kind in escapes:
            event = response_server.attach(make_event("Create", "Custom::Escape", {"Kind": kind}))
            assert requests.post(server.url, json=event, timeout=10).status_code == 200
            body = response_server.wait_for(event["RequestId"], timeout=10)
            assert body["Status"] == "FAILED", body
            assert kind in body["Reason"] or "interrupt" in body["Reason"].lower() or "Exit" in body["Reason"], body
        after = response_server.attach(make_event("Create", "Custom::Echo", {}))
        assert requests.post(server.url, json=after, timeout=10).status_code == 200
        assert response_server.wait_for(after["RequestId"], timeout=10)["PhysicalResourceId"] == "echo-ok"
    for capture in response_server.captures:  # exactly one answer each
        assert len(response_server.responses_for(capture.body["RequestId"])) == 1


@pytest.mark.parametrize("escape", [KeyboardInterrupt, asyncio.CancelledError, SystemExit])
def test_transport_answers_failed_when_the_handle_callable_itself_escapes(
    providers: Any, response_server: ResponseServer, escape: type[BaseException]
) -> None:
    """Whatever the provider core catches, the transport's own layer must not leave the request unanswered:
    a `handle` hook (e.g. a store or policy put in front of the provider) escaping with a BaseException."""
    provider = providers()

    @provider.create("Custom::Echo")
    def echo(props: dict, request: Any) -> Result:
        return Result(physical_id="echo-ok")

    def handle(event: dict) -> object:
        if event["ResourceProperties"].get("Escape"):
            raise escape()
        return provider.handle(event)

    with BackgroundServer(wsgi_app(provider, config=EndpointConfig(workers=1), handle=handle)) as server:
        event = response_server.attach(make_event("Create", "Custom::Echo", {"Escape": True}))
        assert requests.post(server.url, json=event, timeout=10).status_code == 200
        body = response_server.wait_for(event["RequestId"], timeout=10)
        assert body["Status"] == "FAILED" and escape.__name__ in body["Reason"], body
        after = response_server.attach(make_event("Create", "Custom::Echo", {}))
        assert requests.post(server.url, json=after, timeout=10).status_code == 200
        assert response_server.wait_for(after["RequestId"], timeout=10)["PhysicalResourceId"] == "echo-ok"


# ------------------------------------------------------------------------------------- SIGTERM
@pytest.mark.slow
def test_sigterm_lets_handlers_finish_within_the_grace_then_answers_failed_and_exits_0(
    serve_process: Any, response_server: ResponseServer, tmp_path: Path
) -> None:
    serve = serve_process(f"{HTTP_PROVIDERS}:provider", "--port", "0", "--workers", "4", "--grace", "2",
                          CRHELPER_STORE=f"sqlite:///{tmp_path / 'state.sqlite'}")
    url = serve.wait_listening()
    quick = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 1}))
    stuck = response_server.attach(make_event("Create", "Custom::Slow", {"Seconds": 60}))
    for event in (quick, stuck):
        assert requests.post(url, json=event, timeout=10).status_code == 200
    time.sleep(0.3)
    signalled = time.monotonic()
    serve.process.send_signal(signal.SIGTERM)
    assert serve.process.wait(15) == 0, serve.output()[-3000:]
    took = time.monotonic() - signalled
    assert 1.5 <= took < 8, took  # waited for the grace (2 s), not for the stuck handler (60 s)
    assert response_server.responses_for(quick["RequestId"])[0]["Status"] == "SUCCESS"
    (answer,) = response_server.responses_for(stuck["RequestId"])
    assert answer["Status"] == "FAILED" and answer["Reason"] == SHUTDOWN_REASON
    with pytest.raises(requests.ConnectionError):  # nothing listens any more
        requests.post(url, json=quick, timeout=2)


# ---------------------------------------------------------------------------- SIGKILL + restart



@pytest.mark.slow
def test_restart_after_sigkill_resumes_the_operation_without_any_new_request(
    serve_process: Any, response_server: ResponseServer, tmp_path: Path
) -> None:
    (tmp_path / "long_provider.py").write_text(KILLED_STEP_PROVIDER)
    env = {"CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}", "CRHELPER_STEP_LEASE": "2"}
    marker = tmp_path / "hanging"
    event = response_server.attach(make_event("Create", "Custom::Steps", {"Marker": str(marker)}))
    first = serve_process(f"{tmp_path / 'long_provider.py'}:provider", "--port", "0", **env)
    url = first.wait_listening()
    assert requests.post(url, json=event, timeout=10).status_code == 200
    deadline = time.monotonic() + 15
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), first.output()[-3000:]
    first.process.kill()
    first.process.wait(10)
    assert response_server.responses_for(event["RequestId"]) == []

    restarted = time.monotonic()
    second = serve_process(f"{tmp_path / 'long_provider.py'}:provider", "--port", "0", **env)
    second.wait_listening()
    # The step lease (2 s) must lapse first; then the restarted server's own recovery finishes it.
    body = response_server.wait_for(event["RequestId"], timeout=12)
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Attempt": 1}, body
    assert time.monotonic() - restarted < 12
    time.sleep(1.0)
    assert len(response_server.responses_for(event["RequestId"])) == 1


# ------------------------------------------------------------------------------ Host spoofing
def test_sign_key_without_public_url_refuses_to_start(serve_process: Any) -> None:
    serve = serve_process(f"{HTTP_PROVIDERS}:provider", "--port", "0", **{ENV_SIGN_KEY: "k3y"})
    assert serve.process.wait(20) == 2
    output = serve.output()
    assert "--public-url" in output and ENV_SIGN_KEY in output and "Host" in output, output


def test_spoofed_host_header_does_not_pass_the_signature_check(
    serve_process: Any, response_server: ResponseServer
) -> None:
    public = "https://cr.example.com"
    serve = serve_process(f"{HTTP_PROVIDERS}:provider", "--port", "0", "--public-url", public, **{ENV_SIGN_KEY: "k3y"})
    url = serve.wait_listening()
    event = response_server.attach(make_event("Create", "Custom::Echo", {"Name": "s"}))
    # Signed for another endpoint sharing the key; the Host header names that endpoint.
    elsewhere = signed_body(event, key="k3y", url="https://staging.example.com/")
    spoofed = requests.post(url + "/", json=elsewhere, headers={"Host": "staging.example.com"}, timeout=10)
    assert spoofed.status_code == 401 and spoofed.json()["Field"] == "Signature.Value", spoofed.text
    genuine = requests.post(url + "/", json=signed_body(event, key="k3y", url=public + "/"), timeout=10)
    assert genuine.status_code == 200, genuine.text
    assert response_server.wait_for(event["RequestId"], timeout=10)["Status"] == "SUCCESS"


def test_background_server_checks_signatures_against_its_own_url(providers: Any, response_server: ResponseServer) -> None:
    provider = providers(store="none")

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    with BackgroundServer(wsgi_app(provider, config=EndpointConfig(sign_key="k3y"))) as server:
        event = response_server.attach(make_event("Create", "Custom::Echo", {}))
        spoofed = signed_body(event, key="k3y", url="http://other.example:1/")
        reply = requests.post(server.url + "/", json=spoofed, headers={"Host": "other.example:1"}, timeout=10)
        assert reply.status_code == 401
        assert requests.post(server.url + "/", json=signed_body(event, key="k3y", url=server.url + "/"),
                             timeout=10).status_code == 200
        response_server.wait_for(event["RequestId"], timeout=10)


# -------------------------------------------------------------------------- connection flood
def test_200_idle_and_half_sent_connections_do_not_lock_out_a_real_request(
    providers: Any, response_server: ResponseServer
) -> None:
    provider = providers(store="none")

    @provider.create("Custom::Echo")
    def create(props: dict, request: Any) -> Result:
        return Result(physical_id="echo")

    sockets: list[socket.socket] = []
    with BackgroundServer(wsgi_app(provider), threads=4) as server:
        host, port = server.url[len("http://"):].rsplit(":", 1)
        try:
            for index in range(200):
                sock = socket.create_connection((host, int(port)), timeout=5)
                if index % 2:  # half a request: headers promise a body that never comes
                    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 1000\r\n\r\n{\"RequestType\":")
                sockets.append(sock)
            time.sleep(0.5)
            event = response_server.attach(make_event("Create", "Custom::Echo", {}))
            started = time.monotonic()
            reply = requests.post(server.url, json=event, timeout=5)
            assert reply.status_code == 200 and time.monotonic() - started < 2.0
            assert response_server.wait_for(event["RequestId"], timeout=5)["Status"] == "SUCCESS"
            sync = requests.post(server.url + "/sync", json=make_event("Create", "Custom::Echo", {}), timeout=5)
            assert sync.status_code == 200 and time.monotonic() - started < 2.0
        finally:
            for sock in sockets:
                sock.close()


def test_serve_help_documents_the_new_options() -> None:
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.serve", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    text = " ".join(done.stdout.split())
    for option in ("--grace", "--connection-limit", "--channel-timeout", "--cleanup-interval"):
        assert option in text
    assert "default 20" in text and "default 1000" in text and "e.g. --grace 5" in text


QUEUED_PROVIDER = '''
import time
from crhelper import Provider, Result

provider = Provider()

@provider.create("Custom::Sleepy")
def create(props, request):
    time.sleep(float(props["Sleep"]))
    return Result(physical_id=f"sleepy-{props['Sleep']}")
'''


@pytest.mark.slow
def test_requests_acknowledged_but_still_queued_when_serve_is_killed_are_answered_after_a_restart(
    serve_process: Any, response_server: ResponseServer, tmp_path: Path
) -> None:
    """ROS has its 200 and never resends: an accepted request is in the store before the 200, so the
    restarted server's recovery runs the one that was still waiting for a worker."""
    (tmp_path / "queued_provider.py").write_text(QUEUED_PROVIDER)
    env = {"CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}"}
    spec = f"{tmp_path / 'queued_provider.py'}:provider"
    first = serve_process(spec, "--port", "0", "--workers", "1", **env)
    url = first.wait_listening()
    running = response_server.attach(make_event("Create", "Custom::Sleepy", {"Sleep": 4}))
    queued = response_server.attach(make_event("Create", "Custom::Sleepy", {"Sleep": 0}))
    assert requests.post(url, json=running, timeout=10).status_code == 200
    assert requests.post(url, json=queued, timeout=10).status_code == 200
    time.sleep(0.5)
    first.process.kill()
    first.process.wait(10)
    assert response_server.responses_for(queued["RequestId"]) == []
    second = serve_process(spec, "--port", "0", **env)
    second.wait_listening()
    body = response_server.wait_for(queued["RequestId"], timeout=15)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "sleepy-0"
    # The one that was running is resumed too (its holder died with the first server).
    assert response_server.wait_for(running["RequestId"], timeout=20)["Status"] == "SUCCESS"
    time.sleep(0.3)
    assert len(response_server.responses_for(queued["RequestId"])) == 1
    assert len(response_server.responses_for(running["RequestId"])) == 1


@pytest.mark.parametrize("breakage", ["missing RequestType", "deep properties"])
def test_a_malformed_async_request_with_a_readable_url_is_also_answered_failed_there(
    providers: Any, response_server: ResponseServer, breakage: str
) -> None:
    provider = providers()
    provider.create("Custom::Echo")(lambda props, request: Result(physical_id="echo"))
    event = response_server.attach(make_event("Create", "Custom::Echo"))
    if breakage == "missing RequestType":
        del event["RequestType"]
        text = json.dumps(event)
    else:
        text = json.dumps(event)[:-1] + ', "Deep": ' + "[" * 5000 + "]" * 5000 + "}"
    with BackgroundServer(wsgi_app(provider)) as server:
        for _ in range(2):  # the second POST is a duplicate: refused again, not answered again
            reply = requests.post(server.url, data=text, headers={"Content-Type": "application/json"}, timeout=10)
            assert reply.status_code == 400
        body = response_server.wait_for(event["RequestId"], timeout=5)
        time.sleep(0.3)
    assert body["Status"] == "FAILED" and body["Reason"].startswith("invalid request:"), body
    assert len(response_server.responses_for(event["RequestId"])) == 1
