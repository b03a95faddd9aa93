"""Create, update and delete with ROS semantics: ordering, rollback, Retain, Timeout, concurrency."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from emulator_support import Provider, as_text, custom, template

from crhelper.emulator import StackEmulator, StackEvent, StackStateError, TemplateValidationError


def chain() -> dict[str, Any]:
    """A -> B -> C (C depends on B, B on A) plus an independent D."""
    return template(
        {
            "A": custom(Parameters={"V": "a"}),
            "B": custom(Parameters={"From": {"Fn::GetAtt": ["A", "V"]}}),
            "C": {**custom(Parameters={"V": "c"}), "DependsOn": "B"},
            "D": custom(Parameters={"V": "d"}),
        },
        Outputs={"BFrom": {"Value": {"Fn::GetAtt": ["B", "From"]}}},
    )


def statuses(events: list[StackEvent], logical_id: str) -> list[str]:
    return [e.status for e in events if e.logical_id == logical_id]


def resource(emulator: StackEmulator, stack: str, logical_id: str) -> Any:
    return next(r for r in emulator.describe(stack).resources if r.logical_id == logical_id)


def create(emulator: StackEmulator, provider: Provider, doc: dict[str, Any], events: list[StackEvent], **kw: Any) -> Any:
    return emulator.create("s", as_text(doc), kw.pop("parameters", {}), provider, on_event=events.append, **kw)


# ---------------------------------------------------------------------- create


def test_create_in_dependency_order_with_requests_per_spec(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    described = create(emulator, provider, chain(), events)
    assert described.status == "CREATE_COMPLETE"
    order = [lid for _, lid in provider.sent()]
    assert order.index("A") < order.index("B") < order.index("C")
    request = provider.last("B", "Create")
    assert set(request) == {
        "RequestType", "RequestId", "StackId", "StackName", "RegionId", "ResourceOwnerId", "CallerId",
        "ResourceType", "LogicalResourceId", "ResourceProperties",
    }
    assert request["StackName"] == "s" and request["StackId"] == described.stack_id
    assert request["ResourceProperties"] == {"From": "a"}
    assert len({r["RequestId"] for r in provider.requests}) == 4
    assert described.output_values() == {"BFrom": "a"}
    assert [r.depends_on for r in described.resources if r.logical_id == "C"] == [["B"]]
    assert statuses(events, "s") == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]
    assert statuses(events, "B") == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]
    assert events[0].resource_type == "ALIYUN::ROS::Stack" and events[0].physical_id == described.stack_id
    b_done = next(e for e in events if e.logical_id == "B" and e.status == "CREATE_COMPLETE")
    assert b_done.physical_id == resource(emulator, "s", "B").physical_id
    assert b_done.resource_type == "Custom::Echo"


def test_create_failure_rolls_back(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("B", "Create", fail="quota exceeded")
    described = create(emulator, provider, chain(), events)
    assert described.status == "CREATE_ROLLBACK_COMPLETE"
    assert described.status_reason == "Resource B failed: quota exceeded"
    sent = provider.sent()
    assert ("Create", "C") not in sent
    deletes = provider.sent("Delete")
    assert sorted(deletes) == [("Delete", "A"), ("Delete", "B"), ("Delete", "D")]
    assert deletes.index(("Delete", "B")) < deletes.index(("Delete", "A"))
    assert "PhysicalResourceId" not in provider.last("B", "Delete")
    assert provider.last("A", "Delete")["PhysicalResourceId"] == resource(emulator, "s", "A").physical_id
    assert resource(emulator, "s", "A").physical_id is not None
    assert provider.last("A", "Delete")["ResourceProperties"] == {"V": "a"}
    assert statuses(events, "s") == ["CREATE_IN_PROGRESS", "CREATE_ROLLBACK_IN_PROGRESS", "CREATE_ROLLBACK_COMPLETE"]
    failed = next(e for e in events if e.status == "CREATE_FAILED")
    assert (failed.logical_id, failed.reason) == ("B", "quota exceeded")
    assert statuses(events, "A") == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE", "DELETE_IN_PROGRESS", "DELETE_COMPLETE"]
    assert described.outputs == []


def test_create_failure_without_rollback(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("B", "Create", fail="nope")
    described = create(emulator, provider, chain(), events, disable_rollback=True)
    assert described.status == "CREATE_FAILED"
    assert provider.sent("Delete") == []
    assert resource(emulator, "s", "A").status == "CREATE_COMPLETE"
    assert resource(emulator, "s", "B").status == "CREATE_FAILED"
    emulator.delete("s", provider)
    assert sorted(provider.sent("Delete")) == [("Delete", "A"), ("Delete", "B"), ("Delete", "D")]
    assert "PhysicalResourceId" not in provider.last("B", "Delete")


def test_rollback_failure_is_reported(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("B", "Create", fail="bad")
    provider.on("A", "Delete", fail="stuck")
    described = create(emulator, provider, chain(), events)
    assert described.status == "CREATE_ROLLBACK_FAILED"
    assert described.status_reason == "Resource A failed: stuck"
    assert resource(emulator, "s", "A").status == "DELETE_FAILED"


def test_provider_exception_fails_the_resource_with_its_message(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    provider.on("A", "Create", raise_error=ConnectionError("ResponseURL returned 403 for the callback"))
    described = create(emulator, provider, template({"A": custom()}), events)
    assert described.status == "CREATE_ROLLBACK_COMPLETE"
    assert next(e for e in events if e.status == "CREATE_FAILED").reason == "ResponseURL returned 403 for the callback"


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ({"Status": "SUCCESS"}, "provider response to Create has no PhysicalResourceId"),
        ({"Status": "OK", "PhysicalResourceId": "x"}, "provider response Status must be SUCCESS or FAILED, got 'OK'"),
        ({"Status": "FAILED"}, "provider answered FAILED without a Reason"),
        ({"Status": "SUCCESS", "PhysicalResourceId": "x", "Data": [1]}, "provider response Data must be a JSON object, got list"),
        ({"Status": "SUCCESS", "PhysicalResourceId": "x" * 256}, "provider response PhysicalResourceId is longer than 255 bytes"),
    ],
)
def test_malformed_responses_fail_the_resource(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent], response: dict[str, Any], reason: str
) -> None:
    provider.on("A", "Create", response=response)
    create(emulator, provider, template({"A": custom()}), events, disable_rollback=True)
    assert resource(emulator, "s", "A").status_reason == reason


@pytest.mark.slow
def test_timeout_is_enforced(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("Slow", "Create", hang=True)
    doc = template({"Slow": custom(Timeout=1), "Fast": custom()})
    started = time.monotonic()
    described = create(emulator, provider, doc, events)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 3.0
    assert described.status == "CREATE_ROLLBACK_COMPLETE"
    assert next(e for e in events if e.status == "CREATE_FAILED").reason == (
        "timed out after 1 s without a response from the provider"
    )
    assert "PhysicalResourceId" not in provider.last("Slow", "Delete")
    timeouts = {r["LogicalResourceId"]: call[1] for r, call in zip(provider.requests, provider.calls) if r["RequestType"] == "Create"}
    assert timeouts == {"Slow": 1.0, "Fast": 60.0}


def test_independent_resources_run_concurrently(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    resources = {f"R{i}": custom(Parameters={"I": i}) for i in range(10)}
    for name in resources:
        provider.on(name, "Create", sleep=0.3)
        provider.on(name, "Delete", sleep=0.3)
    started = time.monotonic()
    assert create(emulator, provider, template(resources), events).status == "CREATE_COMPLETE"
    assert time.monotonic() - started < 0.9
    started = time.monotonic()
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert time.monotonic() - started < 0.9


def test_parallelism_bounds_parallel_requests(tmp_path: Any, provider: Provider, events: list[StackEvent]) -> None:
    resources = {f"R{i}": custom() for i in range(4)}
    for name in resources:
        provider.on(name, "Create", sleep=0.2)
    with StackEmulator(tmp_path / "bounded") as emulator:
        started = time.monotonic()
        assert create(emulator, provider, template(resources), events, parallelism=2).status == "CREATE_COMPLETE"
        assert time.monotonic() - started >= 0.4


class InFlight:
    """Wraps a deliverer and records the most requests of each type it had in flight at once."""

    def __init__(self, deliver: Provider) -> None:
        self._deliver = deliver
        self._lock = threading.Lock()
        self._now: dict[str, int] = {}
        self.most: dict[str, int] = {}

    def __call__(self, token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        kind = request["RequestType"]
        with self._lock:
            self._now[kind] = self._now.get(kind, 0) + 1
            self.most[kind] = max(self.most.get(kind, 0), self._now[kind])
        try:
            return self._deliver(token, request, timeout)
        finally:
            with self._lock:
                self._now[kind] -= 1


def test_parallelism_stays_with_the_stack_as_in_ros(tmp_path: Any, provider: Provider) -> None:
    """ROS associates Parallelism with the stack: an update without one keeps it, the delete too;
    an update with 0 lifts it (no limit)."""
    resources = {f"R{i}": custom(Parameters={"V": 1}) for i in range(4)}
    changed = {f"R{i}": custom(Parameters={"V": 2}) for i in range(4)}
    for name in resources:
        for kind in ("Create", "Update", "Delete"):
            provider.on(name, kind, sleep=0.05)
    seen = InFlight(provider)
    with StackEmulator(tmp_path / "kept") as emulator:
        assert emulator.create("s", as_text(template(resources)), {}, seen, parallelism=1).status == "CREATE_COMPLETE"
        assert emulator.update("s", as_text(template(changed)), {}, seen).status == "UPDATE_COMPLETE"
        assert seen.most == {"Create": 1, "Update": 1}
        assert emulator.store.load("s").parallelism == 1  # type: ignore[union-attr]
        emulator.update("s", as_text(template(resources)), {}, seen, parallelism=0)
        assert emulator.store.load("s").parallelism == 0  # type: ignore[union-attr]
        assert emulator.delete("s", seen).status == "DELETE_COMPLETE"
    assert seen.most == {"Create": 1, "Update": 4, "Delete": 4}


@pytest.mark.parametrize("value", [-1, 1.5, True, "2"])
def test_parallelism_must_be_a_whole_number_from_zero(emulator: StackEmulator, provider: Provider, value: Any) -> None:
    with pytest.raises(ValueError, match=r"Parallelism: must be a whole number >= 0 \(0 means no limit\)"):
        emulator.create("s", as_text(template({"A": custom()})), {}, provider, parallelism=value)
    assert provider.requests == []


def test_dependent_waits_for_slow_dependency(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("A", "Create", sleep=0.2)
    doc = template({"A": custom(), "B": {**custom(), "DependsOn": ["A"]}, "C": custom()})
    create(emulator, provider, doc, events)
    completes = [e.logical_id for e in events if e.status == "CREATE_COMPLETE" and e.logical_id != "s"]
    starts = [e.logical_id for e in events if e.status == "CREATE_IN_PROGRESS" and e.logical_id != "s"]
    assert starts.index("C") < starts.index("B")
    assert completes.index("A") < starts.index("B")


def test_output_resolution_failure_rolls_back(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    doc = template({"A": custom()}, Outputs={"O": {"Value": {"Fn::GetAtt": ["A", "Missing"]}}})
    described = create(emulator, provider, doc, events)
    assert described.status == "CREATE_ROLLBACK_COMPLETE"
    assert described.status_reason == (
        "Outputs could not be resolved: Outputs.O.Value: Fn::GetAtt: resource 'A' has no attribute 'Missing' (Data keys: none)"
    )


def test_validation_errors_run_nothing(emulator: StackEmulator, provider: Provider) -> None:
    doc = template({"A": custom(Parameters={"X": {"Ref": "Nope"}})})
    with pytest.raises(TemplateValidationError):
        emulator.create("s", as_text(doc), {}, provider)
    assert provider.requests == []
    assert emulator.list_stacks() == []


# ---------------------------------------------------------------------- update


def updated_chain() -> dict[str, Any]:
    doc = chain()
    doc["Resources"]["A"]["Properties"]["Parameters"] = {"V": "a2"}
    del doc["Resources"]["D"]
    doc["Resources"]["E"] = custom(Parameters={"V": "e"})
    return doc


def test_update_sends_only_what_changed(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    create(emulator, provider, chain(), events)
    ids = {r.logical_id: r.physical_id for r in emulator.describe("s").resources}
    provider.requests.clear()
    described = emulator.update("s", as_text(updated_chain()), {}, provider, on_event=events.append)
    assert described.status == "UPDATE_COMPLETE"
    sent = provider.sent()
    assert sorted(sent) == [("Create", "E"), ("Delete", "D"), ("Update", "A"), ("Update", "B")]
    assert sent[-1] == ("Delete", "D")
    assert sent.index(("Update", "A")) < sent.index(("Update", "B"))
    update_a = provider.last("A", "Update")
    assert update_a["PhysicalResourceId"] == ids["A"]
    assert update_a["ResourceProperties"] == {"V": "a2"}
    assert update_a["OldResourceProperties"] == {"V": "a"}
    assert provider.last("B", "Update")["OldResourceProperties"] == {"From": "a"}
    assert provider.last("D", "Delete")["PhysicalResourceId"] == ids["D"]
    assert described.output_values() == {"BFrom": "a2"}
    assert sorted(r.logical_id for r in described.resources) == ["A", "B", "C", "E"]
    assert {r.logical_id: r.physical_id for r in described.resources if r.logical_id != "E"} == {
        k: v for k, v in ids.items() if k != "D"
    }
    assert statuses(events, "s")[-2:] == ["UPDATE_IN_PROGRESS", "UPDATE_COMPLETE"]


def test_update_with_only_parameter_changes(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    doc = template(
        {"A": custom(Parameters={"V": {"Ref": "P"}}), "B": custom(Parameters={"V": {"Ref": "Q"}})},
        Parameters={"P": {"Type": "String"}, "Q": {"Type": "String", "Default": "q"}},
    )
    create(emulator, provider, doc, events, parameters={"P": "1"})
    provider.requests.clear()
    assert emulator.update("s", None, {"Q": "q2"}, provider, use_previous_parameters=True).status == "UPDATE_COMPLETE"
    assert provider.sent() == [("Update", "B")]
    assert emulator.describe("s").parameters == {"P": "1", "Q": "q2"}
    provider.requests.clear()
    assert emulator.update("s", None, {}, provider, use_previous_parameters=True).status == "UPDATE_COMPLETE"
    assert provider.requests == []
    # As in ROS, without UsePreviousParameters a parameter not given takes the template's default
    # (Q back to "q"), and one without a default must be given again.
    with pytest.raises(TemplateValidationError, match="Parameters.P: no value given"):
        emulator.update("s", None, {}, provider)
    assert emulator.update("s", None, {"P": "1"}, provider).status == "UPDATE_COMPLETE"
    assert provider.sent() == [("Update", "B")] and provider.last("B", "Update")["ResourceProperties"] == {"V": "q"}
    assert emulator.describe("s").parameters == {"P": "1", "Q": "q"}


def test_update_failure_rolls_back_with_old_properties(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    create(emulator, provider, chain(), events)
    before = emulator.describe("s")
    provider.requests.clear()
    provider.on("B", "Update", fail="cannot resize", only_for={"From": "a2"})
    doc = updated_chain()
    doc["Resources"]["F"] = {**custom(), "DependsOn": "A"}
    described = emulator.update("s", as_text(doc), {}, provider, on_event=events.append)
    assert described.status == "ROLLBACK_COMPLETE"
    assert described.status_reason == "Resource B failed: cannot resize"
    rollback_a = provider.requests[[i for i, r in enumerate(provider.sent()) if r == ("Update", "A")][-1]]
    assert rollback_a["ResourceProperties"] == {"V": "a"}
    assert rollback_a["OldResourceProperties"] == {"V": "a2"}
    assert provider.sent().count(("Update", "A")) == 2
    # B's own Update failed, and it too gets the old properties back (its provider may have half-applied them).
    assert provider.sent().count(("Update", "B")) == 2
    rollback_b = provider.last("B", "Update")
    assert rollback_b["ResourceProperties"] == {"From": "a"} and rollback_b["OldResourceProperties"] == {"From": "a2"}
    assert provider.sent().index(("Update", "B"), provider.sent().index(("Update", "B")) + 1) > [
        i for i, r in enumerate(provider.sent()) if r == ("Update", "A")][-1]  # restored after A, which it reads
    assert ("Delete", "D") not in provider.sent()
    created = {lid for kind, lid in provider.sent() if kind == "Create"}
    assert {lid for kind, lid in provider.sent() if kind == "Delete"} == created
    assert described.output_values() == before.output_values()
    assert sorted(r.logical_id for r in described.resources) == ["A", "B", "C", "D"]
    assert resource(emulator, "s", "A").properties == {"V": "a"}
    assert statuses(events, "s")[-3:] == ["UPDATE_IN_PROGRESS", "ROLLBACK_IN_PROGRESS", "ROLLBACK_COMPLETE"]
    provider.behaviours.clear()
    provider.requests.clear()
    assert emulator.update("s", as_text(updated_chain()), {}, provider).status == "UPDATE_COMPLETE"
    assert provider.last("A", "Update")["OldResourceProperties"] == {"V": "a"}


def test_failed_rollback_update_of_the_failed_resource_is_rollback_failed(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    create(emulator, provider, chain(), events)
    provider.on("B", "Update", fail="cannot resize")  # fails the rollback Update as well
    described = emulator.update("s", as_text(updated_chain()), {}, provider, on_event=events.append)
    assert described.status == "ROLLBACK_FAILED"
    assert "B" in described.status_reason


def test_update_failure_without_rollback(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    create(emulator, provider, chain(), events)
    provider.on("A", "Update", fail="no")
    described = emulator.update("s", as_text(updated_chain()), {}, provider, disable_rollback=True)
    assert described.status == "UPDATE_FAILED"
    assert resource(emulator, "s", "A").status == "UPDATE_FAILED"
    assert resource(emulator, "s", "A").properties == {"V": "a"}
    provider.behaviours.clear()
    assert emulator.update("s", as_text(updated_chain()), {}, provider).status == "UPDATE_COMPLETE"


def test_update_rejects_type_and_service_token_changes(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    create(emulator, provider, template({"A": custom()}), events)
    with pytest.raises(TemplateValidationError) as caught:
        emulator.update("s", as_text(template({"A": custom(name="Custom::Other")})), {}, provider)
    assert caught.value.errors == ["Resources.A.Type: cannot change from 'Custom::Echo' to 'Custom::Other' on update"]
    moved = template({"A": custom(token="acs:fc:cn-hangzhou:123456789:functions/other", Parameters={"X": 1})})
    described = emulator.update("s", as_text(moved), {}, provider)
    assert described.status == "ROLLBACK_COMPLETE"
    assert "Resources.A.Properties.ServiceToken: cannot change on update" in described.status_reason


def test_update_is_refused_while_not_stable(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("A", "Create", fail="x")
    create(emulator, provider, template({"A": custom()}), events)
    with pytest.raises(StackStateError, match="cannot be updated in status CREATE_ROLLBACK_COMPLETE"):
        emulator.update("s", None, {}, provider)


# ---------------------------------------------------------------------- delete


def test_delete_in_reverse_order(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    create(emulator, provider, chain(), events)
    ids = {r.logical_id: r.physical_id for r in emulator.describe("s").resources}
    provider.requests.clear()
    described = emulator.delete("s", provider, on_event=events.append)
    assert described.status == "DELETE_COMPLETE"
    order = [lid for _, lid in provider.sent("Delete")]
    assert order.index("C") < order.index("B") < order.index("A")
    assert {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in provider.requests} == ids
    assert statuses(events, "s")[-2:] == ["DELETE_IN_PROGRESS", "DELETE_COMPLETE"]
    assert described.outputs == []
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert len(provider.requests) == 4


def test_retain_sends_no_delete(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    doc = template({"Keep": {**custom(), "DeletionPolicy": "Retain"}, "Drop": custom()})
    create(emulator, provider, doc, events)
    described = emulator.delete("s", provider, on_event=events.append)
    assert described.status == "DELETE_COMPLETE"
    assert provider.sent("Delete") == [("Delete", "Drop")]
    keep = next(e for e in events if e.logical_id == "Keep" and e.status == "DELETE_COMPLETE")
    assert keep.reason == "DeletionPolicy is Retain: no Delete request sent"


def test_delete_failure_keeps_dependencies(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    create(emulator, provider, chain(), events)
    provider.on("B", "Delete", fail="in use")
    described = emulator.delete("s", provider)
    assert described.status == "DELETE_FAILED"
    assert described.status_reason == (
        "Resource B failed: in use; not attempted because a dependent resource failed: A"
    )
    assert ("Delete", "A") not in provider.sent()
    assert resource(emulator, "s", "A").status == "CREATE_COMPLETE"
    provider.behaviours.clear()
    provider.requests.clear()
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert provider.sent() == [("Delete", "B"), ("Delete", "A")]


def test_no_echo_is_masked_in_describe_and_events(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    provider.on("A", "Create", fail="login failed for password s3cr3t-pw")
    doc = template(
        {"A": custom(Parameters={"Password": {"Ref": "Pw"}, "Dsn": {"Fn::Sub": "db://u:${Pw}@h"}})},
        Parameters={"Pw": {"Type": "String", "NoEcho": True}, "User": {"Type": "String", "Default": "u"}},
    )
    described = create(emulator, provider, doc, events, parameters={"Pw": "s3cr3t-pw"}, disable_rollback=True)
    assert provider.last("A", "Create")["ResourceProperties"]["Password"] == "s3cr3t-pw"
    assert described.parameters == {"Pw": "******", "User": "u"}
    a = described.resources[0]
    assert a.properties == {"Password": "******", "Dsn": "db://u:******@h"}
    assert a.status_reason == "login failed for password ******"
    assert all("s3cr3t-pw" not in repr(e) for e in events)
    assert all("s3cr3t-pw" not in repr(e) for e in emulator.events("s"))
    assert "s3cr3t-pw" not in repr(emulator.describe("s"))


def test_spec_example_end_to_end(emulator: StackEmulator, provider: Provider, events: list[StackEvent]) -> None:
    text = """
