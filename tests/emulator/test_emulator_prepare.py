"""One `prepare` step (state checked, template parsed, parameters validated, plan built) and a `run`
that executes exactly that plan; refusals carry fields (kind, status, next operations)."""

from __future__ import annotations

import socket
import sqlite3

import pytest
from emulator_support import TOKEN, Provider, as_text, custom, template

from crhelper.emulator import StackEmulator, StackStateError, TemplateValidationError

WEB = "web:http://127.0.0.1:1/hook"


def doc() -> str:
    return as_text(template(
        {"A": custom(Parameters={"V": {"Ref": "P"}}),
         "B": custom(token=WEB, Parameters={}, HttpConfig={"SignKey": {"Ref": "Key"}}),
         "C": {"Type": "Custom::Echo", "Properties": {"ServiceToken": {"Fn::GetAtt": ["A", "Token"]}, "Parameters": {}}}},
        Parameters={"P": {"Type": "String", "Default": "one"}, "Key": {"Type": "String", "NoEcho": True, "Default": "k"}},
    ))


def test_prepare_returns_what_delivery_needs_and_run_executes_that_plan(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("A", "Create", data={"Token": TOKEN})
    provider.on("B", "Create", data={})
    prepared = emulator.prepare("create", "s", doc(), {"Key": "s3cr3t"})
    assert prepared.service_tokens == {TOKEN: ("A",), WEB: ("B",)}  # C's token is known only once A exists
    assert prepared.http_configs == {"B": {"SignKey": "s3cr3t"}}
    assert emulator.store.load("s") is None  # nothing stored before the run
    created = emulator.run(prepared, provider)
    assert created.status == "CREATE_COMPLETE" and created.stack_id == prepared.stack_id
    assert sorted(provider.sent()) == [("Create", "A"), ("Create", "B"), ("Create", "C")]


def test_an_update_keeps_the_template_and_the_previous_parameters(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("A", "Create", data={"Token": TOKEN})
    provider.on("A", "Update", data={"Token": TOKEN})
    emulator.create("s", doc(), {"P": "first", "Key": "k1"}, provider)
    # Without UsePreviousParameters (ROS's default) Key would take its Default again.
    assert emulator.prepare("update", "s", None, {"P": "second"}).http_configs == {"B": {"SignKey": "k"}}
    prepared = emulator.prepare("update", "s", None, {"P": "second"}, use_previous_parameters=True)
    assert prepared.template_text == doc() and prepared.http_configs == {"B": {"SignKey": "k1"}}
    assert emulator.run(prepared, provider).status == "UPDATE_COMPLETE"
    assert provider.last("A", "Update")["ResourceProperties"] == {"V": "second"}
    assert emulator.prepare("delete", "s").http_configs == {"B": {"SignKey": "k1"}}


def test_a_run_refuses_a_stack_replaced_since_its_preparation(emulator: StackEmulator, provider: Provider) -> None:
    provider.on("A", "Create", data={"Token": TOKEN})
    emulator.create("s", doc(), {}, provider)
    prepared = emulator.prepare("update", "s", None, {"P": "two"})
    emulator.delete("s", provider)
    emulator.create("s", doc(), {}, provider)
    sent = len(provider.requests)
    with pytest.raises(StackStateError) as refused:
        emulator.run(prepared, provider)
    assert refused.value.kind == StackStateError.CHANGED and refused.value.next_operations == ("update",)
    assert len(provider.requests) == sent


def test_refusals_carry_their_kind_status_and_next_operations(emulator: StackEmulator, provider: Provider) -> None:
    simple = as_text(template({"A": custom(Parameters={})}))
    emulator.create("ok", simple, {}, provider)
    with pytest.raises(StackStateError) as exists:
        emulator.prepare("create", "ok", simple)
    assert (exists.value.kind, exists.value.status, exists.value.next_operations) == (
        StackStateError.EXISTS, "CREATE_COMPLETE", ("update", "delete"))
    provider.on("A", "Create", fail="no")
    emulator.create("rolled", simple, {}, provider)
    with pytest.raises(StackStateError) as rolled:
        emulator.prepare("create", "rolled", simple)
    assert rolled.value.next_operations == ("delete",)
    with pytest.raises(StackStateError) as frozen:
        emulator.prepare("update", "rolled")
    assert (frozen.value.kind, frozen.value.status, frozen.value.stack) == (
        StackStateError.NOT_UPDATABLE, "CREATE_ROLLBACK_COMPLETE", "rolled")
    with pytest.raises(StackStateError) as named:
        emulator.prepare("create", "bad name", simple)
    assert named.value.kind == StackStateError.INVALID_NAME


def test_a_stack_another_machine_is_operating_on_is_busy_before_anything_is_planned(
        emulator: StackEmulator, provider: Provider) -> None:
    emulator.create("s", as_text(template({"A": custom(Parameters={})})), {}, provider)
    record = emulator.store.load("s")
    assert record is not None
    record.status = "UPDATE_IN_PROGRESS"
    emulator.store.save(record)
    elsewhere = socket.gethostname() + "-elsewhere"
    with sqlite3.connect(emulator.store.path) as db:
        db.execute("INSERT OR REPLACE INTO operations (name, pid, host) VALUES (?, ?, ?)", ("s", 4242, elsewhere))
    for operation in ("update", "delete"):
        with pytest.raises(StackStateError) as busy:
            emulator.prepare(operation, "s", "not even a template" if operation == "update" else None)
        assert (busy.value.kind, busy.value.status, busy.value.next_operations) == (
            StackStateError.BUSY, "UPDATE_IN_PROGRESS", ("events",))
        assert f"crhelper process 4242 on {elsewhere}" in str(busy.value)


def test_an_update_that_changes_a_live_type_is_refused_at_prepare(emulator: StackEmulator, provider: Provider) -> None:
    emulator.create("s", as_text(template({"A": custom(Parameters={})})), {}, provider)
    with pytest.raises(TemplateValidationError, match="cannot change from 'Custom::Echo' to 'Custom::Other'"):
        emulator.prepare("update", "s", as_text(template({"A": custom("Custom::Other", Parameters={})})))
