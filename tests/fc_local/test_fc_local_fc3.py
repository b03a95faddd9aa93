"""Deployed code and FC 3.0 invocations through the real SDKs: a zip created through either API runs
from its own code directory with its handler, environment, timeout and memory; async invocations
honour x-fc-async-delay and the function's async configuration; code comes from OSS (a moto server);
FC 3.0 re-entry goes through the 3.0 API; an FC 3.0 token stack runs through the emulator."""
from __future__ import annotations

import base64
import io
import json
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from alibabacloud_fc20230330 import models
from alibabacloud_tea_openapi.exceptions import ClientException
from alibabacloud_tea_util.models import RuntimeOptions

from crhelper.local.fc_server import LocalFunctionCompute

pytestmark = pytest.mark.slow

REPORT = '''import json, os, sys
VERSION = {version!r}
def handler(event, context):
    return json.dumps({{"version": VERSION, "event": event.decode(), "file": __file__,
                       "stage": os.environ.get("STAGE"), "service": context.service.name,
                       "service_env": os.environ.get("FC_SERVICE_NAME"), "function": context.function.name,
                       "memory": context.function.memory, "timeout": context.function.timeout}})
def event_of(event, context):
    return event
def fails(event, context):
    raise RuntimeError("always")
'''
SLOW_PROVIDER = f"{Path(__file__).resolve().parents[1] / 'stack' / 'longrun_providers.py'}:provider"


def zip_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def code(version: str) -> str:
    return base64.b64encode(zip_of({"app/__init__.py": "", "app/main.py": REPORT.format(version=version)})).decode()


@pytest.fixture(scope="module")
def fc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFunctionCompute]:
    with LocalFunctionCompute(state_dir=tmp_path_factory.mktemp("fc3-state"), async_retry_delay=0.05) as server:
        yield server


def create3(client: Any, name: str, handler: str = "app.main.handler", **fields: Any) -> Any:
    body = models.CreateFunctionInput(function_name=name, runtime="python3.10", handler=handler,
                                      code=models.InputCodeLocation(zip_file=fields.pop("zip_file", code("v1"))),
                                      timeout=7, memory_size=256, **fields)
    return client.create_function(models.CreateFunctionRequest(body=body)).body


def invoke3(client: Any, name: str, payload: bytes, **headers: Any) -> Any:
    return client.invoke_function_with_options(name, models.InvokeFunctionRequest(body=payload),
                                               models.InvokeFunctionHeaders(**headers), RuntimeOptions())


def test_a_deployed_zip_runs_from_its_own_code_directory_through_both_apis(fc: LocalFunctionCompute, tmp_path: Path) -> None:
    fc3 = fc.client3()
    create3(fc3, "deployed", environment_variables={"STAGE": "fc3"})
    seen = json.loads(invoke3(fc3, "deployed", b"ping").body.read())
    assert seen["version"] == "v1" and seen["event"] == "ping" and seen["stage"] == "fc3"
    assert seen["file"].startswith(str(fc._state_dir)) and seen["file"].endswith("/app/main.py")
    assert (seen["service"], seen["service_env"], seen["function"]) == ("", "", "deployed")  # FC 3.0: no service
    assert (seen["memory"], seen["timeout"]) == (256, 7)

    fc3.update_function("deployed", models.UpdateFunctionRequest(body=models.UpdateFunctionInput(
        code=models.InputCodeLocation(zip_file=code("v2")))))
    again = json.loads(invoke3(fc3, "deployed", b"pong").body.read())
    assert again["version"] == "v2" and again["file"] != seen["file"] and not Path(seen["file"]).exists()

    fc2 = fc.client()
    archive = tmp_path / "code.zip"
    archive.write_bytes(base64.b64decode(code("v3")))
    fc2.create_service("deploy2")
    fc2.create_function("deploy2", "fn", "python3.10", "app.main.handler", codeZipFile=str(archive),
                        environmentVariables={"STAGE": "fc2"}, memorySize=128, timeout=5)
    seen2 = json.loads(fc2.invoke_function("deploy2", "fn", payload=b"x").data)
    assert (seen2["version"], seen2["stage"], seen2["service"], seen2["memory"], seen2["timeout"]) == ("v3", "fc2", "deploy2", 128, 5)

    with pytest.raises(ClientException) as missing:
        invoke3(fc3, "nowhere", b"")
    assert (missing.value.status_code, missing.value.code) == (404, "FunctionNotFound")


