"""A stack whose custom resource is served by an FC 3.0 function of the same template, from inline
code, with no bindings: created, updated (a replaced role, new environment) and deleted through the
local Function Compute endpoint and the real FC 3.0 SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crhelper.emulator import StackEmulator, StackEvent

DATA = Path(__file__).parent / "data"
TEMPLATE = (DATA / "cloud_fc3_stack.yml").read_text()


def no_bindings(token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    raise AssertionError(f"request for {token} left the stack's own resources")


def statuses(events: list[StackEvent], logical_id: str) -> list[str]:
    return [e.status for e in events if e.logical_id == logical_id]


@pytest.mark.slow
def test_fc3_function_from_inline_code_serves_a_custom_resource_through_its_arn(emulator: StackEmulator) -> None:
    events: list[StackEvent] = []
    created = emulator.create("cloud", TEMPLATE, {}, no_bindings, on_event=events.append)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    outputs = emulator.outputs("cloud")
    assert outputs["Token"] == f"acs:fc:{emulator.region}:{emulator.account_id}:functions/echo-provider"
    assert (outputs["Greeting"], outputs["Text"]) == ("hello", "hello-world")
    assert outputs["RoleArn"] == f"acs:ram::{emulator.account_id}:role/echo-fc-role"

    events.clear()
    updated = emulator.update("cloud", TEMPLATE, {"Greeting": "hi", "RoleName": "echo-fc-role-2"}, no_bindings,
                              on_event=events.append)
    assert updated.status == "UPDATE_COMPLETE", updated.status_reason
    outputs = emulator.outputs("cloud")
    # The function was re-deployed (a fresh endpoint) with its new environment, then served the Update.
    assert (outputs["Greeting"], outputs["Text"]) == ("hi", "hi-world")
    assert outputs["RoleArn"] == f"acs:ram::{emulator.account_id}:role/echo-fc-role-2"
    role_events = [(e.status, e.physical_id) for e in events if e.logical_id == "Role"]
    assert role_events[-1] == ("UPDATE_COMPLETE", "echo-fc-role-2")  # RoleName is not editable: replaced
    assert statuses(events, "Echo") == ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE"]
    assert statuses(events, "Message") == ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE"]

    events.clear()
    deleted = emulator.delete("cloud", no_bindings, on_event=events.append)
    assert deleted.status == "DELETE_COMPLETE", deleted.status_reason
    order = [e.logical_id for e in events if e.status == "DELETE_COMPLETE" and e.logical_id != "cloud"]
    assert order == ["Message", "Echo", "Role"]  # the custom resource's Delete still reached its function


FAILING = """
ROSTemplateFormatVersion: '2015-09-01'
Resources:
  Silent:
    Type: ALIYUN::FC3::Function
    Properties:
      FunctionName: silent
      Handler: index.handler
      Runtime: python3.10
      Code:
        SourceCode: |
          def handler(event, context):
              return "forgot to answer"
  Thing:
    Type: Custom::Thing
    Properties:
      ServiceToken: {Fn::GetAtt: [Silent, ARN]}
      Timeout: 20
