"""Management calls of both FC versions through the real SDKs: round trips, FC's error codes, and
the FC 3.0 signature (a wrong secret, a replayed request). No invocation runs here (no processes)."""
from __future__ import annotations

import base64
import http.client
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import fc2
import pytest
from alibabacloud_fc20230330 import models
from alibabacloud_tea_openapi.exceptions import ClientException

from crhelper.local.fc_server import LocalFunctionCompute

#: The FC 3.0 SDK alone takes about a second to import.
pytestmark = pytest.mark.slow


def code_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


ZIP64 = base64.b64encode(code_zip()).decode()


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFunctionCompute]:
    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("fc-state")) as server:
        yield server


@pytest.fixture(scope="module")
def fc3(fc: LocalFunctionCompute) -> Any:
    return fc.client3()


def create3(client: Any, name: str, **fields: Any) -> Any:
    settings = {"runtime": "python3.10", "handler": "index.handler", "code": models.InputCodeLocation(zip_file=ZIP64),
                "timeout": 5, "memory_size": 256, **fields}
    return client.create_function(models.CreateFunctionRequest(
        body=models.CreateFunctionInput(function_name=name, **settings))).body


def fc3_error(call: Any) -> ClientException:
    with pytest.raises(ClientException) as caught:
        call()
    return caught.value


def test_fc3_function_round_trip(fc: LocalFunctionCompute, fc3: Any) -> None:
    created = create3(fc3, "rt", environment_variables={"STAGE": "test"}, description="first")
    assert created.function_arn == f"acs:fc:{fc.region}:{fc.account_id}:functions/rt"
    assert (created.runtime, created.handler, created.timeout, created.memory_size) == ("python3.10", "index.handler", 5, 256)
    assert created.state == "Active" and created.last_update_status == "Successful"
    assert created.code_size == len(code_zip()) and created.code_checksum.isdigit()
    spec = next(s for s in fc._registry.all() if (s.service, s.function) == ("", "rt"))
    assert spec.runtime == "python3.10" and spec.code_dir and (Path(spec.code_dir) / "index.py").is_file()
    assert dict(spec.env) == {"STAGE": "test"} and (spec.timeout, spec.memory) == (5, 256)

    updated = fc3.update_function("rt", models.UpdateFunctionRequest(
        body=models.UpdateFunctionInput(handler="index.other", timeout=9))).body
    assert (updated.handler, updated.timeout, updated.description, updated.code_checksum) == (
        "index.other", 9, "first", created.code_checksum)  # unchanged fields and code are kept
    got = fc3.get_function("rt", models.GetFunctionRequest()).body
    assert got.handler == "index.other" and got.environment_variables == {"STAGE": "test"}
    listed = fc3.list_functions(models.ListFunctionsRequest(prefix="r")).body
    assert [f.function_name for f in listed.functions] == ["rt"]

    fc3.delete_function("rt")
    assert fc3_error(lambda: fc3.get_function("rt", models.GetFunctionRequest())).code == "FunctionNotFound"
    assert not Path(spec.code_dir).exists()  # the deleted function's code directory is gone


def test_fc3_errors_carry_fc_codes_and_name_the_field(fc3: Any) -> None:
    create3(fc3, "dup")
    taken = fc3_error(lambda: create3(fc3, "dup"))
    assert (taken.status_code, taken.code) == (409, "FunctionAlreadyExists")
    missing = fc3_error(lambda: fc3.get_function("ghost", models.GetFunctionRequest()))
    assert (missing.status_code, missing.code) == (404, "FunctionNotFound") and "ghost" in missing.message
    cases: list[tuple[dict[str, Any], str]] = [
        ({"timeout": 0}, "timeout: must be an integer from 1 to 86400"),
        ({"memory_size": 100}, "memorySize: must be an integer from 128 to 65536"),
        ({"runtime": "nodejs18"}, "runtime: must be one of python3, python3.9, python3.10, python3.12"),
        ({"handler": "no-dots"}, "handler: must look like 'module.function'"),
        ({"code": models.InputCodeLocation(zip_file="@@")}, "code.zipFile is not valid base64"),
        ({"code": None}, "code: is required"),
    ]
    for fields, rule in cases:
        error = fc3_error(lambda: create3(fc3, "bad", **fields))
        assert (error.status_code, error.code) == (400, "InvalidArgument") and rule in error.message, (fields, error.message)
    name = fc3_error(lambda: create3(fc3, "9starts-with-a-digit"))
    assert name.code == "InvalidArgument" and "functionName: must be 1-64 letters" in name.message


