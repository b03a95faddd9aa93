"""Sync invocations through the real fc2 SDK."""
from __future__ import annotations

import base64
import json
import os
import threading
import time
from pathlib import Path

import fc2
import pytest
from fc_local_catalog import SERVICE

from crhelper.local.fc_server import LocalFunctionCompute


def _function_error(excinfo: pytest.ExceptionInfo[fc2.FcError]) -> dict:
    assert excinfo.value.status_code == 200  # function errors arrive as 200 + x-fc-error-type
    return json.loads(excinfo.value.message)


def test_sync_returns_bytes_unchanged(client: fc2.Client) -> None:
    payload = b'{"a": 1, "bin": "\\u00ff"}\x00\xff'
    response = client.invoke_function(SERVICE, "echo", payload=payload)
    assert response.data == payload
    assert response.headers["x-fc-request-id"]


@pytest.mark.parametrize("function, expected", [
    ("str", "héllo".encode()),
    ("dict", json.dumps({"answer": 42, "items": [1, 2]}).encode()),
    ("none", b""),
])
def test_sync_encodes_return_values(client: fc2.Client, function: str, expected: bytes) -> None:
    assert client.invoke_function(SERVICE, function, payload=b"{}").data == expected


def test_unserializable_return_is_a_function_error(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "unserializable", payload=b"{}")
    assert _function_error(excinfo)["errorType"] == "TypeError"


def test_event_is_bytes_and_context_mirrors_fc(fc: LocalFunctionCompute, client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "describe", payload=b"{}", qualifier="prod")
    seen = json.loads(response.data)
    assert seen["event_type"] == "bytes"
    assert seen["request_id"] == response.headers["x-fc-request-id"]
    assert seen["account_id"] == fc.account_id and len(fc.account_id) == 16
    assert seen["region"] == "cn-hangzhou"
    assert seen["function"] == {"name": "describe", "handler": "fc_local_handlers:describe",
                                "memory": 256, "timeout": 7}
    assert seen["service"] == {"name": SERVICE, "qualifier": "prod", "version_id": "",
                               "log_project": "", "log_store": ""}
    role = fc.role_credentials
    assert seen["credentials"] == {"access_key_id": role.access_key_id,
                                   "access_key_secret": role.access_key_secret,
                                   "security_token": role.security_token}
    assert role.access_key_id.startswith("STS.") and role.security_token
    assert 5 < seen["deadline"] - seen["now"] <= 7


def test_unqualified_invocation_reports_latest(client: fc2.Client) -> None:
    seen = json.loads(client.invoke_function(SERVICE, "describe", payload=b"{}").data)
    assert seen["service"]["qualifier"] == "LATEST"
    numbered = json.loads(client.invoke_function(SERVICE, "describe", payload=b"{}",
                                                 qualifier="3").data)
    assert numbered["service"]["version_id"] == "3"


def test_env_vars_visible_in_handler(fc: LocalFunctionCompute, client: fc2.Client) -> None:
    names = ["GREETING", "STAGE", "FC_FUNCTION_NAME", "FC_SERVICE_NAME", "FC_REGION",
             "FC_ACCOUNT_ID", "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_SECURITY_TOKEN",
             "CRHELPER_FC_ENDPOINT"]
    seen = json.loads(client.invoke_function(
        SERVICE, "describe", payload=json.dumps({"env": names}).encode()).data)["env"]
    assert seen == {
        "GREETING": "hi there", "STAGE": "test", "FC_FUNCTION_NAME": "describe",
        "FC_SERVICE_NAME": SERVICE, "FC_REGION": "cn-hangzhou", "FC_ACCOUNT_ID": fc.account_id,
        "ALIBABA_CLOUD_ACCESS_KEY_ID": fc.role_credentials.access_key_id,
        "ALIBABA_CLOUD_SECURITY_TOKEN": fc.role_credentials.security_token,
        "CRHELPER_FC_ENDPOINT": fc.endpoint,
    }
    assert "GREETING" not in os.environ


def test_handler_exception_has_fc_error_shape(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "boom", payload=b"{}")
    error = _function_error(excinfo)
    assert error["errorMessage"] == "something is wrong"
    assert error["errorType"] == "ValueError"
    frame = error["stackTrace"][-1]
    assert frame[0].endswith('fc_local_handlers.py"') and frame[2] == "in boom"
    assert frame[3] == 'raise ValueError("something is wrong")'
    assert all("fc_worker" not in f[0] for f in error["stackTrace"])
    assert error["RequestId"] != "unknown"


def test_process_exit_is_a_function_error(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "exits", payload=b"{}")
    assert "exit code 3" in _function_error(excinfo)["errorMessage"]


