"""The LocalStacks facade the API and the console share: provider logs, dependencies, change notification."""

from __future__ import annotations

from pathlib import Path

import pytest

from crhelper.emulator.delivery_bindings import Bindings
from crhelper.ros.stacks import LocalStacks, RosError
from ros_support import PROVIDERS, TOKEN, echo_template, wait_until

pytestmark = pytest.mark.slow


def test_the_facade_shows_logs_dependencies_and_wakes_watchers(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRHELPER_LOG_LEVEL", "INFO")  # the in-process provider's framework records its answers
    bindings = Bindings(providers={TOKEN: f"{PROVIDERS}:provider"}, mode="inprocess")
    with LocalStacks(home, bindings=bindings, capture_output=True) as stacks:
        before = stacks.version
        stack_id = stacks.create("facade", echo_template({"First": {"Name": "a"},
                                                          "Second": {"Name": {"Fn::GetAtt": ["First", "Name"]}}}), {})
        assert stacks.wait_for_change(before, 10) > before  # an event arrived: a live view wakes up
        assert wait_until(lambda: stacks.get(stack_id)["Status"] == "CREATE_COMPLETE")
        assert stacks.dependencies(stack_id) == {"First": [], "Second": ["First"]}
        assert any("response delivered" in line for line in stacks.provider_logs(stack_id, "Second"))
        assert stacks.provider_logs(stack_id, "Nope") == []
        assert stacks.stack_id_of("facade") == stack_id and stacks.get("facade")["StackId"] == stack_id
        events = stacks.events(stack_id)
        assert [e["EventId"] for e in events] == [e["EventId"] for e in stacks.events(stack_id)]  # stable ids
        assert events[0]["Status"] == "CREATE_IN_PROGRESS" and events[-1]["Status"] == "CREATE_COMPLETE"
        with pytest.raises(RosError) as caught:
            stacks.resource(stack_id, "Third")
        assert (caught.value.code, caught.value.status) == ("ResourceNotFound", 404)
        stacks.delete(stack_id)
        assert wait_until(lambda: stacks.get(stack_id)["Status"] == "DELETE_COMPLETE")
        assert stacks.list() == [] and [s["StackId"] for s in stacks.list(include_deleted=True)] == [stack_id]