ROSTemplateFormatVersion: '2015-09-01'
Parameters:
  Greeting: {Type: String, Default: hello}
Resources:
  Echo:
    Type: Custom::Echo
    Properties:
      ServiceToken: acs:fc:cn-hangzhou:123456789:functions/echo-provider
      Timeout: 120
      Parameters: {Text: {Ref: Greeting}}
Outputs:
  All: {Value: {'Fn::GetAtt': [Echo, Outputs]}}
  One: {Value: {'Fn::GetAtt': [Echo, Text]}}
"""
    described = emulator.create("demo", text, {"Greeting": "hi"}, provider, on_event=events.append)
    assert described.output_values() == {"All": {"Text": "hi"}, "One": "hi"}
    assert provider.calls == [("acs:fc:cn-hangzhou:123456789:functions/echo-provider", 120.0)]
    assert all(e.timestamp.endswith("Z") and e.timestamp[10] == "T" for e in events)
    assert [e.status for e in emulator.events("demo")] == [e.status for e in events]


def test_retain_is_honoured_on_rollback_and_on_removal(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    provider.on("Bad", "Create", fail="x")
    doc = template({"Keep": {**custom(), "DeletionPolicy": "Retain"}, "Bad": {**custom(), "DependsOn": "Keep"}})
    assert create(emulator, provider, doc, events).status == "CREATE_ROLLBACK_COMPLETE"
    assert provider.sent("Delete") == [("Delete", "Bad")]
    emulator.delete("s", provider)
    provider.requests.clear()
    create(emulator, provider, template({"Keep": {**custom(), "DeletionPolicy": "Retain"}, "Other": custom()}), events)
    described = emulator.update("s", as_text(template({"Other": custom()})), {}, provider)
    assert described.status == "UPDATE_COMPLETE"
    assert provider.sent("Delete") == []
    assert [r.logical_id for r in described.resources] == ["Other"]


def test_failed_removal_fails_the_update_and_is_retried(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    create(emulator, provider, template({"Gone": custom(), "Stay": custom()}), events)
    provider.on("Gone", "Delete", fail="busy")
    described = emulator.update("s", as_text(template({"Stay": custom()})), {}, provider)
    assert described.status == "UPDATE_FAILED"
    assert described.status_reason == "Resource Gone failed: busy"
    assert resource(emulator, "s", "Gone").status == "DELETE_FAILED"
    provider.behaviours.clear()
    assert emulator.update("s", None, {}, provider).status == "UPDATE_COMPLETE"
    assert provider.sent("Delete") == [("Delete", "Gone"), ("Delete", "Gone")]
    assert [r.logical_id for r in emulator.describe("s").resources] == ["Stay"]


def test_update_data_is_kept_when_the_provider_omits_it(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    doc = template({"A": custom(Parameters={"V": {"Ref": "P"}})}, Parameters={"P": {"Type": "String"}},
                   Outputs={"V": {"Value": {"Fn::GetAtt": ["A", "V"]}}})
    create(emulator, provider, doc, events, parameters={"P": "1"})
    a_id = resource(emulator, "s", "A").physical_id
    provider.on("A", "Update", response={"Status": "SUCCESS", "PhysicalResourceId": a_id})
    assert emulator.update("s", None, {"P": "2"}, provider).output_values() == {"V": "1"}
    provider.on("A", "Update", response={"Status": "SUCCESS", "PhysicalResourceId": "other"}, only_for={"V": "3"})
    described = emulator.update("s", None, {"P": "3"}, provider)
    assert described.status == "ROLLBACK_COMPLETE"
    assert described.status_reason == (
        f"Resource A failed: provider changed PhysicalResourceId on Update from '{a_id}' to 'other'; "
        "ROS does not allow replacement"
    )


def test_service_token_change_message_hides_a_web_urls_query(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    before = template({"A": custom(token="web:https://hooks.example.com/ros?key=k3y-s3cret")})
    create(emulator, provider, before, events)
    after = template({"A": custom(token="web:https://hooks.example.com/ros2?key=k3y-s3cret2", Parameters={"X": 1})})
    described = emulator.update("s", as_text(after), {}, provider, on_event=events.append)
    assert described.status == "ROLLBACK_COMPLETE"
    assert "ServiceToken: cannot change on update (was 'web:https://hooks.example.com/ros?<redacted>'" in described.status_reason
    assert all("k3y-s3cret" not in repr(e) for e in events)
    assert "k3y-s3cret" not in repr(emulator.describe("s"))


def test_update_rollback_restores_dependencies_first_then_deletes_what_it_created(
    emulator: StackEmulator, provider: Provider, events: list[StackEvent]
) -> None:
    """Rollback Updates run in dependency order (B reads A's attributes, so A is restored first);
    resources the update created are deleted afterwards, dependents first."""
    create(emulator, provider, chain(), events)
    provider.requests.clear()
    provider.on("Bad", "Create", fail="no capacity")
    doc = updated_chain()
    doc["Resources"]["Bad"] = {**custom(), "DependsOn": "B"}
    doc["Resources"]["New"] = {**custom(Parameters={"From": {"Fn::GetAtt": ["E", "V"]}})}
    described = emulator.update("s", as_text(doc), {}, provider, on_event=events.append)
    assert described.status == "ROLLBACK_COMPLETE"
    sent = provider.sent()
    failure = sent.index(("Create", "Bad"))
    rollback = [r for r in sent[failure + 1:]]
    assert rollback.index(("Update", "A")) < rollback.index(("Update", "B"))
    deletes = [r for r in rollback if r[0] == "Delete"]
    assert sorted(deletes) == [("Delete", "Bad"), ("Delete", "E"), ("Delete", "New")]
    assert rollback.index(("Update", "B")) < rollback.index(deletes[0])
    assert rollback.index(("Delete", "New")) < rollback.index(("Delete", "E"))