def test_async_invocations_honour_the_delay_and_the_functions_async_configuration(fc: LocalFunctionCompute) -> None:
    fc3 = fc.client3()
    create3(fc3, "later")
    accepted = invoke3(fc3, "later", b"soon", x_fc_invocation_type="Async", common_headers={"x-fc-async-delay": "2"})
    assert accepted.status_code == 202
    request_id = {k.lower(): v for k, v in accepted.headers.items()}["x-fc-request-id"]

    create3(fc3, "failing", handler="app.main.fails")
    fc3.put_async_invoke_config("failing", models.PutAsyncInvokeConfigRequest(
        body=models.PutAsyncInvokeConfigInput(max_async_retry_attempts=0)))
    failed = invoke3(fc3, "failing", b"", x_fc_invocation_type="Async")
    failed_id = {k.lower(): v for k, v in failed.headers.items()}["x-fc-request-id"]
    assert fc.wait_idle(30)

    record = fc.record(request_id)
    assert (record.service, record.function, record.invocation_type, record.delay, record.status) == (
        "", "later", "Async", 2, "succeeded")
    assert record.first_started is not None and record.first_started - record.received >= 2.0
    assert json.loads(record.attempts[0].result)["event"] == "soon"
    refused = fc.record(failed_id)
    assert refused.status == "failed" and len(refused.attempts) == 1  # maxAsyncRetryAttempts 0: no retry (default 3)

    with pytest.raises(ClientException) as too_late:
        invoke3(fc3, "later", b"", x_fc_invocation_type="Async", common_headers={"x-fc-async-delay": "3601"})
    assert too_late.value.code == "InvalidArgument" and "x-fc-async-delay" in too_late.value.message


def test_a_timer_trigger_fires_the_function_with_fcs_event_until_it_is_disabled(fc: LocalFunctionCompute) -> None:
    fc3 = fc.client3()
    create3(fc3, "ticking", handler="app.main.event_of")
    before = len(fc.records)
    fc3.create_trigger("ticking", models.CreateTriggerRequest(body=models.CreateTriggerInput(
        trigger_name="tick", trigger_type="timer",
        trigger_config=json.dumps({"cronExpression": "@every 1s", "enable": True, "payload": "hello"}))))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len([r for r in fc.records[before:] if r.attempts]) < 2:
        time.sleep(0.1)
    fc3.update_trigger("ticking", "tick", models.UpdateTriggerRequest(body=models.UpdateTriggerInput(
        trigger_config=json.dumps({"cronExpression": "@every 1s", "enable": False}))))
    assert fc.wait_idle(10)
    fired = fc.records[before:]
    assert len(fired) >= 2 and {(r.function, r.invocation_type, r.status) for r in fired} == {("ticking", "Async", "succeeded")}
    event = json.loads(fired[0].attempts[0].result)
    assert (event["triggerName"], event["payload"]) == ("tick", "hello") and event["triggerTime"].endswith("Z")
    time.sleep(1.5)
    assert len(fc.records) == before + len(fired)  # disabled: no more firings


@pytest.fixture
def oss(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    import boto3
    from moto.server import ThreadedMotoServer

    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="code")
    try:
        yield client, endpoint
    finally:
        server.stop()


