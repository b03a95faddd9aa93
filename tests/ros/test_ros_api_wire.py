"""The local ROS API on the wire: RPC v1 requests as the aliyun CLI sends them, replays, typing rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from crhelper.ros.api import Params, is_api_request
from crhelper.ros.server import LocalRos
from crhelper.ros.stacks import RosError, ros_time
from ros_support import REPO, echo_template, rpc_call, wait_until


@pytest.mark.slow
def test_an_rpc_v1_request_as_the_cli_sends_it_creates_and_reads_a_stack(ros: LocalRos) -> None:
    template = echo_template({"E": {"Name": {"Ref": "Who"}}}, {"Who": {"Type": "String"}})
    created = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "CreateStack",
                       {"StackName": "cli-made", "Parameters.1.ParameterKey": "Who", "Parameters.1.ParameterValue": "cli",
                        "DisableRollback": "TRUE", "TimeoutInMinutes": "30"}, form={"TemplateBody": template})
    assert created.status_code == 200, created.text
    stack_id = created.json()["StackId"]

    def get() -> dict:
        answer = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "GetStack", {"StackId": stack_id})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    body = wait_until(lambda: (b := get()) and not b["Status"].endswith("IN_PROGRESS") and b)
    assert body["Status"] == "CREATE_COMPLETE" and body["DisableRollback"] is True and body["TimeoutInMinutes"] == 30
    assert body["Outputs"] == [{"OutputKey": "EName", "OutputValue": "cli", "Description": "E's name"}]
    missing = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "GetStack", {"StackId": str(uuid.uuid4())},
                       method="GET")
    assert missing.status_code == 404
    assert {"Code": "StackNotFound"}.items() <= missing.json().items() and missing.json()["RequestId"]


@pytest.mark.slow
def test_bad_signatures_and_replays_are_refused(ros: LocalRos) -> None:
    wrong = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {}, secret_used="guess")
    assert wrong.status_code == 400 and wrong.json()["Code"] == "SignatureDoesNotMatch"
    nonce = uuid.uuid4().hex
    first = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {}, nonce=nonce)
    assert first.status_code == 200 and first.json()["TotalCount"] == 0
    replay = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "ListStacks", {}, nonce=nonce)
    assert replay.status_code == 400 and replay.json()["Code"] == "SignatureNonceUsed"
    bad_bool = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "CreateStack",
                        {"StackName": "b", "DisableRollback": "yes"}, form={"TemplateBody": echo_template()})
    assert bad_bool.status_code == 400 and bad_bool.json()["Code"] == "InvalidParameter"
    assert "DisableRollback" in bad_bool.json()["Message"]
    unknown = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "CreateStackGroup", {})
    assert unknown.status_code == 404 and unknown.json()["Code"] == "InvalidAction.NotFound"
    no_name = rpc_call(ros.endpoint, ros.access_key_id, ros.access_key_secret, "CreateStack", {},
                       form={"TemplateBody": echo_template()})
    assert no_name.json()["Code"] == "MissingParameter" and "StackName" in no_name.json()["Message"]


@pytest.mark.slow
def test_ros_serve_prints_its_endpoint_serves_the_sdk_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAIserve", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "serve-secret",
           "HOME": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "crhelper.cli.main", "ros", "serve", "--port", "0", "--json",
                                "--home", str(tmp_path / "home")], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        shown = json.loads(process.stdout.readline())
        assert shown["access_key_id"] == "LTAIserve" and shown["console_url"].startswith(f"http://{shown['endpoint']}/?token=")
        listed = rpc_call(shown["endpoint"], "LTAIserve", "serve-secret", "ListStacks", {})
        assert listed.status_code == 200 and listed.json()["Stacks"] == []
        process.send_signal(signal.SIGINT)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.slow
def test_ros_serve_without_credentials_says_what_to_do(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_")}
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "ros", "serve", "--port", "0"], cwd=REPO,
                          env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "no access key" in done.stderr and "ALIBABA_CLOUD_ACCESS_KEY_ID" in done.stderr



def test_flattened_lists_booleans_and_numbers_follow_ros_rules() -> None:
    params = Params({"Parameters.2.ParameterKey": "B", "Parameters.2.ParameterValue": "2",
                     "Parameters.1.ParameterKey": "A", "Parameters.1.ParameterValue": "1",
                     "RetainResources.10": "Z", "RetainResources.2": "Y", "Flag": "False", "Other": "TRUE", "N": "12"})
    assert params.parameters() == {"A": "1", "B": "2"}
    assert params.items("RetainResources") == ["Y", "Z"]  # by index, not text order
    assert params.boolean("Flag") is False and params.boolean("Other") is True and params.boolean("Unset") is False
    assert params.integer("N", low=10, high=20) == 12
    with pytest.raises(RosError) as caught:
        params.integer("N", low=1, high=5)
    assert caught.value.code == "InvalidParameter" and "N" in caught.value.message
    with pytest.raises(RosError) as caught:
        Params({"Parameters.1.ParameterValue": "x"}).parameters()
    assert caught.value.code == "MissingParameter" and "Parameters.1.ParameterKey" in caught.value.message
    with pytest.raises(RosError):
        Params({"Parameters.1.ParameterKey": "A", "Parameters.2.ParameterKey": "A"}).parameters()


def test_only_requests_naming_an_action_are_the_api() -> None:
    assert is_api_request({}, {"x-acs-action": "GetStack"}, {})
    assert is_api_request({"Action": ["GetStack"]}, {}, {})
    assert is_api_request({}, {}, {"Action": ["GetStack"]})
    assert not is_api_request({"token": ["t"]}, {"accept": "text/html"}, {})
    assert ros_time("2026-01-02T03:04:05.678Z") == "2026-01-02T03:04:05"


