"""How a start reads power states: one batch read per tier (and per round for booting VMs) where the
backend offers `vm_states`, the state a start call answers with instead of a second read, a
per-instance fallback when the batch read fails; and the local backend's batch read against a
real supervisor daemon."""

from __future__ import annotations

import os
import sys
from typing import Any, Iterator, Sequence

import pytest

from bootgroup_fakes import FakeBackend, drive, members_of, new_run
from crhelper.local.supervisor import SupervisorClient
from crhelper.operations import ManualClock
from handlers.bootgroups.backend_local import LocalBackend
from handlers.bootgroups.backends import MISSING, RUNNING, STARTING, STOPPED, VmState
from handlers.bootgroups.engine import vm_states
from handlers.bootgroups.settings import GroupSettings
from handlers.bootgroups.state import InstanceRecord, SqliteGroupStore, default_path


class BatchBackend(FakeBackend):
    """The scripted backend plus a batch read and a start call that answers with the state."""

    def __init__(self, clock: ManualClock, **kw: Any) -> None:
        super().__init__(clock, **kw)
        self.single_reads: list[str] = []
        self.batch_reads: list[list[str]] = []
        self.fail_batch = False

    def vm_state(self, vm: str) -> VmState:
        self.single_reads.append(vm)
        return super().vm_state(vm)

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        self.batch_reads.append(list(vms))
        if self.fail_batch:
            raise RuntimeError("the listing call failed")
        return {vm: super(BatchBackend, self).vm_state(vm) for vm in vms}

    def start_vm(self, vm: str) -> VmState:  # type: ignore[override]
        super().start_vm(vm)
        return super().vm_state(vm)


NO_DELAY = GroupSettings(initial_delay=0)


def port(number: int) -> dict[str, Any]:
    return {"Type": "PortCheck", "Details": {"port": number}}


def two_tiers() -> Any:
    return members_of({"Members": [
        {"InstanceGroup": {"Name": "db", "Instances": ["db1", "db2", "db3"]}, "BootOrder": 0, "ReadinessRules": [port(5432)]},
        {"InstanceGroup": {"Name": "web", "Instances": ["web1", "web2"]}, "BootOrder": 1, "ReadinessRules": [port(80)]}]})


def test_a_start_reads_each_tier_once_and_uses_the_state_its_start_call_answered() -> None:
    clock = ManualClock()
    backend = BatchBackend(clock)
    for name in ("db1", "db2", "db3", "web1", "web2"):
        backend.add(name, ready_after=0)
    backend.add("db2", state=RUNNING, last_power_change=clock.now() - 100, ready_after=0)
    run, outcome, _ = drive(new_run("start", two_tiers(), clock, settings=NO_DELAY), backend, clock)
    assert outcome.ok, outcome.reason
    # a tier's opening reads it once, then each poll round once (the instances it still checks)
    assert backend.batch_reads == [["db1", "db2", "db3"], ["db1", "db2", "db3"], ["web1", "web2"], ["web1", "web2"]]
    assert backend.single_reads == [], "no instance read one at a time"
    assert backend.count("start") == 4 and backend.count("start", "db2") == 0, "the Running one is not restarted"


def test_booting_vms_are_read_in_one_batch_per_round() -> None:
    clock = ManualClock()
    backend = BatchBackend(clock)
    for name in ("db1", "db2", "db3", "web1", "web2"):
        backend.add(name, ready_after=0, boot_seconds=25)
    run, outcome, _ = drive(new_run("start", two_tiers(), clock, settings=NO_DELAY), backend, clock)
    assert outcome.ok, outcome.reason
    assert backend.single_reads == []
    assert len(backend.batch_reads) > 4, "rounds while the instances boot"
    assert all(vms in (["db1", "db2", "db3"], ["web1", "web2"]) for vms in backend.batch_reads), "one read a round"
    assert all(vm.state == RUNNING for vm in backend.vms.values())


def test_a_failed_batch_read_falls_back_to_one_read_per_instance_and_names_the_missing_one() -> None:
    clock = ManualClock()
    backend = BatchBackend(clock)
    backend.fail_batch = True
    for name in ("db1", "db3", "web1", "web2"):
        backend.add(name, ready_after=0)
    run, outcome, _ = drive(new_run("start", two_tiers(), clock, settings=NO_DELAY), backend, clock)
    assert not outcome.ok and "instance 'db2' does not exist" in (outcome.reason or "")
    assert sorted(backend.single_reads) == ["db1", "db2", "db3"]
    assert vm_states(backend, ["db1", "nope"]) == {"db1": VmState(RUNNING, clock.now()), "nope": VmState(MISSING)}
    assert vm_states(backend, ["db1"], batch_only=True) == {}


def test_a_backend_without_batch_reads_is_read_one_at_a_time() -> None:
    clock = ManualClock()
    backend = FakeBackend(clock)
    backend.add("a", state=STARTING)
    assert vm_states(backend, ["a", "b"]) == {"a": VmState(STARTING), "b": VmState(MISSING)}
    assert vm_states(backend, ["a"], batch_only=True) == {}


# --- the local backend against a real supervisor daemon ------------------------------------------


@pytest.fixture
def local() -> Iterator[LocalBackend]:
    env = {"CRHELPER_SUPERVISOR_GRACE": "0.5", "CRHELPER_SUPERVISOR_LINGER": "0.5", "CRHELPER_SUPERVISOR_POLL": "0.05"}
    client = SupervisorClient(env={**os.environ, **env})
    backend = LocalBackend(SqliteGroupStore(default_path()), client)
    yield backend
    client.stop_all(grace=0.2)


@pytest.mark.slow
def test_the_local_backend_reads_many_states_in_one_listing_and_start_answers_running(local: LocalBackend) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    for name in ("i-a", "i-b", "i-c"):
        local.store.put_instance(InstanceRecord(name, sleeper))
    assert local.vm_states(["i-a", "i-b", "i-c", "i-none"]) == {
        "i-a": VmState(STOPPED, None), "i-b": VmState(STOPPED, None), "i-c": VmState(STOPPED, None),
        "i-none": VmState(MISSING)}
    assert local.supervisor.daemon_pid() is None, "nothing runs: answered from the state file, no daemon started"
    started = local.start_vm("i-b")
    assert started.state == RUNNING and started.last_power_change is not None
    states = local.vm_states(["i-a", "i-b", "i-c"])
    assert states["i-b"] == started and states["i-a"].state == states["i-c"].state == STOPPED
    assert local.vm_state("i-b") == started
    local.stop_vm("i-b", forced=True)
    stopped = local.vm_state("i-b")
    assert stopped.state == STOPPED and (stopped.last_power_change or 0) >= (started.last_power_change or 0)