@pytest.mark.parametrize("function, error_type, message", [
    ("missing_module", "ModuleNotFoundError", "Unable to import module 'fc_local_no_such_module'"),
    ("broken_module", "RuntimeError", "Unable to import module 'fc_local_broken': broken at import"),
    ("missing_attr", "HandlerNotFound",
     "Handler 'no_such_handler' is missing on module 'fc_local_handlers'"),
])
def test_import_errors_become_function_errors(client: fc2.Client, function: str, error_type: str,
                                              message: str) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, function, payload=b"{}")
    error = _function_error(excinfo)
    assert error["errorType"] == error_type
    assert error["errorMessage"].startswith(message)


@pytest.mark.slow
def test_timeout_kills_the_worker(fc: LocalFunctionCompute, client: fc2.Client,
                                  tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "sleeper",
                               payload=json.dumps({"pid_file": str(pid_file)}).encode())
    elapsed = time.monotonic() - started
    assert _function_error(excinfo)["errorMessage"] == "Function timed out after 1 seconds"
    assert 1.0 <= elapsed < 4.0
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    record = fc.record(json.loads(excinfo.value.message)["RequestId"])
    assert record.status == "failed" and record.attempts[0].outcome == "timeout"


def test_initializer_runs_before_handler(client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "initialized", payload=b"{}")
    assert response.data.decode() == response.headers["x-fc-request-id"]


def test_initializer_failure_is_a_function_error(client: fc2.Client) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(SERVICE, "bad_init", payload=b"{}")
    error = _function_error(excinfo)
    assert (error["errorType"], error["errorMessage"]) == ("RuntimeError", "initializer failed")


def test_tail_log_returns_invocation_log(client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "noisy", payload=b'{"lines": 2}',
                                      headers={"x-fc-log-type": "Tail"})
    request_id = response.headers["x-fc-request-id"]
    log = base64.b64decode(response.headers["x-fc-log-result"]).decode()
    lines = log.splitlines()
    assert lines[0] == f"FC Invoke Start RequestId: {request_id}"
    assert lines[1].startswith("line 00000 ")
    assert lines[3].endswith(f" {request_id} [INFO] last words")
    assert lines[-1] == f"FC Invoke End RequestId: {request_id}"


def test_tail_log_keeps_last_4kb(client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "noisy", payload=b'{"lines": 500}',
                                      headers={"x-fc-log-type": "Tail"})
    log = base64.b64decode(response.headers["x-fc-log-result"])
    assert len(log) == 4096
    assert b"line 00499 " in log and b"line 00000 " not in log
    assert log.endswith(f"FC Invoke End RequestId: {response.headers['x-fc-request-id']}\n".encode())


def test_no_log_header_without_tail(client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "noisy", payload=b'{"lines": 1}')
    assert "x-fc-log-result" not in response.headers


@pytest.mark.parametrize("service, function, code, message", [
    (SERVICE, "nope", "FunctionNotFound", "function 'nope' does not exist in service 'svc'"),
    ("other", "echo", "ServiceNotFound", "service 'other' does not exist"),
])
def test_unknown_function_is_404(client: fc2.Client, service: str, function: str, code: str,
                                 message: str) -> None:
    with pytest.raises(fc2.FcError) as excinfo:
        client.invoke_function(service, function, payload=b"{}")
    assert (excinfo.value.status_code, excinfo.value.err_code) == (404, code)
    assert json.loads(excinfo.value.message)["ErrorMessage"] == message


def test_overlapping_invocations_run_on_separate_instances(fc: LocalFunctionCompute, client: fc2.Client,
                                                          tmp_path: Path) -> None:
    """FC's instance concurrency is 1: an invocation arriving while the others run gets its own instance."""
    fc.register(SERVICE, "overlapping", "fc_local_handlers:sleeper", timeout=30)
    request_ids: list[str] = []

    def call(index: int) -> None:
        payload = json.dumps({"pid_file": str(tmp_path / f"pid{index}"), "seconds": 0.3}).encode()
        response = client.invoke_function(SERVICE, "overlapping", payload=payload)
        assert response.data == b"woke up"
        request_ids.append(response.headers["x-fc-request-id"])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({(tmp_path / f"pid{i}").read_text() for i in range(3)}) == 3
    assert len(set(request_ids)) == 3


def test_sync_invocations_are_recorded(fc: LocalFunctionCompute, client: fc2.Client) -> None:
    response = client.invoke_function(SERVICE, "echo", payload=b"x")
    record = fc.record(response.headers["x-fc-request-id"])
    assert (record.invocation_type, record.status, record.delay) == ("Sync", "succeeded", 0)
    assert record.received <= record.attempts[0].started <= record.attempts[0].ended
    assert record.attempts[0].outcome == "success"
