"""A resource's recorded properties are those of its last successful Create or Update (issue 11):
a failed update followed by a failed rollback must not leave the next update or delete sending
properties that never existed."""

from __future__ import annotations

from emulator_support import Provider, as_text, custom, template

from crhelper.emulator import StackEmulator


def doc(value: int) -> str:
    return as_text(template({"A": custom(Parameters={"V": value})}))


def test_a_failed_rollback_keeps_the_properties_last_applied(emulator: StackEmulator, provider: Provider) -> None:
    assert emulator.create("s", doc(1), {}, provider).status == "CREATE_COMPLETE"
    provider.on("A", "Update", fail="cannot update")  # the update fails, and its rollback Update too
    failed = emulator.update("s", doc(2), {}, provider)
    assert failed.status == "ROLLBACK_FAILED", failed.status_reason
    rollback = provider.requests[-1]
    assert rollback["ResourceProperties"] == {"V": 1} and rollback["OldResourceProperties"] == {"V": 2}
    assert [r.properties for r in failed.resources] == [{"V": 1}]  # not the {"V": 2} that never applied

    provider.behaviours.clear()
    assert emulator.update("s", doc(3), {}, provider).status == "UPDATE_COMPLETE"
    assert provider.last("A", "Update")["OldResourceProperties"] == {"V": 1}
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert provider.last("A", "Delete")["ResourceProperties"] == {"V": 3}


def test_a_failed_rollback_then_delete_sends_the_applied_properties(emulator: StackEmulator, provider: Provider) -> None:
    emulator.create("s", doc(1), {}, provider)
    provider.on("A", "Update", fail="no")
    assert emulator.update("s", doc(2), {}, provider).status == "ROLLBACK_FAILED"
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert provider.last("A", "Delete")["ResourceProperties"] == {"V": 1}


def test_a_failed_update_without_rollback_keeps_the_old_properties(emulator: StackEmulator, provider: Provider) -> None:
    emulator.create("s", doc(1), {}, provider)
    provider.on("A", "Update", fail="no")
    failed = emulator.update("s", doc(2), {}, provider, disable_rollback=True)
    assert failed.status == "UPDATE_FAILED" and [r.properties for r in failed.resources] == [{"V": 1}]
    provider.behaviours.clear()
    assert emulator.update("s", doc(2), {}, provider).status == "UPDATE_COMPLETE"
    assert provider.last("A", "Update")["OldResourceProperties"] == {"V": 1}


def test_retained_resources_get_no_delete_request(emulator: StackEmulator, provider: Provider) -> None:
    emulator.create("s", as_text(template({"A": custom(Parameters={}), "B": custom(Parameters={})})), {}, provider)
    provider.requests.clear()
    deleted = emulator.delete("s", provider, retain=["A"])
    assert deleted.status == "DELETE_COMPLETE" and provider.sent() == [("Delete", "B")]
    assert [r.status_reason.split(":")[0] for r in deleted.resources if r.logical_id == "A"] == ["retained (RetainResources)"]
