"""The local ROS against real ROS's documented behaviour, and against hostile input on the wire.

Every refusal must be ROS's JSON error document (RequestId, HostId, Code, Message, Recommend) with
its HTTP status; never a stdlib HTML page, a 500 traceback, or a dropped connection."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from crhelper.ros.api import Params
from crhelper.ros.server import LocalRos, is_loopback
from crhelper.ros.stacks import LocalStacks, RosError
from ros_support import REPO, echo_template, rpc_call, wait_until

ERROR_FIELDS = {"RequestId", "HostId", "Code", "Message", "Recommend"}


def _raw(endpoint: str, data: bytes) -> tuple[int, dict, bytes]:
    """Send bytes as they are; the answer's status, headers and body (the connection is closed after it)."""
    host, port = endpoint.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(data)
        received = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), received[:200]
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def _ros_error(body: bytes) -> dict:
    document = json.loads(body)
    assert set(document) == ERROR_FIELDS, document
    uuid.UUID(document["RequestId"])  # a real RequestId, not a placeholder
    return dict(document)


@pytest.mark.parametrize("text", ["1_0", "+5", " 1 0", "\u0661\u0660", "1.5", "0x10", "9" * 19, ""])
def test_whole_numbers_are_ascii_digits_only(text: str) -> None:
    params = Params({"PageSize": text})
    if text == "":
        assert params.integer("PageSize", 10, low=1, high=50) == 10
        return
    with pytest.raises(RosError) as refused:
        params.integer("PageSize", 10, low=1, high=50)
    assert refused.value.code == "InvalidParameter" and refused.value.status == 400
    assert "PageSize" in refused.value.message and "from 1 to 50" in refused.value.message
    assert len(refused.value.message) < 200  # an absurd value is not echoed whole


def test_loopback_addresses_are_told_from_the_others() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.4", "10.0.0.1", "example.com", ""))


def test_the_console_is_off_on_a_non_loopback_host_unless_asked(home: Path) -> None:
    stacks = LocalStacks(home)
    try:
        assert LocalRos(host="0.0.0.0", stacks=stacks).console_enabled is False
        assert LocalRos(host="192.168.1.4", stacks=stacks).console_enabled is False
        assert LocalRos(host="127.0.0.1", stacks=stacks).console_enabled is True
        assert LocalRos(host="::1", stacks=stacks, console=False).console_enabled is False
    finally:
        stacks.close()


@pytest.mark.slow
def test_without_the_console_the_endpoint_serves_the_api_only(home: Path) -> None:
    with LocalRos(home=home, console=False) as ros:
        assert ros.console_url is None
        for target in ("/", f"/?token={ros.console_token}", "/api/stacks"):
            status, _, body = _raw(ros.endpoint, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            assert status == 404 and b"API only" in body, (target, body)
        listed = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {})
        assert listed.status_code == 200 and listed.json()["TotalCount"] == 0


@pytest.mark.slow
def test_ros_serve_refuses_a_non_loopback_host_without_allow_remote(tmp_path: Path) -> None:
    env = {**os.environ, "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIserve", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s",
           "HOME": str(tmp_path)}
    refused = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "ros", "serve", "--host", "0.0.0.0",
                              "--port", "0", "--home", str(tmp_path / "home")], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused
    assert "not a loopback address" in refused.stderr and "--allow-remote" in refused.stderr
    assert refused.stdout == ""  # nothing was served
    shown = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "ros", "serve", "--help"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60)
    assert "--allow-remote" in shown.stdout and "console is not served" in shown.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name, request_bytes, status, code", [
    ("bad request line", b"\x16\x03\x01\x00garbage\r\n\r\n", 400, "InvalidRequest"),
    ("bad HTTP version", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 505, "InternalError"),
    ("request line too long", b"GET /?" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "InvalidRequest"),
    ("huge Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nx-acs-action: ListStacks\r\nContent-Length: 99999999999\r\n\r\n",
     400, "InvalidParameter"),
    ("negative Content-Length", b"POST / HTTP/1.1\r\nHost: x\r\nx-acs-action: ListStacks\r\nContent-Length: -5\r\n\r\n",
     400, "InvalidParameter"),
    ("chunked body", b"POST / HTTP/1.1\r\nHost: x\r\nx-acs-action: ListStacks\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5\r\nhello\r\n0\r\n\r\n", 400, "InvalidParameter"),
    ("bad UTF-8 in the query", b"GET /?Action=ListStacks&X=%ff%fe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
     400, "IncompleteSignature"),
    ("bad UTF-8 in the form", b"POST / HTTP/1.1\r\nHost: x\r\nx-acs-action: ListStacks\r\nContent-Type: "
     b"application/x-www-form-urlencoded\r\nContent-Length: 6\r\nConnection: close\r\n\r\nA=\xff\xfe\xfd\xfc", 400,
     "IncompleteSignature"),
    ("duplicated parameter", b"GET /?Action=ListStacks&Action=ListStacks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
     400, "IncompleteSignature"),
    ("unsigned call", b"POST / HTTP/1.1\r\nHost: x\r\nx-acs-action: ListStacks\r\nContent-Length: 0\r\n"
     b"Connection: close\r\n\r\n", 400, "MissingParameter"),
])
def test_hostile_http_gets_ros_error_documents(ros: LocalRos, caplog: pytest.LogCaptureFixture, name: str,
                                               request_bytes: bytes, status: int, code: str) -> None:
    with caplog.at_level(logging.DEBUG):
        got, headers, body = _raw(ros.endpoint, request_bytes)
    assert got == status, (name, body)
    assert headers["Content-Type"].startswith("application/json")
    assert _ros_error(body)["Code"] == code, (name, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


@pytest.mark.slow
def test_signed_but_absurd_parameters_get_invalid_parameter(ros: LocalRos) -> None:
    def call(action: str, params: dict[str, str], form: dict[str, str] | None = None) -> dict:
        answer = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, action, params, form=form)
        assert answer.status_code == 400, answer.text
        return _ros_error(answer.content)

    for size in ("0", "51", "9" * 400, "1_0", "\u0661\u0660", "-1"):
        refused = call("ListStacks", {"PageSize": size})
        assert refused["Code"] == "InvalidParameter" and "PageSize" in refused["Message"], size
    assert call("ListStacks", {"PageNumber": "0"})["Code"] == "InvalidParameter"
    unknown = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "CreateStackGroup", {})
    assert unknown.status_code == 404 and _ros_error(unknown.content)["Code"] == "InvalidAction.NotFound"
    assert unknown.json()["Message"].startswith("Specified api is not found, please check your url and method.")
    assert call("GetStack", {})["Message"] == "The input parameter StackId should be specified."
    assert call("CreateStack", {"StackName": "x", "TimeoutInMinutes": "9"},
                form={"TemplateBody": echo_template()})["Code"] == "InvalidParameter"
    for body in ("[1, 2]", "just text", "{{{", '{"ROSTemplateFormatVersion": "2015-09-01", "Resources": 7}'):
        assert call("ValidateTemplate", {}, form={"TemplateBody": body})["Code"] == "StackValidationFailed", body
    refused = call("CreateStack", {"StackName": "dup", "Parameters.1.ParameterKey": "A", "Parameters.1.ParameterValue": "1",
                                   "Parameters.2.ParameterKey": "A", "Parameters.2.ParameterValue": "2"},
                   form={"TemplateBody": echo_template(parameters={"A": {"Type": "String"}})})
    assert refused["Code"] == "InvalidParameter" and "more than once" in refused["Message"]


