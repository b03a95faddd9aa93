"""Stacks persist in $CRHELPER_HOME/stacks.sqlite and work across instances and processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from emulator_support import Provider, as_text, custom, template

from crhelper.emulator import StackEmulator, StackEvent, StackNotFoundError, StackStateError

REPO_ROOT = Path(__file__).resolve().parents[2]


def doc() -> dict[str, Any]:
    return template(
        {"A": custom(Parameters={"V": {"Ref": "P"}}), "B": custom(Parameters={"From": {"Fn::GetAtt": ["A", "V"]}})},
        Parameters={"P": {"Type": "String", "Default": "one"}},
        Outputs={"Out": {"Value": {"Fn::GetAtt": ["B", "From"]}, "Description": "copied"}},
    )


def test_state_survives_new_instances(tmp_path: Path, provider: Provider) -> None:
    home = tmp_path / "home"
    with StackEmulator(home) as first:
        created = first.create("s", as_text(doc()), {}, provider)
        first_events = first.events("s")
    with StackEmulator(home) as second:
        assert second.describe("s") == created
        assert second.events("s") == first_events
        assert second.outputs("s") == {"Out": "one"}
        assert second.describe("s").outputs[0].description == "copied"
        updated = second.update("s", None, {"P": "two"}, provider)
        assert updated.status == "UPDATE_COMPLETE"
    assert provider.last("A", "Update")["OldResourceProperties"] == {"V": "one"}
    with StackEmulator(home) as third:
        assert third.outputs("s") == {"Out": "two"}
        assert third.delete("s", provider).status == "DELETE_COMPLETE"
        assert [e.status for e in third.events("s") if e.logical_id == "s"][-1] == "DELETE_COMPLETE"
        assert [s.name for s in third.list_stacks()] == ["s"]


def test_default_home_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRHELPER_HOME", str(tmp_path / "envhome"))
    with StackEmulator() as emulator:
        assert emulator.store.path == tmp_path / "envhome" / "stacks.sqlite"
    mode = stat.S_IMODE(os.stat(tmp_path / "envhome" / "stacks.sqlite").st_mode)
    assert mode & 0o077 == 0


def test_state_is_shared_with_another_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from crhelper.emulator import StackEmulator
        def deliver(token, request, timeout):
            return {"Status": "SUCCESS", "PhysicalResourceId": "pid-" + request["LogicalResourceId"],
                    "Data": request["ResourceProperties"], "RequestId": request["RequestId"],
                    "StackId": request["StackId"], "LogicalResourceId": request["LogicalResourceId"]}
        with StackEmulator() as emulator:
            print(emulator.create("remote", sys.stdin.read(), {"P": "from-child"}, deliver).status)
        """
    )
    env = {**os.environ, "CRHELPER_HOME": str(tmp_path / "shared"), "PYTHONPATH": str(REPO_ROOT)}
    completed = subprocess.run(
        [sys.executable, "-c", script], input=as_text(doc()), capture_output=True, text=True, env=env, timeout=30, check=False
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "CREATE_COMPLETE"
    with StackEmulator(tmp_path / "shared") as emulator:
        described = emulator.describe("remote")
        assert described.output_values() == {"Out": "from-child"}
        assert {r.logical_id: r.physical_id for r in described.resources} == {"A": "pid-A", "B": "pid-B"}
        provider = Provider()
        assert emulator.delete("remote", provider).status == "DELETE_COMPLETE"
        assert provider.last("A", "Delete")["PhysicalResourceId"] == "pid-A"


def test_events_are_visible_while_the_operation_runs(tmp_path: Path, provider: Provider) -> None:
    home = tmp_path / "home"
    seen: list[StackEvent] = []
    persisted_counts: list[int] = []

    def watch(event: StackEvent) -> None:
        seen.append(event)
        with StackEmulator(home) as observer:
            persisted_counts.append(len(observer.events("s")))

    with StackEmulator(home) as emulator:
        emulator.create("s", as_text(doc()), {}, provider, on_event=watch)
    assert persisted_counts == list(range(1, len(seen) + 1))


def test_missing_stack_and_state_rules(emulator: StackEmulator, provider: Provider) -> None:
    with pytest.raises(StackNotFoundError, match="stack 'ghost' does not exist"):
        emulator.describe("ghost")
    with pytest.raises(StackNotFoundError):
        emulator.delete("ghost", provider)
    with pytest.raises(StackStateError, match="stack name 'bad name'"):
        emulator.create("bad name", as_text(doc()), {}, provider)
    first = emulator.create("s", as_text(doc()), {}, provider)
    with pytest.raises(StackStateError, match=r"stack 's' already exists \(status CREATE_COMPLETE\); delete it first"):
        emulator.create("s", as_text(doc()), {}, provider)
    emulator.delete("s", provider)
    again = emulator.create("s", as_text(doc()), {"P": "new"}, provider)
    assert again.stack_id != first.stack_id
    assert [e.status for e in emulator.events("s") if e.logical_id == "s"] == ["CREATE_IN_PROGRESS", "CREATE_COMPLETE"]
    assert again.output_values() == {"Out": "new"}


def test_interrupted_operation_leaves_a_failed_stack(emulator: StackEmulator, provider: Provider) -> None:
    def interrupt(event: StackEvent) -> None:
        if event.logical_id == "A" and event.status == "CREATE_COMPLETE":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        emulator.create("s", as_text(doc()), {}, provider, on_event=interrupt)
    described = emulator.describe("s")
    assert described.status == "CREATE_FAILED"
    assert described.status_reason == "operation interrupted: KeyboardInterrupt"
    assert emulator.delete("s", provider).status == "DELETE_COMPLETE"
    assert provider.sent("Delete") == [("Delete", "A")]
