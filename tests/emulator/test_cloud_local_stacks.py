"""Which tokens the stacks of an emulator home can serve with no binding (pure lookups)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crhelper.emulator.cloud_local_stacks import (FUNCTION_TYPES, TOKEN_TYPES, TRIGGER_TYPES, canonical_token,
                                                  function_with_settings, live_resources, live_tokens, stack_records,
                                                  topic_trigger)
from crhelper.emulator.cloud_registry import cloud_token
from crhelper.emulator.model import ResourceRecord, StackRecord
from crhelper.emulator.state import StackStore


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


def test_lookups_over_a_home_read_only_the_types_they_need_and_find_the_same(tmp_path: Path) -> None:
    """A stack of many custom resources beside the deployment stack: a function lookup per request must
    not parse every resource of every stack (it ran once per delivery), and must find what a full read finds."""
    busy = StackRecord(name="busy", stack_id="b", region="cn-hangzhou", account_id="123456789",
                       template_text="", parameters={}, no_echo=[], status="CREATE_IN_PROGRESS")
    for i in range(50):
        item = ResourceRecord(f"Sleep{i}", "Custom::Sleep", "acs:fc:cn-hangzhou:123456789:functions/x", 60,
                              physical_id=f"sleep-{i}", status="CREATE_COMPLETE")
        busy.resources[item.logical_id] = item
    store = StackStore(tmp_path)
    try:
        store.save(deploy_stack())
        store.save(busy)
        def read(**options: Any) -> dict[str, StackRecord]:
            return {r.name: r for r in stack_records(store, **options)}

        full = read(region="cn-hangzhou", account_id="123456789")
        functions = read(region="cn-hangzhou", account_id="123456789", resource_types=FUNCTION_TYPES)
        triggers = read(region="cn-hangzhou", account_id="123456789", resource_types=TRIGGER_TYPES)
        tokens = read(resource_types=TOKEN_TYPES)
        assert {name: len(r.resources) for name, r in full.items()} == {"providers": 7, "busy": 50}
        assert {name: list(r.resources) for name, r in functions.items()} == {
            "providers": ["Svc", "Fn2", "Fn3", "Async", "Gone", "Never"], "busy": []}
        assert {name: list(r.resources) for name, r in triggers.items()} == {"providers": ["OnTopic"], "busy": []}
        assert read(resource_types=())["providers"].resources == {}
        for key in (("svc", "two"), ("", "three"), ("", "gone")):
            assert ([r.logical_id for r in function_with_settings(live_resources(functions["providers"]), key)]
                    == [r.logical_id for r in function_with_settings(live_resources(full["providers"]), key)])
        assert (topic_trigger(live_resources(triggers["providers"]), "requests")
                == topic_trigger(live_resources(full["providers"]), "requests") is not None)
        assert live_tokens(tokens.values()) == live_tokens(full.values()) != set()
        assert read(region="cn-shanghai", account_id="123456789", resource_types=FUNCTION_TYPES) == {}
    finally:
        store.close()
