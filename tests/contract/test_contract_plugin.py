"""The pytest plugin's fixtures, used the way a provider author would use them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from crhelper.loading import load_provider

GREETING = Path(__file__).resolve().parents[2] / "samples" / "greeting.py"
TOKEN = "acs:fc:cn-hangzhou:123456789:functions/greeting"


def test_ros_event_gets_fresh_urls_and_the_server_checks_the_answer(ros_event: Callable[..., dict[str, Any]],
                                                                   ros_response_server: Any) -> None:
    provider = load_provider(f"{GREETING}:provider")
    event = ros_event("Create", "Custom::Greeting", {"Name": "plug"})
    other = ros_event("Create", "Custom::Greeting", {"Name": "plug"})
    assert event["ResponseURL"] != other["ResponseURL"] and event["IntranetResponseURL"].startswith(ros_response_server.base_url)
    provider.handle(event)
    answer = ros_response_server.wait_for(event["RequestId"], timeout=5)
    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", "greeting-plug")
    assert ros_response_server.violations == []


def test_ros_event_faults_reach_the_response_server(ros_event: Callable[..., dict[str, Any]], ros_response_server: Any) -> None:
    provider = load_provider(f"{GREETING}:provider")
    event = ros_event("Delete", "Custom::Greeting", {"Name": "plug"}, "greeting-plug", fail_first=1)
    provider.handle(event)
    assert ros_response_server.attempts_for(event["ResponseURL"]) == 2


def test_run_contract_fixture(run_contract: Callable[..., Any]) -> None:
    report = run_contract(load_provider(f"{GREETING}:provider"), "Custom::Greeting", {"Name": "fx"}, update={"Name": "fx", "Times": 2})
    assert report.passed, report.failures()


def test_stack_emulator_with_stack_delivery(stack_emulator: Any, stack_delivery: Callable[..., Any]) -> None:
    template = {
        "ROSTemplateFormatVersion": "2015-09-01",
        "Resources": {"Hello": {"Type": "Custom::Greeting",
                                "Properties": {"ServiceToken": TOKEN, "Parameters": {"Name": "stack", "Times": 2}}}},
        "Outputs": {"Text": {"Value": {"Fn::GetAtt": ["Hello", "Text"]}}},
    }
    with stack_delivery({TOKEN: f"{GREETING}:provider"}) as deliver:
        created = stack_emulator.create("plugged", json.dumps(template), {}, deliver)
    assert created.status == "CREATE_COMPLETE"
    assert stack_emulator.outputs("plugged") == {"Text": "hi stack hi stack"}
