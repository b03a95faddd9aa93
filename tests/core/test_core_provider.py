"""End to end through a real ResponseURL server: every dispatch and failure path of the core."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field, SecretStr

from crhelper import Failure, Provider, Request, Result
from crhelper.constants import CREATE_FAILED_MARKER
from crhelper.testing import make_event


class Greeting(BaseModel):
    Name: str = Field(min_length=1)
    Times: int = 1


class Login(BaseModel):
    User: str
    Password: SecretStr


def greeting_provider(calls: list[str] | None = None) -> Provider:
    provider = Provider()
    calls = calls if calls is not None else []

    @provider.create("Custom::Greeting")
    def create(props: Greeting, request: Request) -> Result:
        calls.append("create")
        return Result(physical_id=f"greeting-{props.Name}", data={"Text": "hi " * props.Times})

    @provider.update("Custom::Greeting")
    def update(props: Greeting, old: Greeting, request: Request) -> Result:
        calls.append("update")
        return Result(data={"Text": "hi " * props.Times, "Was": old.Times})

    @provider.delete("Custom::Greeting")
    def delete(props: Greeting, request: Request) -> None:
        calls.append("delete")

    return provider


def run(provider, server, event, **faults):
    server.attach(event, **faults)
    provider.handle(event)
    return server.wait_for(event["RequestId"], timeout=5)


def test_create_update_delete_round_trip(response_server):
    provider = greeting_provider()
    created = run(provider, response_server, make_event("Create", "Custom::Greeting", {"Name": "ros", "Times": "2"}))
    assert created["Status"] == "SUCCESS"
    assert created["PhysicalResourceId"] == "greeting-ros"
    assert created["Data"] == {"Text": "hi hi "}
    updated = run(
        provider,
        response_server,
        make_event("Update", "Custom::Greeting", {"Name": "ros", "Times": 3}, old_properties={"Name": "ros", "Times": 2},
                   physical_resource_id="greeting-ros"),
    )
    assert updated["PhysicalResourceId"] == "greeting-ros"
    assert updated["Data"] == {"Text": "hi hi hi ", "Was": 2}
    deleted = run(provider, response_server,
                  make_event("Delete", "Custom::Greeting", {"Name": "ros"}, physical_resource_id="greeting-ros"))
    assert deleted["Status"] == "SUCCESS" and deleted["PhysicalResourceId"] == "greeting-ros"


def test_create_without_an_id_gets_the_deterministic_default(response_server):
    provider = Provider()
    provider.create("Custom::Plain")(lambda props, request: None)
    event = make_event("Create", "Custom::Plain", {"a": 1}, stack_name="demo", logical_resource_id="Thing")
    body = run(provider, response_server, event)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"].startswith("demo-Thing-")


def test_validation_error_names_field_and_rule_without_values(response_server):
    provider = greeting_provider()
    body = run(provider, response_server, make_event("Create", "Custom::Greeting", {"Name": "", "Times": "many-times"}))
    assert body["Status"] == "FAILED"
    assert "ResourceProperties.Name: String should have at least 1 character" in body["Reason"]
    assert "ResourceProperties.Times: Input should be a valid integer" in body["Reason"]
    assert "many-times" not in body["Reason"]
    assert body["PhysicalResourceId"] == CREATE_FAILED_MARKER


def test_secret_values_never_reach_the_reason_or_the_log(response_server, capsys):
    provider = Provider()

    @provider.create("Custom::Login")
    def create(props: Login, request: Request) -> Result:
        raise RuntimeError(f"login refused for {props.User} with {props.Password.get_secret_value()}")

    body = run(provider, response_server, make_event("Create", "Custom::Login", {"User": "bob", "Password": "hunter2"}))
    assert body["Reason"] == "RuntimeError: login refused for bob with ***"
    logged = capsys.readouterr().err
    assert "hunter2" not in logged and "RuntimeError" in logged


def test_exceptions_become_failed_with_type_and_message(response_server):
    provider = Provider()

    @provider.create("Custom::Boom")
    def create(props: dict, request: Request) -> Result:
        raise KeyError("missing thing")

    body = run(provider, response_server, make_event("Create", "Custom::Boom"))
    assert body == {**body, "Status": "FAILED", "Reason": "KeyError: 'missing thing'"}


def test_failure_gives_the_reason_verbatim(response_server):
    provider = Provider()

    @provider.create("Custom::Quota")
    def create(props: dict, request: Request) -> Result:
        raise Failure("quota exceeded: 3 of 3 clusters in use")

    body = run(provider, response_server, make_event("Create", "Custom::Quota"))
    assert body["Reason"] == "quota exceeded: 3 of 3 clusters in use"


def test_update_that_changes_the_id_is_failed_with_an_explanation(response_server):
    provider = Provider()
    provider.update("Custom::Move")(lambda props, old, request: Result(physical_id="new-id"))
    body = run(provider, response_server,
               make_event("Update", "Custom::Move", {}, physical_resource_id="old-id"))
    assert body["Status"] == "FAILED"
    assert "ROS forbids changing it" in body["Reason"]
    assert body["PhysicalResourceId"] == "old-id"


def test_update_returning_the_same_id_is_fine(response_server):
    provider = Provider()
    provider.update("Custom::Same")(lambda props, old, request: Result(physical_id="keep"))
    body = run(provider, response_server, make_event("Update", "Custom::Same", {}, physical_resource_id="keep"))
    assert body["Status"] == "SUCCESS"


@pytest.mark.parametrize("physical_id", [None, "", "-", CREATE_FAILED_MARKER])
def test_delete_after_failed_create_succeeds_without_calling_the_handler(response_server, physical_id):
    calls: list[str] = []
    provider = greeting_provider(calls)
    event = make_event("Delete", "Custom::Greeting", {"Name": "x"}, physical_resource_id=physical_id)
    if physical_id is None:
        del event["PhysicalResourceId"]
    body = run(provider, response_server, event)
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"]
    assert calls == []


def test_failed_create_then_its_delete_is_a_no_op(response_server):
    calls: list[str] = []
    provider = greeting_provider(calls)
    failed = run(provider, response_server, make_event("Create", "Custom::Greeting", {"Times": 1}))
    assert failed["Status"] == "FAILED"
    deleted = run(provider, response_server,
                  make_event("Delete", "Custom::Greeting", {"Times": 1}, physical_resource_id=failed["PhysicalResourceId"]))
    assert deleted["Status"] == "SUCCESS"
    assert calls == []


def test_missing_delete_handler_means_success(response_server):
    provider = Provider()
    provider.create("Custom::NoDelete")(lambda props, request: None)
    body = run(provider, response_server, make_event("Delete", "Custom::NoDelete", {}, physical_resource_id="p"))
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "p"


def test_missing_create_handler_lists_what_is_registered(response_server):
    provider = Provider()
    provider.delete("Custom::OnlyDelete")(lambda props, request: None)
    body = run(provider, response_server, make_event("Create", "Custom::OnlyDelete"))
    assert body["Reason"] == "no Create handler registered for Custom::OnlyDelete; registered: Delete"


def test_unknown_type_lists_registered_types(response_server):
    body = run(greeting_provider(), response_server, make_event("Create", "Custom::Nope"))
    assert body["Status"] == "FAILED"
    assert body["Reason"] == "unknown ResourceType 'Custom::Nope'; this provider handles: Custom::Greeting"


def test_generic_type_is_routed_to_the_default_type(response_server, monkeypatch):
    provider = greeting_provider()
    generic = make_event("Create", "ALIYUN::ROS::CustomResource", {"Name": "g"})
    body = run(provider, response_server, generic)
    assert body["Status"] == "FAILED" and "CRHELPER_DEFAULT_TYPE" in body["Reason"]
    monkeypatch.setenv("CRHELPER_DEFAULT_TYPE", "Custom::Greeting")
    body = run(provider, response_server, make_event("Create", "ALIYUN::ROS::CustomResource", {"Name": "g"}))
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == "greeting-g"
    coded = Provider(default_type="Custom::Greeting")
    coded.create("Custom::Greeting")(lambda props, request: Result(physical_id="coded"))
    monkeypatch.delenv("CRHELPER_DEFAULT_TYPE")
    body = run(coded, response_server, make_event("Create", "ALIYUN::ROS::CustomResource"))
    assert body["PhysicalResourceId"] == "coded"


def test_non_serialisable_data_is_failed_naming_the_key(response_server):
    provider = Provider()
    provider.create("Custom::Bad")(lambda props, request: Result(physical_id="p", data={"fine": 1, "when": object()}))
    body = run(provider, response_server, make_event("Create", "Custom::Bad"))
    assert body["Status"] == "FAILED" and "Data['when']" in body["Reason"]


def test_wrong_return_type_is_explained(response_server):
    provider = Provider()
    provider.create("Custom::Ret")(lambda props, request: {"Data": 1})
    body = run(provider, response_server, make_event("Create", "Custom::Ret"))
    assert body["Reason"] == "Create handler returned dict; return crhelper.Result(...) or None"


def test_oversize_data_is_failed_not_cut(response_server):
    provider = Provider()
    provider.create("Custom::Big")(lambda props, request: Result(physical_id="p", data={"blob": "x" * 5000}))
    body = run(provider, response_server, make_event("Create", "Custom::Big"))
    assert body["Status"] == "FAILED" and "blob" in body["Reason"] and "Data" not in body


def test_malformed_request_with_a_url_gets_a_failed_naming_the_problem(response_server):
    event = make_event("Create", "Custom::Greeting")
    event["RequestType"] = "Upsert"
    body = run(greeting_provider(), response_server, event)
    assert body["Status"] == "FAILED"
    assert "RequestType: must be one of Create, Update, Delete, got 'Upsert'" in body["Reason"]


def test_request_without_url_is_logged_and_not_answered(response_server, capsys):
    event = make_event("Create", "Custom::Greeting")
    del event["ResponseURL"], event["IntranetResponseURL"]
    assert greeting_provider().handle(event) is None
    logged = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert any(entry["message"] == "request cannot be answered" and "ResponseURL" in entry["error"] for entry in logged)
    assert response_server.captures == []


def test_undecodable_event_is_logged(capsys):
    assert greeting_provider().handle(b"\x00garbage") is None
    assert "request body is not valid JSON" in capsys.readouterr().err


def test_handlers_may_take_fewer_arguments(response_server):
    provider = Provider()
    provider.create("Custom::Short")(lambda props: Result(physical_id=f"n-{props['n']}"))
    provider.update("Custom::Short")(lambda props, old: Result(data={"old": old["n"]}))
    assert run(provider, response_server, make_event("Create", "Custom::Short", {"n": 1}))["PhysicalResourceId"] == "n-1"
    body = run(provider, response_server, make_event("Update", "Custom::Short", {"n": 2}, old_properties={"n": 1},
                                                     physical_resource_id="n-1"))
    assert body["Data"] == {"old": 1}


def test_registration_rules():
    provider = Provider()
    provider.create("Custom::A")(lambda props: None)
    with pytest.raises(ValueError, match="already registered"):
        provider.create("Custom::A")(lambda props: None)
    with pytest.raises(ValueError, match="Custom::<Name>"):
        provider.create("AWS::S3::Bucket")(lambda props: None)
    assert provider.types == ["Custom::A"]


def test_fc_handler_returns_the_sent_body_as_json(response_server):
    provider = greeting_provider()
    event = response_server.attach(make_event("Create", "Custom::Greeting", {"Name": "fc"}))
    returned = provider.fc_handler(json.dumps(event).encode(), None)
    assert json.loads(returned) == response_server.wait_for(event["RequestId"])


def test_rollback_delete_after_an_unknown_type_create_succeeds(response_server):
    provider = greeting_provider()
    failed = run(provider, response_server, make_event("Create", "Custom::Typo", {"Name": "x"}))
    assert failed["Status"] == "FAILED"
    deleted = run(provider, response_server,
                  make_event("Delete", "Custom::Typo", {"Name": "x"}, physical_resource_id=failed["PhysicalResourceId"]))
    assert deleted["Status"] == "SUCCESS"


def test_sys_exit_in_a_handler_is_answered_failed(response_server):
    import sys

    provider = Provider()
    provider.create("Custom::Exit")(lambda props, request: sys.exit(3))
    body = run(provider, response_server, make_event("Create", "Custom::Exit"))
    assert body["Status"] == "FAILED" and body["Reason"] == "SystemExit: 3"
