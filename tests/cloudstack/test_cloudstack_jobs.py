"""Async jobs and listings through the unpatched `cs` client: `fetch_result` polling, job failure,
job timeout, parameter errors with `cserrorcode`, fault injection, `fetch_list` paging."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import pytest

from crhelper.local.cloudstack_server import LocalCloudStack


def test_fetch_result_polls_through_the_pending_answers_and_returns_the_vm(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack]) -> None:
    cloud = make_cloud(start_seconds=0, pending_polls=3)
    vm = cloud.add_vm("db-1", group="db")
    result = cloud.client(fetch_result=True, poll_interval=0.01).startVirtualMachine(id=vm.id)
    assert result["virtualmachine"]["id"] == vm.id and result["virtualmachine"]["state"] == "Running"
    assert result["virtualmachine"]["group"] == "db" and result["virtualmachine"]["hypervisor"] == "KVM"
    assert len(cloud.calls("queryAsyncJobResult")) == 4  # three jobstatus 0, then 1


def test_without_fetch_result_cs_returns_the_jobid_and_the_job_shows_the_transition(
        cs: ModuleType, cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("web-1", state="Running")
    client = cloud.client()
    job = client.rebootVirtualMachine(id=vm.id)
    assert list(job) == ["jobid"]
    first = client.queryAsyncJobResult(jobid=job["jobid"])
    assert first["jobstatus"] == 0 and "jobresult" not in first
    assert first["cmd"].endswith("RebootVMCmd") and first["jobinstanceid"] == vm.id
    assert client.listVirtualMachines(id=vm.id)["virtualmachine"][0]["state"] in ("Stopping", "Starting")
    done = cloud.client(fetch_result=True, poll_interval=0.01)._jobresult(job["jobid"])
    assert done["virtualmachine"]["state"] == "Running"
    assert client.listAsyncJobs()["asyncjobs"][0]["jobstatus"] == 1


def test_a_failed_job_raises_job_failure_with_its_error(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    cloud.fail_jobs("startVirtualMachine", errortext="Insufficient capacity")
    vm = cloud.add_vm("db-1")
    error = api_error(lambda: cloud.client(fetch_result=True, poll_interval=0.01).startVirtualMachine(id=vm.id))
    assert error.args[0] == "Job failure"
    assert error.error == {"errorcode": 530, "errortext": "Insufficient capacity"}
    assert cloud.vm(vm.id).state == "Stopped"


@pytest.mark.slow
def test_job_timeout_expiry_raises_cloudstack_exception(cs: ModuleType, make_cloud: Callable[..., LocalCloudStack]) -> None:
    cloud = make_cloud(pending_polls=10**6)
    vm = cloud.add_vm("db-1")
    client = cloud.client(fetch_result=True, poll_interval=0.05, job_timeout=1)  # cs takes whole seconds
    with pytest.raises(cs.CloudStackException) as info:
        client.startVirtualMachine(id=vm.id)
    assert not isinstance(info.value, cs.CloudStackApiException)
    assert info.value.args[0] == "Timeout waiting for async job result"


def test_an_unknown_or_missing_id_is_a_431_with_cserrorcode(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    client = cloud.client(fetch_result=True, poll_interval=0.01)
    unknown = api_error(lambda: client.stopVirtualMachine(id="no-such-vm", forced=True))
    assert (unknown.error["errorcode"], unknown.error["cserrorcode"]) == (431, 4350)
    assert unknown.args[0] == "HTTP 431 response from CloudStack" and "value=no-such-vm" in unknown.error["errortext"]
    missing = api_error(lambda: client.startVirtualMachine())
    assert missing.error["errortext"] == "Unable to execute API command startvirtualmachine due to missing parameter id"
    assert api_error(lambda: client.listVirtualMachines(id="nope")).error["errorcode"] == 431
    bad = api_error(lambda: client.stopVirtualMachine(id="x", forced="maybe"))
    assert bad.error["errorcode"] == 431


def test_a_wrong_state_is_refused_with_431_or_530(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack], api_error: Callable[..., Any]) -> None:
    cloud = make_cloud(start_seconds=30)
    vm, running = cloud.add_vm("db-1"), cloud.add_vm("web-1", state="Running")
    client = cloud.client()
    client.startVirtualMachine(id=vm.id)
    busy = api_error(lambda: client.stopVirtualMachine(id=vm.id))
    assert (busy.error["errorcode"], busy.error["cserrorcode"]) == (530, 4250) and "Starting" in busy.error["errortext"]
    again = api_error(lambda: client.startVirtualMachine(id=running.id))
    assert (again.error["errorcode"], again.error["cserrorcode"]) == (431, 4350)


def test_injected_faults_fail_the_next_calls_of_a_command(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    cloud.add_vm("db-1")
    cloud.fail_next("listVirtualMachines", times=2, errorcode=534, errortext="Service unavailable")
    client = cloud.client()
    for _ in range(2):
        error = api_error(lambda: client.listVirtualMachines())
        assert error.error["errorcode"] == 534 and error.response.status_code == 534
    assert client.listVirtualMachines()["count"] == 1


def test_fetch_list_reads_two_pages(cs: ModuleType, cloud: LocalCloudStack) -> None:
    made = [cloud.add_vm(f"web-{n}").id for n in range(3)]
    found = cloud.client().listVirtualMachines(fetch_list=True, pagesize=2)
    assert [vm["id"] for vm in found] == made
    assert [r.parameters["page"] for r in cloud.calls("listVirtualMachines")] == ["1", "2"]


def test_list_filters_and_the_empty_answer(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    web = [cloud.add_vm(f"web-{n}", group="web").id for n in range(2)]
    db = cloud.add_vm("db-1", group="db", state="Running").id
    client = cloud.client()
    groups = client.listInstanceGroups()["instancegroup"]
    web_group = next(group["id"] for group in groups if group["name"] == "web")
    assert client.listInstanceGroups(name="db")["count"] == 1
    assert [vm["id"] for vm in client.listVirtualMachines(groupid=web_group)["virtualmachine"]] == web
    assert [vm["id"] for vm in client.listVirtualMachines(state="running")["virtualmachine"]] == [db]
    assert [vm["id"] for vm in client.listVirtualMachines(ids=[db, web[1]])["virtualmachine"]] == [web[1], db]
    assert client.listVirtualMachines(keyword="WEB")["count"] == 2
    assert client.listVirtualMachines(name="nothing") == {}
    assert client.listVirtualMachines(page=3, pagesize=2) == {"count": 3}
    assert api_error(lambda: client.listVirtualMachines(page=2, pagesize=501)).error["errorcode"] == 431
    assert api_error(lambda: client.deployVirtualMachine()).error["errorcode"] == 432
