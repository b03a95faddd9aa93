"""`crhelper stack delete` leaves no process behind: what a resource's local backend started under
the supervisor (owner `<stack id>/<logical id>`) and its provider did not stop is stopped once the
stack is deleted; other stacks' processes are left alone (issue 10). Real processes, a real daemon."""

from __future__ import annotations

import sys
from typing import Iterator

import pytest
from emulator_support import Provider, as_text, custom, template

from crhelper.emulator import StackEmulator
from crhelper.holder import process_alive
from crhelper.local.supervisor import SupervisorClient, resource_owner
from crhelper.testing import wait_until

pytestmark = pytest.mark.slow

SLEEPS = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def supervisor(emulator: StackEmulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[SupervisorClient]:
    monkeypatch.setenv("CRHELPER_SUPERVISOR_LINGER", "0.5")
    monkeypatch.setenv("CRHELPER_SUPERVISOR_GRACE", "1")
    client = SupervisorClient(emulator.store.home)
    yield client
    client.stop_all(grace=0.2)


def test_deleting_a_stack_stops_the_processes_its_resources_left(
    emulator: StackEmulator, provider: Provider, supervisor: SupervisorClient
) -> None:
    doc = as_text(template({"A": custom(Parameters={}), "B": custom(Parameters={})}))
    provider.on("A", "Create", data={})
    provider.on("B", "Create", data={})
    mine = emulator.create("mine", doc, {}, provider)
    other = emulator.create("other", doc, {}, provider)
    supervisor.start("a-node", SLEEPS, owner=resource_owner(mine.stack_id, "A"))
    supervisor.start("b-node", SLEEPS, owner=resource_owner(mine.stack_id, "B"))
    supervisor.start("other-node", SLEEPS, owner=resource_owner(other.stack_id, "A"))
    pids = {s.name: s.pid for s in supervisor.list()}
    assert all(pid and process_alive(pid) for pid in pids.values())

    assert emulator.delete("mine", provider).status == "DELETE_COMPLETE"

    for name in ("a-node", "b-node"):
        wait_until(lambda name=name: not process_alive(pids[name]), timeout=5, what=f"{name} stopped")
    assert [s.name for s in supervisor.list()] == ["other-node"]  # forgotten, and the other stack's kept
    assert process_alive(pids["other-node"])