def test_fc3_triggers_and_async_configuration(fc: LocalFunctionCompute, fc3: Any) -> None:
    create3(fc3, "trig")
    config = json.dumps({"cronExpression": "@every 1m", "enable": True})
    made = fc3.create_trigger("trig", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="tick", trigger_type="timer", trigger_config=config, qualifier="LATEST"))).body
    assert (made.trigger_name, made.trigger_type, json.loads(made.trigger_config)) == ("tick", "timer", json.loads(config))
    again = fc3_error(lambda: fc3.create_trigger("trig", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="tick", trigger_type="timer", trigger_config=config))))
    assert (again.status_code, again.code) == (409, "TriggerAlreadyExists")
    bad = fc3_error(lambda: fc3.create_trigger("trig", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="t2", trigger_type="timer", trigger_config="{not json"))))
    assert bad.code == "InvalidArgument" and "triggerConfig: must be a JSON object encoded as a string" in bad.message
    no_schedule = fc3_error(lambda: fc3.create_trigger("trig", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="t3", trigger_type="timer", trigger_config=json.dumps({"cronExpression": "0 0 4 * *"})))))
    assert no_schedule.code == "InvalidArgument" and "triggerConfig.cronExpression: a cron expression has six fields" \
        in no_schedule.message
    fc3.update_trigger("trig", "tick", models.UpdateTriggerRequest(body=models.UpdateTriggerInput(
        trigger_config=json.dumps({"cronExpression": "@every 2m", "enable": False}))))
    got = fc3.get_trigger("trig", "tick").body
    assert json.loads(got.trigger_config) == {"cronExpression": "@every 2m", "enable": False}
    assert [t.trigger_name for t in fc3.list_triggers("trig", models.ListTriggersRequest()).body.triggers] == ["tick"]
    fc3.delete_trigger("trig", "tick")
    assert fc3_error(lambda: fc3.get_trigger("trig", "tick")).code == "TriggerNotFound"

    none_yet = fc3_error(lambda: fc3.get_async_invoke_config("trig", models.GetAsyncInvokeConfigRequest()))
    assert (none_yet.status_code, none_yet.code) == (404, "AsyncConfigNotExists")
    put = fc3.put_async_invoke_config("trig", models.PutAsyncInvokeConfigRequest(
        body=models.PutAsyncInvokeConfigInput(max_async_retry_attempts=1, max_async_event_age_in_seconds=600))).body
    assert (put.max_async_retry_attempts, put.max_async_event_age_in_seconds) == (1, 600)
    assert fc._api is not None and fc._api._management.max_async_retries("", "trig", None) == 1
    too_many = fc3_error(lambda: fc3.put_async_invoke_config("trig", models.PutAsyncInvokeConfigRequest(
        body=models.PutAsyncInvokeConfigInput(max_async_retry_attempts=9))))
    assert "maxAsyncRetryAttempts: must be an integer from 0 to 8" in too_many.message
    assert fc3.get_async_invoke_config("trig", models.GetAsyncInvokeConfigRequest()).body.max_async_retry_attempts == 1
    fc3.delete_async_invoke_config("trig", models.DeleteAsyncInvokeConfigRequest())
    assert fc._api._management.max_async_retries("", "trig", None) is None


