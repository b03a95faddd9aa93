"""deploy.md §"faithful deploy path" 3 and 4: 404 on get -> create, already-exists on create -> update,
and FC 3.0's lastUpdateStatus waited for. Both are made at the wire by an HTTP relay in front of the local
Function Compute: on the 404 of a watched GET it creates the resource itself before passing the 404 on
(someone else's create between deploy's get and its create: deploy's create meets 409 ...AlreadyExists),
or it rewrites GetFunction's answer (an update FC is still applying, or one that failed)."""
from __future__ import annotations

import base64
import http.client
import io
import json
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from crhelper.cli.main import main
from crhelper.packaging.plan import INDEX_SOURCE

pytestmark = pytest.mark.slow

HELLO = Path(__file__).resolve().parent / "deploy_hello.py"
SPEC = f"{HELLO}:provider"


def zip_bytes(marker: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in (("index.py", INDEX_SOURCE), ("deploy_hello.py", (HELLO.read_text() + marker).encode())):
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return buffer.getvalue()


class Relay(ThreadingHTTPServer):
    """Passes every request on to `upstream` unchanged (Host header included, so signatures hold); on the
    first 404 answer to a watched `GET path`, runs that path's action before answering."""

    daemon_threads = True

    def __init__(self, upstream: str, actions: dict[str, Callable[[], None]],
                 rewrite: Callable[[str, str, bytes], bytes] | None = None) -> None:
        self.upstream, self.actions, self.fired = upstream, dict(actions), []  # type: ignore[var-annotated]
        self.rewrite = rewrite  # (method, path, FC's answer body) -> the body passed on
        super().__init__(("127.0.0.1", 0), _RelayHandler)


class _RelayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _relay(self) -> None:
        server: Relay = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection(server.upstream, timeout=30)
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            upstream.putheader(name, value)
        upstream.endheaders(body or None)
        answer = upstream.getresponse()
        data = answer.read()
        path = self.path.split("?", 1)[0]
        if self.command == "GET" and answer.status == 404 and path in server.actions:
            server.actions.pop(path)()
            server.fired.append(path)
        if server.rewrite is not None and answer.status == 200:
            data = server.rewrite(self.command, path, data)
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()

    do_GET = do_POST = do_PUT = do_DELETE = _relay

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from crhelper.local.fc_server import LocalFunctionCompute

    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("fc-state")) as server:
        yield server


def relay(fc: Any, actions: dict[str, Callable[[], None]],
          rewrite: Callable[[str, str, bytes], bytes] | None = None) -> Iterator[Relay]:
    server = Relay(fc.endpoint.removeprefix("http://"), actions, rewrite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def deploy(endpoint: str, fc: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> tuple[int, Any]:
    zip_path = tmp_path / "code.zip"
    zip_path.write_bytes(zip_bytes())
    capsys.readouterr()
    code = main(["deploy", SPEC, "--endpoint", endpoint, "--region", fc.region, "--zip", str(zip_path),
                 "--timer", "none", "--json", *args])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else out.err


def changes(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["action"], s["kind"]) for s in result["steps"] if s["action"] != "unchanged"]


def test_fc3_a_function_created_between_get_and_create_is_updated(
        fc: Any, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from alibabacloud_fc20230330 import models

    def racer() -> None:  # another deploy, with other code and no environment
        fc.client3().create_function(models.CreateFunctionRequest(body=models.CreateFunctionInput(
            function_name="racy3", runtime="python3.12", handler="index.handler",
            code=models.InputCodeLocation(zip_file=base64.b64encode(zip_bytes("\n# racer\n")).decode()))))

    for server in relay(fc, {"/2023-03-30/functions/racy3": racer}):
        code, result = deploy(f"127.0.0.1:{server.server_address[1]}", fc, capsys, tmp_path, "--function", "racy3")
        assert server.fired == ["/2023-03-30/functions/racy3"]  # the race did happen
    assert code == 0, result
    assert changes(result) == [("update", "function"), ("update", "code"), ("create", "async-config")], result
    held = fc.client3().get_function("racy3", models.GetFunctionRequest()).body
    assert held.environment_variables == {"CRHELPER_PROVIDER": "deploy_hello:provider"}


def test_fc2_a_service_and_function_created_between_get_and_create_are_updated(
        fc: Any, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    racer_zip = tmp_path / "racer.zip"
    racer_zip.write_bytes(zip_bytes("\n# racer\n"))

    def service() -> None:
        fc.client().create_service("racesvc")

    def function() -> None:
        fc.client().create_function("racesvc", "racy2", "python3.10", "index.handler", codeZipFile=str(racer_zip))

    watched = {"/2016-08-15/services/racesvc": service, "/2016-08-15/services/racesvc/functions/racy2": function}
    for server in relay(fc, watched):
        code, result = deploy(f"127.0.0.1:{server.server_address[1]}", fc, capsys, tmp_path, "--fc-version", "2",
                              "--service", "racesvc", "--function", "racy2", "--account-id", fc.account_id)
        assert sorted(server.fired) == sorted(watched)
    assert code == 0, result
    assert ("create", "function") not in changes(result) and ("create", "service") not in changes(result), result
    assert ("update", "function") in changes(result) and ("update", "code") in changes(result), result
    held = fc.client().get_function("racesvc", "racy2").data
    assert held["environmentVariables"] == {"CRHELPER_PROVIDER": "deploy_hello:provider"}


def status_rewrite(statuses: list[str], reason: str = "") -> Callable[[str, str, bytes], bytes]:
    """GetFunction of `racy3`-style names answers the next of `statuses` (the last one repeats)."""
    def rewrite(method: str, path: str, data: bytes) -> bytes:
        if method != "GET" or not path.startswith("/2023-03-30/functions/") or path.count("/") != 3:
            return data
        body = json.loads(data)
        body["lastUpdateStatus"] = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        body["lastUpdateStatusReason"] = reason
        return json.dumps(body).encode()
    return rewrite


def test_fc3_deploy_waits_while_fc_applies_the_update_and_reports_a_failed_one(
        fc: Any, keys: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # GetFunction: deploy's first look (function absent: 404, not rewritten), then InProgress twice, Successful.
    statuses = ["InProgress", "InProgress", "Successful"]
    started = time.monotonic()
    for server in relay(fc, {}, status_rewrite(statuses)):
        code, result = deploy(f"127.0.0.1:{server.server_address[1]}", fc, capsys, tmp_path, "--function", "slow3")
    assert code == 0 and ("create", "function") in changes(result), result
    assert statuses == ["Successful"] and time.monotonic() - started >= 2.0  # both InProgress answers waited out
    for server in relay(fc, {}, status_rewrite(["Failed"], "the image could not be pulled")):
        code, failed = deploy(f"127.0.0.1:{server.server_address[1]}", fc, capsys, tmp_path, "--function", "slow3",
                              "--memory", "1024")
    assert code == 2 and failed["error"] == {
        "kind": "error", "problem": "FC could not apply the update of slow3: the image could not be pulled",
        "next_step": "fix what FC names, then deploy again"}, failed