def test_code_from_an_oss_object(oss: tuple[Any, str], tmp_path: Path) -> None:
    client, endpoint = oss
    client.put_object(Bucket="code", Key="releases/app.zip", Body=base64.b64decode(code("from-oss")))
    url = f"s3://code?endpoint={endpoint}&addressing=path&region=us-east-1"
    with LocalFunctionCompute(state_dir=tmp_path, oss_url=url) as fc:
        fc3 = fc.client3()
        fc3.create_function(models.CreateFunctionRequest(body=models.CreateFunctionInput(
            function_name="fromoss", runtime="python3.10", handler="app.main.handler", timeout=5,
            code=models.InputCodeLocation(oss_bucket_name="code", oss_object_name="releases/app.zip"))))
        assert json.loads(invoke3(fc3, "fromoss", b"").body.read())["version"] == "from-oss"
        with pytest.raises(ClientException) as absent:
            fc3.create_function(models.CreateFunctionRequest(body=models.CreateFunctionInput(
                function_name="absent", runtime="python3.10", handler="app.main.handler",
                code=models.InputCodeLocation(oss_bucket_name="code", oss_object_name="nope.zip"))))
    assert (absent.value.status_code, absent.value.code) == (400, "InvalidArgument")
    assert "cannot read oss://code/nope.zip" in absent.value.message


def test_fc3_reentry_sends_an_async_invocation_with_the_delay_through_the_3_0_api(fc: LocalFunctionCompute) -> None:
    from crhelper.reentry import FunctionComputeReentry, continuation_payload
    from crhelper.reentry_fc3 import FunctionCompute3Reentry, fc_reentry

    fc.register("", "selfcall", "app.main.handler")
    env = {"CRHELPER_FC_ENDPOINT": fc.endpoint, "ALIBABA_CLOUD_ACCESS_KEY_ID": fc.access_key_id,
           "ALIBABA_CLOUD_ACCESS_KEY_SECRET": fc.access_key_secret}
    context = SimpleNamespace(function=SimpleNamespace(name="selfcall"), region=fc.region, account_id=fc.account_id)
    reentry = fc_reentry(context, env)
    assert isinstance(reentry, FunctionCompute3Reentry) and reentry.name == "fc"
    before = len(fc.records)
    reentry.schedule("cont-1", 3600)
    record = fc.records[before]
    assert (record.service, record.function, record.invocation_type, record.delay) == ("", "selfcall", "Async", 3600)
    assert fc._api is not None and fc._api._pending[record.request_id].payload == continuation_payload("cont-1")
    with_service = SimpleNamespace(function=SimpleNamespace(name="f"), service=SimpleNamespace(name="svc"))
    assert type(fc_reentry(with_service, env)) is FunctionComputeReentry
    assert type(fc_reentry(SimpleNamespace(function=SimpleNamespace(name="f")), {**env, "FC_SERVICE_NAME": "svc"})) \
        is FunctionComputeReentry


def test_an_fc3_token_stack_runs_through_the_endpoint_and_re_enters_through_the_3_0_api(tmp_path: Path) -> None:
    from crhelper.emulator import StackEmulator
    from crhelper.emulator.delivery import StackDelivery
    from crhelper.emulator.delivery_bindings import Bindings

    token = "acs:fc:cn-hangzhou:123456789:functions/slow3"
    template = json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {"Slow": {
        "Type": "Custom::Slow", "Properties": {"ServiceToken": token, "Timeout": 60,
                                               "Parameters": {"Polls": 3, "Delay": 2}}}},
        "Outputs": {"Steps": {"Value": {"Fn::GetAtt": ["Slow", "Steps"]}}}})
    with StackEmulator(tmp_path / "home") as emulator, \
            StackDelivery(Bindings().with_flags([f"{token}={SLOW_PROVIDER}"])) as deliver:
        started = time.monotonic()
        created = emulator.create("slow3", template, {}, deliver)
        elapsed = time.monotonic() - started
        assert deliver.fc.fc.wait_idle(10)
        records = deliver.fc.fc.records
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert created.output_values() == {"Steps": 3}
    assert [(r.service, r.function, r.invocation_type, r.delay, r.status) for r in records] == [
        ("", "slow3", "Async", 0, "succeeded")] + [("", "slow3", "Async", 1, "succeeded")] * 2  # delay 2 s, sent 1 s early
    assert elapsed >= 4.0  # the two 2 s delays were waited out
