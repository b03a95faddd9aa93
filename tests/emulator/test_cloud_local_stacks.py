"""Which tokens the stacks of an emulator home can serve with no binding (pure lookups)."""

from __future__ import annotations

from typing import Any

from crhelper.emulator.cloud_local_stacks import canonical_token, function_with_settings, live_resources, live_tokens
from crhelper.emulator.cloud_registry import cloud_token
from crhelper.emulator.model import ResourceRecord, StackRecord


def resource(logical: str, type_name: str, physical: str | None, status: str = "CREATE_COMPLETE",
             **properties: Any) -> ResourceRecord:
    return ResourceRecord(logical, type_name, cloud_token(type_name), 60, physical_id=physical, properties=properties,
                          status=status)


def deploy_stack() -> StackRecord:
    record = StackRecord(name="providers", stack_id="s", region="cn-hangzhou", account_id="123456789",
                         template_text="", parameters={}, no_echo=[], status="CREATE_COMPLETE")
    for item in (resource("Svc", "ALIYUN::FC::Service", "svc", ServiceName="svc"),
                 resource("Fn2", "ALIYUN::FC::Function", "svc|two", ServiceName="svc", FunctionName="two"),
                 resource("Fn3", "ALIYUN::FC3::Function", "three", FunctionName="three"),
                 resource("Async", "ALIYUN::FC3::AsyncInvokeConfig", "three", FunctionName="three"),
                 resource("Gone", "ALIYUN::FC3::Function", "gone", "DELETE_COMPLETE", FunctionName="gone"),
                 resource("Never", "ALIYUN::FC3::Function", None, "CREATE_FAILED", FunctionName="never"),
                 resource("OnTopic", "ALIYUN::FC3::Trigger", "three|mns", FunctionName="three", TriggerName="mns",
                          TriggerType="mns_topic", SourceArn="acs:mns:cn-hangzhou:123456789:/topics/requests")):
        record.resources[item.logical_id] = item
    return record


def test_live_functions_and_the_topics_their_triggers_listen_to_are_served() -> None:
    assert live_tokens([deploy_stack()]) == {
        "acs:fc:cn-hangzhou:123456789:services/svc/functions/two",
        "acs:fc:cn-hangzhou:123456789:functions/three",
        "acs:mns:cn-hangzhou:123456789:topics/requests",
    }


def test_tokens_compare_in_canonical_form() -> None:
    assert canonical_token("acs:mns:cn-hangzhou:123456789:/topics/requests") == "acs:mns:cn-hangzhou:123456789:topics/requests"
    assert canonical_token("acs:mns:cn-hangzhou:123456789:queues/q") is None  # queues are served by bound workers
    assert canonical_token("web:https://example.com/x") is None and canonical_token("nonsense") is None


def test_a_function_comes_with_what_it_needs_to_run() -> None:
    live = live_resources(deploy_stack())
    assert [r.logical_id for r in function_with_settings(live, ("svc", "two"))] == ["Svc", "Fn2"]
    assert [r.logical_id for r in function_with_settings(live, ("", "three"))] == ["Async", "Fn3"]
    assert function_with_settings(live, ("", "gone")) == [] and function_with_settings(live, ("", "never")) == []