"""


@pytest.mark.slow
def test_a_function_that_never_answers_fails_its_resource(emulator: StackEmulator) -> None:
    events: list[StackEvent] = []
    described = emulator.create("silent", FAILING, {}, no_bindings, on_event=events.append, disable_rollback=True)
    assert described.status == "CREATE_FAILED"
    reason = next(e.reason for e in events if e.logical_id == "Thing" and e.status == "CREATE_FAILED")
    assert reason == "function 'silent' finished but its response never reached the ResponseURL"
    assert statuses(events, "Silent") == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]


def test_a_runtime_the_local_endpoint_cannot_run_fails_naming_the_property(emulator: StackEmulator) -> None:
    template = FAILING.replace("python3.10", "nodejs20")
    events: list[StackEvent] = []
    described = emulator.create("node", template, {}, no_bindings, on_event=events.append, disable_rollback=True)
    assert described.status == "CREATE_FAILED"
    reason = next(e.reason for e in events if e.logical_id == "Silent" and e.status == "CREATE_FAILED")
    assert reason == "Properties.Runtime: the local Function Compute runs Python functions only, got 'nodejs20'"
    assert "Thing" not in {e.logical_id for e in events}


@pytest.mark.slow
def test_fc2_service_function_and_fc3_trigger_run_with_the_stack(emulator: StackEmulator) -> None:
    events: list[StackEvent] = []
    created = emulator.create("fc2", (DATA / "cloud_fc2_stack.yml").read_text(), {}, no_bindings, on_event=events.append)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    outputs = emulator.outputs("fc2")
    assert outputs == {"V": "fc2",
                       "Arn": f"acs:fc:{emulator.region}:{emulator.account_id}:services/providers/functions/echo2"}
    physical = {e.logical_id: e.physical_id for e in events if e.status == "CREATE_COMPLETE"}
    assert (physical["Fn"], physical["Tick"], physical["Tick2"]) == ("providers|echo2", "f3|tick", "providers|echo2|tick2")
    deleted = emulator.delete("fc2", no_bindings)
    assert deleted.status == "DELETE_COMPLETE", deleted.status_reason


@pytest.mark.slow
def test_a_failed_update_rolls_the_deployed_function_back(emulator: StackEmulator) -> None:
    created = emulator.create("back", TEMPLATE, {}, no_bindings)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    # The function is updated (deployed in this operation), then the custom resource's Update fails:
    # the rollback updates the same deployed function back to its old environment.
    events: list[StackEvent] = []
    updated = emulator.update("back", TEMPLATE, {"Greeting": "fail"}, no_bindings, on_event=events.append)
    assert updated.status == "ROLLBACK_COMPLETE", updated.status_reason
    assert updated.status_reason == "Resource Message failed: asked to fail"
    assert statuses(events, "Echo") == ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE", "UPDATE_IN_PROGRESS", "UPDATE_COMPLETE"]
    assert emulator.outputs("back")["Greeting"] == "hello"


@pytest.mark.slow
def test_functions_and_triggers_are_deployed_through_the_management_api() -> None:
    from crhelper.emulator.cloud_registry import cloud_type
    from alibabacloud_fc20230330.models import GetFunctionRequest

    from crhelper.emulator.cloud_session import CloudSession

    function_type, trigger_type = cloud_type("ALIYUN::FC3::Function"), cloud_type("ALIYUN::FC3::Trigger")
    assert function_type is not None and trigger_type is not None
    function = function_type.with_defaults({"FunctionName": "f", "Handler": "index.handler", "Runtime": "python3.10",
                                            "EnvironmentVariables": {"A": "1"}, "Code": {"SourceCode": "def handler(e, c):\n    return 1\n"}})
    trigger = {"FunctionName": "f", "TriggerName": "nightly", "TriggerType": "timer",
               "TriggerConfig": {"CronExpression": "0 0 4 * * *", "Enable": False}}
    session = CloudSession("cn-hangzhou", "123456789")
    try:
        assert session.apply("Create", function_type.name, function).ok
        assert session.apply("Create", trigger_type.name, trigger).ok
        client = session.fc.client3()
        deployed = client.get_function("f", GetFunctionRequest()).body
        assert (deployed.memory_size, deployed.timeout, deployed.environment_variables) == (128, 3, {"A": "1"})
        assert json.loads(client.get_trigger("f", "nightly").body.trigger_config) == {"cronExpression": "0 0 4 * * *",
                                                                                       "enable": False}
        updated = session.apply("Update", function_type.name, {**function, "Timeout": 9}, "f", function)
        assert updated.ok and updated.physical_id == "f"
        assert client.get_function("f", GetFunctionRequest()).body.timeout == 9
        assert session.apply("Delete", trigger_type.name, trigger, "f|nightly").ok
        assert session.apply("Delete", function_type.name, function, "f").ok
        with pytest.raises(Exception, match="FunctionNotFound"):
            client.get_function("f", GetFunctionRequest())
    finally:
        session.close()