@pytest.mark.slow
def test_a_fault_of_the_local_ros_answers_internal_error_without_a_traceback(ros: LocalRos, home: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    assert rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {}).status_code == 200
    for path in home.glob("stacks.sqlite*"):  # the state database broken under the running endpoint
        path.write_bytes(b"\x00not a database" * 1024)
    with caplog.at_level(logging.ERROR, logger="crhelper"):
        answer = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {})
    assert answer.status_code == 500
    refused = _ros_error(answer.content)
    assert refused["Code"] == "InternalError" and "Traceback" not in answer.text and "sqlite" not in answer.text
    assert refused["RequestId"] in caplog.text  # the server's log has it, with the traceback


@pytest.mark.slow
def test_templates_that_would_exhaust_the_endpoint_are_refused_quickly(ros: LocalRos) -> None:
    lines = ['ROSTemplateFormatVersion: "2015-09-01"', "Metadata:", '  a: &a ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"  {chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(7)]
    bomb = "\n".join([*lines, "Resources: {}", "Outputs:", "  O: {Value: *h}"]) + "\n"  # 9**8 values from 600 bytes
    deep = "[" * 100_000
    for action, params in (("ValidateTemplate", {}), ("PreviewStack", {"StackName": "b"}), ("CreateStack", {"StackName": "b"})):
        for body, words in ((bomb, "YAML aliases expand"), (deep, "nested too deeply")):
            started = time.monotonic()
            answer = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, action, params,
                              form={"TemplateBody": body})
            assert answer.status_code == 400 and time.monotonic() - started < 5, (action, answer.text)
            refused = _ros_error(answer.content)
            assert refused["Code"] == "StackValidationFailed" and words in refused["Message"], (action, refused)


@pytest.mark.slow
def test_get_stack_shows_ros_fields_for_a_root_stack(ros: LocalRos) -> None:
    client = ros.client()
    from alibabacloud_ros20190910 import models

    stack_id = client.create_stack(models.CreateStackRequest(region_id=ros.region, stack_name="fields",
                                                             template_body=echo_template())).body.stack_id
    body = wait_until(lambda: (b := client.get_stack(models.GetStackRequest(region_id=ros.region, stack_id=stack_id)).body)
                      and b.status == "CREATE_COMPLETE" and b)
    raw = body.to_map()
    assert raw["StackDriftStatus"] == "NOT_CHECKED" and "DriftDetectionTime" not in raw
    assert "ParentStackId" not in raw and "RootStackId" not in raw  # only nested stacks have them (SDK model)
    assert raw["StatusReason"] == "Stack CREATE completed successfully"


@pytest.mark.slow
def test_preview_stack_answers_the_sdk_models_fields(ros: LocalRos) -> None:
    from alibabacloud_ros20190910 import models

    answer = ros.client().preview_stack(models.PreviewStackRequest(region_id=ros.region, stack_name="seen",
                                                                   template_body=echo_template()))
    stack = answer.body.to_map()["Stack"]
    assert stack["RegionId"] == ros.region and stack["StackName"] == "seen"
    (resource,) = stack["Resources"]
    assert resource["Action"] == "Add" and resource["LogicalResourceId"] == "Echo"
    assert "Replacement" not in resource  # the SDK model: returned only when Action is Modify
