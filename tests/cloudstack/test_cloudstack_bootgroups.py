"""The Instance Boot Group API (boot-groups.md §7, §8) on the local CloudStack endpoint, driven by
the unpatched `cs` client as a Marvin-style script would: group and member life cycle with the
reorder shift, rule CRUD with merged details, two-tier start / reboot / stop as async jobs, a
failing start job, readiness from the cache, and the 431/530 errors."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable

import pytest

from crhelper.local.cloudstack_api import CloudStackExtension
from crhelper.local.cloudstack_server import LocalCloudStack
from handlers.bootgroups import events as ev
from handlers.bootgroups.cloudstack_service import BootGroupService
from handlers.bootgroups.settings import GlobalSettings

#: Polls short enough for tests.
FAST_GROUPS = GlobalSettings(poll_interval=0.02, check_concurrency=10, max_members=10, backend="cloudstack")


@pytest.fixture
def services() -> list[BootGroupService]:
    return []


@pytest.fixture
def cloud(make_cloud: Callable[..., LocalCloudStack], services: list[BootGroupService]) -> LocalCloudStack:
    def factory(endpoint: LocalCloudStack) -> CloudStackExtension:
        service = BootGroupService(endpoint, FAST_GROUPS)
        services.append(service)
        return service.extension()

    return make_cloud(extensions=[factory], pending_polls=1)


def _client(cloud: LocalCloudStack) -> Any:
    return cloud.client(fetch_result=True, poll_interval=0.01)


def _group(client: Any, name: str = "app", **overrides: Any) -> dict[str, Any]:
    return client.createInstanceBootGroup(name=name, **{"readinessinitialdelayseconds": 0, **overrides})["instancebootgroup"]


def _two_tiers(cloud: LocalCloudStack, client: Any, group: dict[str, Any], web_order: int = 1) -> tuple[str, list[str], str]:
    """db-1 at order 0 and instance group `web` (web-0, web-1) at `web_order`: (db, web VMs, web group)."""
    db = cloud.add_vm("db-1").id
    web = [cloud.add_vm(f"web-{n}", group="web").id for n in range(2)]
    web_group = client.listInstanceGroups(name="web")["instancegroup"][0]["id"]
    client.addMemberToInstanceBootGroup(id=group["id"], virtualmachineid=db, order=0)
    client.addMemberToInstanceBootGroup(id=group["id"], instancegroupid=web_group, order=web_order)
    return db, web, web_group


def _members(client: Any, group: dict[str, Any], **params: Any) -> list[dict[str, Any]]:
    return client.listInstanceBootGroupMembers(bootgroupid=group["id"], **params).get("instancebootgroupmember", [])


def test_marvin_1_group_and_member_life_cycle(cs: ModuleType, cloud: LocalCloudStack,
                                              services: list[BootGroupService], api_error: Callable[..., Any]) -> None:
    client = _client(cloud)
    group = client.createInstanceBootGroup(name="app", description="three tiers",
                                           readinessmaxretryattempts=2)["instancebootgroup"]
    assert (group["readinessattempttimeoutseconds"], group["readinessmaxretryattempts"],
            group["readinessinitialdelayseconds"], group["readinessrebootonretry"]) == (300, 2, 30, False)
    assert {"id", "created", "account", "accountid", "domainid", "domain", "domainpath"} <= set(group)
    updated = client.updateInstanceBootGroup(id=group["id"], readinessmaxretryattempts=-1, readinessrebootonretry=True,
                                             name="app-2")["instancebootgroup"]
    assert (updated["name"], updated["readinessmaxretryattempts"], updated["readinessrebootonretry"]) == ("app-2", 5, True)
    vms = [cloud.add_vm(f"vm-{n}").id for n in range(4)]
    added = [client.addMemberToInstanceBootGroup(id=group["id"], virtualmachineid=vm, order=order)["instancebootgroupmember"]
             for vm, order in zip(vms, (0, 1, 2, 1))]  # a tie on add is allowed
    assert added[0]["membertype"] == "VirtualMachine" and added[0]["membername"] == "vm-0"
    assert added[0]["memberstate"] == "Stopped" and added[0]["bootgroupid"] == group["id"]
    assert [(m["membername"], m["order"]) for m in _members(client, group)] == [
        ("vm-0", 0), ("vm-1", 1), ("vm-3", 1), ("vm-2", 2)]
    moved = client.updateInstanceBootGroupMember(id=added[2]["id"], order=0)["instancebootgroupmember"]
    assert moved["order"] == 0
    assert [(m["membername"], m["order"]) for m in _members(client, group)] == [
        ("vm-2", 0), ("vm-0", 1), ("vm-1", 2), ("vm-3", 2)]  # those between 0 and 2 moved up by one
    client.updateInstanceBootGroupMember(id=added[0]["id"], order=2)
    assert [(m["membername"], m["order"]) for m in _members(client, group)] == [
        ("vm-2", 0), ("vm-1", 1), ("vm-3", 1), ("vm-0", 2)]  # and down by one the other way
    assert client.removeInstanceBootGroupMember(id=added[3]["id"]) == {"success": True}
    assert [m["membername"] for m in _members(client, group)] == ["vm-2", "vm-1", "vm-0"]
    assert client.listInstanceBootGroups(keyword="APP")["count"] == 1
    assert client.listInstanceBootGroups(id=group["id"])["instancebootgroup"][0]["name"] == "app-2"
    assert client.deleteInstanceBootGroup(id=group["id"]) == {"success": True}
    assert client.listInstanceBootGroups() == {}
    gone = api_error(lambda: client.listInstanceBootGroupMembers(bootgroupid=group["id"]))
    assert gone.error["errorcode"] == 431 and f"value={group['id']}" in gone.error["errortext"]
    assert [cloud.vm(vm).state for vm in vms] == ["Stopped"] * 4  # the VMs are untouched
    kinds = [event.type for event in services[0].events]
    assert kinds[:2] == [ev.CREATE, ev.UPDATE] and ev.MEMBER_REORDER in kinds and kinds[-1] == ev.DELETE


def test_marvin_2_rule_crud_with_merged_details(cs: ModuleType, cloud: LocalCloudStack,
                                                api_error: Callable[..., Any]) -> None:
    client = _client(cloud)
    group = _group(client)
    db, web, web_group = _two_tiers(cloud, client, group)
    outside = cloud.add_vm("other").id
    port = client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], virtualmachineid=db, ruletype="portcheck",
                                                       details={"port": 5432})["instancebootgroupreadinessrule"]
    assert (port["ruletype"], port["enabled"], port["details"], port["inherited"]) == ("PortCheck", True, {"port": "5432"}, False)
    assert port["name"] == f"PortCheck-VirtualMachine-{db}" and port["itemname"] == "db-1"
    changed = client.updateInstanceBootGroupReadinessRule(id=port["id"], name="db-port", enabled=False,
                                                          details={"protocol": "TCP"})["instancebootgroupreadinessrule"]
    assert (changed["name"], changed["enabled"], changed["details"]) == ("db-port", False, {"port": "5432", "protocol": "tcp"})
    quorum = client.createInstanceBootGroupReadinessRule(
        bootgroupid=group["id"], instancegroupid=web_group, ruletype="MemberQuorum",
        details={"threshold_type": "count", "threshold_value": 1})["instancebootgroupreadinessrule"]
    assert quorum["details"] == {"thresholdtype": "COUNT", "thresholdvalue": "1"}
    ping = client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], instancegroupid=web_group,
                                                       ruletype="Ping", name="web-ping")["instancebootgroupreadinessrule"]
    listed = client.listInstanceBootGroupReadinessRules(bootgroupid=group["id"], virtualmachineid=web[0])
    assert [(r["id"], r["inherited"]) for r in listed["instancebootgroupreadinessrule"]] == [(ping["id"], True)]
    assert client.listInstanceBootGroupReadinessRules(bootgroupid=group["id"], ruletype="memberquorum")["count"] == 1
    assert client.listInstanceBootGroupReadinessRules(bootgroupid=group["id"])["count"] == 3

    def refused(**params: Any) -> str:
        error = api_error(lambda: client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], **params))
        assert error.error["errorcode"] == 431 and error.error["cserrorcode"] == 4350
        return str(error.error["errortext"])

    assert refused(virtualmachineid=db, ruletype="PortCheck", details={"port": 0}).startswith("details.port: must be an integer 1-65535")
    assert "details.port: is required" in refused(virtualmachineid=db, ruletype="PortCheck")
    assert "details.protocol: only tcp" in refused(virtualmachineid=db, ruletype="PortCheck", details={"port": 80, "protocol": "udp"})
    assert refused(virtualmachineid=db, ruletype="MemberQuorum", details={"thresholdtype": "COUNT", "thresholdvalue": 1}
                   ).startswith("ruletype: MemberQuorum is valid on an InstanceGroup member only")
    assert "a second Ping rule" in refused(instancegroupid=web_group, ruletype="ping")
    assert refused(virtualmachineid=db, ruletype="CustomScript").startswith("ruletype: CustomScript is reserved")
    assert "is not an item of boot group" in refused(virtualmachineid=outside, ruletype="Ping")
    retyped = api_error(lambda: client.updateInstanceBootGroupReadinessRule(id=ping["id"], ruletype="PortCheck"))
    assert retyped.error["errortext"].startswith("ruletype: rule 'web-ping' is a Ping rule")
    assert client.deleteInstanceBootGroupReadinessRule(id=quorum["id"]) == {"success": True}
    assert client.listInstanceBootGroupReadinessRules(bootgroupid=group["id"], ruletype="MemberQuorum") == {}
    assert api_error(lambda: client.deleteInstanceBootGroupReadinessRule(id=quorum["id"])).error["errorcode"] == 431


def _jobs(cloud: LocalCloudStack, command: str, vms: list[str]) -> list[float]:
    return [job.created for job in cloud.state.jobs.values() if job.command == command and job.instance_id in vms]


def test_marvin_3_two_tier_start_reboot_and_stop_as_jobs(cs: ModuleType, cloud: LocalCloudStack) -> None:
    client, plain = _client(cloud), cloud.client()
    group = _group(client)
    db, web, web_group = _two_tiers(cloud, client, group)
    client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], instancegroupid=web_group,
                                                ruletype="GuestAgentLiveness")

    job = plain.startInstanceBootGroup(id=group["id"])
    assert list(job) == ["jobid"]
    first = plain.queryAsyncJobResult(jobid=job["jobid"])
    assert first["jobstatus"] == 0 and "jobresult" not in first  # pending_polls=1: always 0 first
    assert first["cmd"].endswith("bootgroup.StartInstanceBootGroupCmd") and first["jobinstancetype"] == "InstanceBootGroup"
    assert first["jobinstanceid"] == group["id"]
    deadline = time.monotonic() + 10
    while (answer := plain.queryAsyncJobResult(jobid=job["jobid"]))["jobstatus"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (answer["jobstatus"], answer["jobresultcode"]) == (1, 0)
    assert answer["jobresult"]["instancebootgroup"]["id"] == group["id"]
    assert [cloud.vm(vm).state for vm in [db, *web]] == ["Running"] * 3
    assert cloud.vm(db).lastupdated <= min(_jobs(cloud, "startVirtualMachine", web))  # tier 1 after tier 0 was Running
    members = _members(client, group, details="readiness")
    assert [(m["memberstate"], m["readinessstatus"]) for m in members] == [("Running", "Ready"), ("Running", "Ready")]

    began = cloud.state.clock()
    rebooted = client.rebootInstanceBootGroup(id=group["id"])
    assert rebooted["instancebootgroup"]["id"] == group["id"]
    assert [cloud.vm(vm).state for vm in [db, *web]] == ["Running"] * 3
    stops = [t for t in _jobs(cloud, "stopVirtualMachine", [db]) if t >= began]
    assert len(stops) == 1 and max(t for t in _jobs(cloud, "stopVirtualMachine", web) if t >= began) <= stops[0]
    assert min(t for t in _jobs(cloud, "startVirtualMachine", [db]) if t >= began) >= stops[0]

    began = cloud.state.clock()
    stopped = client.stopInstanceBootGroup(id=group["id"], forced=True)
    assert stopped["instancebootgroup"]["name"] == "app"
    assert [cloud.vm(vm).state for vm in [db, *web]] == ["Stopped"] * 3
    db_stop = [t for t in _jobs(cloud, "stopVirtualMachine", [db]) if t >= began]
    assert max(t for t in _jobs(cloud, "stopVirtualMachine", web) if t >= began) <= db_stop[0]  # descending
    assert [m["memberstate"] for m in _members(client, group)] == ["Stopped", "Stopped"]


def test_a_failing_start_job_names_the_member_the_rule_and_the_attempt(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    client, plain = _client(cloud), cloud.client()
    group = _group(client, readinessmaxretryattempts=0)
    db = cloud.add_vm("db-1").id
    client.addMemberToInstanceBootGroup(id=group["id"], virtualmachineid=db, order=0)
    client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], virtualmachineid=db, ruletype="PortCheck",
                                                name="db-port", details={"port": 9})  # nothing listens there
    job = plain.startInstanceBootGroup(id=group["id"])["jobid"]
    error = api_error(lambda: client._jobresult(job))
    assert error.args[0] == "Job failure" and error.error["errorcode"] == 530
    text = error.error["errortext"]
    assert f"Instance {db!r}" in text and "PortCheck 'db-port' (port 9)" in text and "(attempt 1/1)" in text
    assert "connection refused" in text and "no rollback" in text
    answer = plain.queryAsyncJobResult(jobid=job)
    assert (answer["jobstatus"], answer["jobresultcode"]) == (2, 530)
    assert cloud.vm(db).state == "Running"  # a halt stops nothing

    other = _group(client, name="other")
    web = cloud.add_vm("web-1").id
    client.addMemberToInstanceBootGroup(id=other["id"], virtualmachineid=web, order=0)
    cloud.fail_jobs("startVirtualMachine", errortext="Insufficient capacity")
    failed = api_error(lambda: client.startInstanceBootGroup(id=other["id"]))
    assert "startVirtualMachine job" in failed.error["errortext"] and "Insufficient capacity" in failed.error["errortext"]
    assert f"instance {web!r}" in failed.error["errortext"]


def test_member_readiness_comes_from_the_cache(cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    client = _client(cloud)
    group = _group(client)
    db, web, web_group = _two_tiers(cloud, client, group, web_order=0)
    client.createInstanceBootGroupReadinessRule(bootgroupid=group["id"], virtualmachineid=db, ruletype="GuestAgentLiveness")
    before = _members(client, group, details="readiness", membertype="virtualmachine")
    assert [(m["readinessmode"], m["readinessstatus"]) for m in before] == [("RuleBased", "NotReady")]
    client.startInstanceBootGroup(id=group["id"])
    member = _members(client, group, details="readiness", membertype="VirtualMachine")[0]
    assert (member["readinessstatus"], member["memberstate"]) == ("Ready", "Running")
    assert member["readinessmessage"] == "1 rule(s) Ready"
    assert "children" not in member and "readinessstatus" not in _members(client, group)[0]
    grouped = _members(client, group, details="all", membertype="InstanceGroup")[0]
    assert grouped["readinessmode"] == "ChildDependent" and grouped["readinessstatus"] == "Ready"
    assert [(c["id"], c["state"], c["readinessstatus"]) for c in grouped["children"]] == [(vm, "Running", "Ready") for vm in web]

    client.stopVirtualMachine(id=db)  # outside the group: the cache keeps Ready
    member = _members(client, group, details="readiness", membertype="VirtualMachine")[0]
    assert (member["memberstate"], member["readinessstatus"]) == ("Stopped", "NotReady")
    member = _members(client, group, details="readiness", membertype="VirtualMachine", ignoreinstancestate=True)[0]
    assert member["readinessstatus"] == "Ready"
    client.startVirtualMachine(id=db)  # restarted outside the group: not yet re-verified
    member = _members(client, group, details="readiness", membertype="VirtualMachine")[0]
    assert member["readinessstatus"] == "Unknown" and "not yet re-verified" in member["readinessmessage"]
    assert api_error(lambda: _members(client, group, details="everything")).error["errorcode"] == 431
    assert api_error(lambda: _members(client, group, membertype="Volume")).error["errorcode"] == 431


def test_refused_changes_are_431_naming_the_parameter_and_a_busy_group_530(
        cs: ModuleType, cloud: LocalCloudStack, api_error: Callable[..., Any]) -> None:
    client = _client(cloud)
    first, second = _group(client, name="first"), _group(client, name="second")
    slow = _group(client, name="slow", readinessinitialdelayseconds=30)
    vms = [cloud.add_vm(f"vm-{n}").id for n in range(11)]
    web = cloud.add_vm("web-1", group="web").id
    web_group = client.listInstanceGroups(name="web")["instancegroup"][0]["id"]

    def refused(call: Callable[[], Any]) -> str:
        error = api_error(call)
        assert (error.error["errorcode"], error.response.status_code, error.error["cserrorcode"]) == (431, 431, 4350)
        return str(error.error["errortext"])

    both = refused(lambda: client.addMemberToInstanceBootGroup(id=first["id"], virtualmachineid=vms[0],
                                                              instancegroupid=web_group, order=0))
    assert both == "virtualmachineid, instancegroupid: give exactly one of them"
    assert refused(lambda: client.addMemberToInstanceBootGroup(id=first["id"], virtualmachineid=vms[0], order=-1)
                   ).startswith("order: must be an integer ≥ 0")
    assert "missing parameter order" in refused(lambda: client.addMemberToInstanceBootGroup(id=first["id"], virtualmachineid=vms[0]))
    for vm in vms[:10]:
        client.addMemberToInstanceBootGroup(id=first["id"], virtualmachineid=vm, order=0)
    assert "already holds 10 members" in refused(
        lambda: client.addMemberToInstanceBootGroup(id=first["id"], virtualmachineid=vms[10], order=0))
    assert refused(lambda: client.addMemberToInstanceBootGroup(id=second["id"], virtualmachineid=vms[0], order=0)) == (
        f"virtualmachineid: instance {vms[0]!r} is already a member of boot group 'first' (one boot group per instance)")
    client.addMemberToInstanceBootGroup(id=second["id"], instancegroupid=web_group, order=0)
    assert "already a member of boot group 'second'" in refused(
        lambda: client.addMemberToInstanceBootGroup(id=slow["id"], instancegroupid=web_group, order=1))
    assert f"belongs to instance group {web_group!r}, a member of boot group 'second'" in refused(
        lambda: client.addMemberToInstanceBootGroup(id=slow["id"], virtualmachineid=web, order=1))
    assert "value=nope" in refused(lambda: client.addMemberToInstanceBootGroup(id="nope", virtualmachineid=vms[10], order=0))
    assert "value=nope" in refused(lambda: client.addMemberToInstanceBootGroup(id=second["id"], virtualmachineid="nope", order=0))
    assert "value=nope" in refused(lambda: client.updateInstanceBootGroupMember(id="nope", order=1))
    assert "value=nope" in refused(lambda: cloud.client().startInstanceBootGroup(id="nope"))
    assert refused(lambda: client.createInstanceBootGroup(name="first")).startswith(
        "name: another boot group of this owner is already named 'first'")
    assert refused(lambda: client.updateInstanceBootGroup(id=first["id"], readinessattempttimeoutseconds=0)).startswith(
        "readinessattempttimeoutseconds: must be greater than 0")
    assert "missing parameter name" in refused(lambda: client.createInstanceBootGroup())

    client.addMemberToInstanceBootGroup(id=slow["id"], virtualmachineid=vms[10], order=0)
    cloud.client().startInstanceBootGroup(id=slow["id"])  # waits out its initial delay
    for call in (lambda: cloud.client().stopInstanceBootGroup(id=slow["id"]),
                 lambda: client.deleteInstanceBootGroup(id=slow["id"])):
        busy = api_error(call)
        assert (busy.error["errorcode"], busy.error["cserrorcode"]) == (530, 4250)
        assert "is still running" in busy.error["errortext"]


def test_the_endpoint_serves_the_installed_extension_and_none_when_told(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack], api_error: Callable[..., Any]) -> None:
    installed = make_cloud()
    assert [extension.name for extension in installed.extensions] == ["bootgroups"]
    assert installed.client().createInstanceBootGroup(name="g")["instancebootgroup"]["name"] == "g"
    bare = make_cloud(extensions=())
    assert api_error(lambda: bare.client().createInstanceBootGroup(name="g")).error["errorcode"] == 432
    clash = CloudStackExtension("clash", {"listVirtualMachines": lambda params: {}})
    with pytest.raises(ValueError, match="listVirtualMachines are served already"):
        make_cloud(extensions=[lambda endpoint: clash])


def test_a_generic_job_answers_its_result_or_its_failure(
        cs: ModuleType, make_cloud: Callable[..., LocalCloudStack], api_error: Callable[..., Any]) -> None:
    def work(params: Any) -> dict[str, Any]:
        if params.get("fail") == "true":
            raise ValueError("the disk is on fire")
        return {"thing": {"id": params["id"]}}

    def factory(endpoint: LocalCloudStack) -> CloudStackExtension:
        def submit(params: Any) -> dict[str, Any]:
            job = endpoint.state.run_job("doThing", "x.DoThingCmd", "Thing", params["id"], lambda: work(params))
            return {"jobid": job.id}
        return CloudStackExtension("things", {"doThing": submit})

    cloud = make_cloud(extensions=[factory])
    client = cloud.client(fetch_result=True, poll_interval=0.01)
    assert client.doThing(id="t-1") == {"thing": {"id": "t-1"}}
    failed = api_error(lambda: client.doThing(id="t-2", fail=True))
    assert failed.error == {"errorcode": 530, "errortext": "ValueError: the disk is on fire"}
    jobs = cloud.client().listAsyncJobs()["asyncjobs"]
    assert [(job["jobinstancetype"], job["jobinstanceid"], job["jobstatus"], job["jobresultcode"]) for job in jobs] == [
        ("Thing", "t-1", 1, 0), ("Thing", "t-2", 2, 530)]
