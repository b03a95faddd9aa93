"""The job engine on a drivable clock: each step after its delay, `lastupdated` at each power
change, jobstatus 0 for the configured polls, failing jobs, wrong-state errors."""

from __future__ import annotations

from typing import Any

import pytest

from crhelper.local.cloudstack_state import (
    JOB_FAILED, JOB_PENDING, JOB_SUCCEEDED, ApiError, CloudStackSettings, CloudStackState, PowerEvent, cs_date)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def engine(**settings: Any) -> tuple[CloudStackState, Clock]:
    clock = Clock()
    return CloudStackState(CloudStackSettings(**{"start_seconds": 10, "stop_seconds": 5, **settings}), clock), clock


def test_start_moves_stopped_starting_running_after_its_delay() -> None:
    state, clock = engine()
    vm = state.add_vm("db", guest=["true"])
    job = state.start(vm.id)
    assert state.snapshot(vm.id).state == "Starting" and state.next_due() == clock.now + 10
    clock.now += 9.9
    assert state.snapshot(vm.id).state == "Starting" and state.query(job.id)["jobstatus"] == JOB_PENDING
    clock.now += 0.2
    answer = state.query(job.id)
    assert answer["jobstatus"] == JOB_SUCCEEDED and answer["jobresultcode"] == 0
    assert answer["jobresult"]["virtualmachine"]["state"] == "Running"
    assert answer["jobresult"]["virtualmachine"]["lastupdated"] == cs_date(1_700_000_010.0)  # the step's time
    assert state.drain_events() == [PowerEvent(vm.id, True)] and state.next_due() is None


def test_reboot_goes_down_and_up_and_each_change_sets_lastupdated() -> None:
    state, clock = engine()
    vm = state.add_vm("web", state="Running")
    assert state.drain_events() == [PowerEvent(vm.id, True)]
    clock.now += 100
    state.reboot(vm.id)
    seen = [(state.snapshot(vm.id).state, state.snapshot(vm.id).lastupdated)]
    for step in (5, 10):
        clock.now += step
        seen.append((state.snapshot(vm.id).state, state.snapshot(vm.id).lastupdated))
    start = 1_700_000_100.0
    assert seen == [("Stopping", start), ("Starting", start + 5), ("Running", start + 15)]
    assert state.drain_events() == [PowerEvent(vm.id, False), PowerEvent(vm.id, True)]


def test_a_forced_stop_takes_no_delay() -> None:
    state, _ = engine()
    vm = state.add_vm("web", state="Running")
    job = state.stop(vm.id, forced=True)
    assert state.snapshot(vm.id).state == "Stopped" and state.query(job.id)["jobstatus"] == JOB_SUCCEEDED


def test_jobstatus_stays_0_for_the_configured_polls() -> None:
    state, _ = engine(start_seconds=0, pending_polls=3)
    job = state.start(state.add_vm("db").id)
    assert [state.query(job.id)["jobstatus"] for _ in range(5)] == [0, 0, 0, 1, 1]
    assert state.list_jobs()[0]["jobstatus"] == JOB_SUCCEEDED  # listing counts no poll


def test_a_failing_job_reports_530_and_leaves_the_vm_where_it_was() -> None:
    state, clock = engine()
    state.fail_jobs("startVirtualMachine", errortext="no capacity")
    vm = state.add_vm("db")
    job = state.start(vm.id)
    clock.now += 10
    answer = state.query(job.id)
    assert (answer["jobstatus"], answer["jobresultcode"]) == (JOB_FAILED, 530)
    assert answer["jobresult"] == {"errorcode": 530, "errortext": "no capacity"}
    assert state.snapshot(vm.id).state == "Stopped" and state.drain_events() == []
    state.start(vm.id)  # one job only was to fail
    clock.now += 10
    assert state.snapshot(vm.id).state == "Running"


@pytest.mark.parametrize("setup, act, code, cscode", [
    ("Starting", "stop", 530, 4250),
    ("Running", "start", 431, 4350),
    ("Stopped", "reboot", 431, 4350),
])
def test_wrong_states_are_refused_with_codes(setup: str, act: str, code: int, cscode: int) -> None:
    state, _ = engine()
    vm = state.add_vm("db", state="Running" if setup == "Running" else "Stopped")
    if setup == "Starting":
        state.start(vm.id)
    with pytest.raises(ApiError) as info:
        getattr(state, act)(vm.id)
    assert (info.value.errorcode, info.value.cserrorcode) == (code, cscode)
    assert vm.id in info.value.errortext


def test_stopping_a_stopped_vm_is_a_job_that_succeeds() -> None:
    state, _ = engine()
    vm = state.add_vm("db")
    assert state.query(state.stop(vm.id).id)["jobstatus"] == JOB_SUCCEEDED


def test_vms_get_their_own_loopback_address_group_and_hypervisor() -> None:
    state, _ = engine()
    first, second = state.add_vm("a", group="web"), state.add_vm("b", group="web", hypervisor="XenServer")
    assert (first.ip, second.ip) == ("127.0.0.2", "127.0.0.3") and first.group_id == second.group_id
    assert state.describe(second)["hypervisor"] == "XenServer"
    assert state.describe(second)["nic"][0]["ipaddress"] == "127.0.0.3"
    with pytest.raises(ValueError, match="hypervisor"):
        state.add_vm("c", hypervisor="bhyve")
    with pytest.raises(ApiError) as info:
        state.vm("missing", "startVirtualMachine")
    assert info.value.errorcode == 431 and "value=missing" in info.value.errortext


def test_vms_list_their_template_type_vm_type_and_autoscale_group_as_cloudstack_names_them() -> None:
    state, _ = engine()
    plain = state.describe(state.add_vm("plain"))
    assert plain["templatetype"] == "USER" and plain["templateid"] and plain["templatename"]
    assert not {"vnfnics", "vmtype", "autoscalevmgroupid", "autoscalevmgroupname"} & set(plain)
    vnf = state.describe(state.add_vm("router", template_type="VNF"))
    assert vnf["templatetype"] == "VNF" and vnf["vnfnics"][0]["management"] is True
    assert {"deviceid", "name", "required"} <= set(vnf["vnfnics"][0])
    assert state.describe(state.add_vm("node", vm_type="cksnode"))["vmtype"] == "cksnode"
    first = state.describe(state.add_vm("web-1", autoscale_group="web-asg"))
    second = state.describe(state.add_vm("web-2", autoscale_group="web-asg"))
    assert first["autoscalevmgroupname"] == "web-asg"
    assert first["autoscalevmgroupid"] == second["autoscalevmgroupid"] != state.describe(
        state.add_vm("db-1", autoscale_group="db-asg"))["autoscalevmgroupid"]
    with pytest.raises(ValueError, match="template_type"):
        state.add_vm("bad", template_type="vnf")
    with pytest.raises(ValueError, match="vm_type"):
        state.add_vm("bad", vm_type="CKSNode")