def test_fc2_services_functions_triggers_and_async_configuration(fc: LocalFunctionCompute, tmp_path: Path) -> None:
    client = fc.client()
    assert client.create_service("mgmt", description="deploy").data["serviceName"] == "mgmt"
    with pytest.raises(fc2.FcError) as taken:
        client.create_service("mgmt")
    assert (taken.value.status_code, taken.value.err_code) == (409, "ServiceAlreadyExists")
    assert client.update_service("mgmt", description="v2").data["description"] == "v2"

    archive = tmp_path / "code.zip"
    archive.write_bytes(code_zip())
    made = client.create_function("mgmt", "fn", "python3.10", "index.handler", codeZipFile=str(archive),
                                  environmentVariables={"A": "1"}, memorySize=128, timeout=4).data
    assert (made["functionName"], made["timeout"], made["memorySize"], made["codeSize"]) == ("fn", 4, 128, len(code_zip()))
    with pytest.raises(fc2.FcError) as again:
        client.create_function("mgmt", "fn", "python3.10", "index.handler", codeZipFile=str(archive))
    assert (again.value.status_code, again.value.err_code) == (409, "FunctionAlreadyExists")
    assert client.update_function("mgmt", "fn", handler="index.other").data["handler"] == "index.other"
    assert client.get_function("mgmt", "fn").data["environmentVariables"] == {"A": "1"}
    assert [f["functionName"] for f in client.list_functions("mgmt").data["functions"]] == ["fn"]

    trigger = client.create_trigger("mgmt", "fn", "tick", "timer", {"cronExpression": "@every 1m", "enable": True}, "", "").data
    assert trigger["triggerConfig"] == {"cronExpression": "@every 1m", "enable": True}  # an object in FC 2.0
    client.update_trigger("mgmt", "fn", "tick", triggerConfig={"cronExpression": "@every 1m", "enable": False})
    assert client.get_trigger("mgmt", "fn", "tick").data["triggerConfig"]["enable"] is False
    with pytest.raises(fc2.FcError) as busy:
        client.delete_function("mgmt", "fn")
    assert (busy.value.status_code, busy.value.err_code) == (409, "FunctionNotEmpty")
    client.delete_trigger("mgmt", "fn", "tick")

    client.put_function_async_invoke_config("mgmt", "LATEST", "fn", {"maxAsyncRetryAttempts": 0})
    assert client.get_function_async_invoke_config("mgmt", "LATEST", "fn").data["maxAsyncRetryAttempts"] == 0
    assert fc._api is not None and fc._api._management.max_async_retries("mgmt", "fn", None) == 0
    client.delete_function_async_invoke_config("mgmt", "LATEST", "fn")

    with pytest.raises(fc2.FcError) as not_empty:
        client.delete_service("mgmt")
    assert (not_empty.value.status_code, not_empty.value.err_code) == (409, "ServiceNotEmpty")
    client.delete_function("mgmt", "fn")
    client.delete_service("mgmt")
    with pytest.raises(fc2.FcError) as gone:
        client.get_service("mgmt")
    assert (gone.value.status_code, gone.value.err_code) == (404, "ServiceNotFound")
    client.create_service("mgmt2", description="d")
    with pytest.raises(fc2.FcError) as bad:
        client.create_function("mgmt2", "f", "python3.10", "index.handler", codeZipFile=str(archive), memorySize=100)
    assert (bad.value.status_code, bad.value.err_code) == (400, "InvalidArgument")
    assert "memorySize: must be an integer from 128 to 32768" in bad.value.message


def test_fc3_wrong_secret_is_refused_with_the_gateway_code(fc: LocalFunctionCompute) -> None:
    from alibabacloud_fc20230330.client import Client
    from alibabacloud_tea_openapi.models import Config

    forged = Client(Config(access_key_id=fc.access_key_id, access_key_secret="not-the-secret",
                           endpoint=urlsplit(fc.endpoint).netloc, protocol="http"))
    error = fc3_error(lambda: forged.list_functions(models.ListFunctionsRequest()))
    assert (error.status_code, error.code) == (400, "SignatureDoesNotMatch")
    unknown = Client(Config(access_key_id="LTAInobody", access_key_secret="x",
                            endpoint=urlsplit(fc.endpoint).netloc, protocol="http"))
    assert fc3_error(lambda: unknown.list_functions(models.ListFunctionsRequest())).code == "InvalidAccessKeyId.NotFound"
    with pytest.raises(fc2.FcError) as fc2_forged:
        fc2.Client(endpoint=fc.endpoint, accessKeyID=fc.access_key_id, accessKeySecret="wrong").list_services()
    assert (fc2_forged.value.status_code, fc2_forged.value.err_code) == (403, "SignatureNotMatch")


class _Recorder(BaseHTTPRequestHandler):
    """Takes one request as the SDK sent it (to replay it to the endpoint) and answers like FC."""

    captured: list[tuple[str, str, dict[str, str], bytes]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.captured.append((self.command, self.path, dict(self.headers.items()), body))
        reply = b'{"functions": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


def test_a_replayed_fc3_request_is_refused(fc: LocalFunctionCompute) -> None:
    from alibabacloud_fc20230330.client import Client
    from alibabacloud_tea_openapi.models import Config

    recorder = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=recorder.serve_forever, args=(0.05,), daemon=True).start()
    try:  # the SDK's own signed request, taken on its way
        Client(Config(access_key_id=fc.access_key_id, access_key_secret=fc.access_key_secret,
                      endpoint=f"127.0.0.1:{recorder.server_port}", protocol="http")
               ).list_functions(models.ListFunctionsRequest(limit=5))
    finally:
        recorder.shutdown()
        recorder.server_close()
    method, target, headers, body = _Recorder.captured[-1]

    def send() -> tuple[int, dict[str, Any]]:
        address = urlsplit(fc.endpoint)
        connection = http.client.HTTPConnection(address.hostname or "", address.port)
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        status, data = response.status, json.loads(response.read() or b"{}")
        connection.close()
        return status, data

    first, _ = send()
    status, error = send()
    assert first == 200
    assert (status, error["Code"]) == (400, "SignatureNonceUsed") and error["RequestId"]
