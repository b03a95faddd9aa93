"""The boot-group engine on the cloudstack backend against the local CloudStack endpoint: the real
`cs` client signs every request and the endpoint verifies it; VMs run real guest processes on
127.0.0.N, so a PortCheck is a real TCP connect. Two-tier start, reboot and stop; a failing start
job halts with CloudStack's error text; GuestAgentLiveness on a non-KVM VM is Error; API errors
name the VM and the command; throttling is retried. Reboot-on-retry waits for the VM to read
Running again; the Inventory calls (batch states, group identity, ineligible VMs) read through
listVirtualMachines / listInstanceGroups; a `~` value is refused before it is signed."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import pytest

from bootgroup_fakes import members_of
from crhelper.cloud.poll import PollSettings
from crhelper.errors import Failure
from crhelper.local.cloudstack_server import LocalCloudStack
from crhelper.local.cloudstack_state import CloudStackSettings, InstanceGroup
from crhelper.local.supervisor import port_open
from crhelper.operations import SYSTEM_CLOCK, Budget, Memory
from handlers.bootgroups import events as ev
from handlers.bootgroups.backend_cloudstack import (
    REBOOT_WAIT_ENV, CloudStackBackend, CloudStackConfig, CloudStackError, make_backend)
from handlers.bootgroups.backends import MISSING, RUNNING, STOPPED, NotFound
from handlers.bootgroups.engine import BootRun, StepOutcome, advance, begin, dump_run, load_run
from handlers.bootgroups.model import ERROR, READY, GroupRef, InstanceBootGroupProps
from handlers.bootgroups.settings import GroupSettings
from handlers.bootgroups.validation import Context, check_group

if os.environ.get("CI") != "true":
    pytest.importorskip("cs")



def _free_ports(count: int) -> list[int]:
    """Ports free now: the VMs' addresses are 127.0.0.N in every local CloudStack, so runs side by
    side (other suites, other checkouts) must not share a port."""
    sockets = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    try:
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


DB_PORT, WEB_PORT = _free_ports(2)
#: A guest that listens on its VM's own address (like a service started by the boot script).
LISTEN = ("import os, socket, sys, time\ntime.sleep(float(sys.argv[2]))\n"
          "s = socket.create_server((os.environ['VM_IP'], int(sys.argv[1])))\nwhile True:\n    s.accept()[0].close()")
FAST = GroupSettings(timeout=3, max_retries=20, initial_delay=0.2, reboot_on_retry=False)


def guest(port: int, after: float = 0.0) -> list[str]:
    """A guest listening on its VM's address and `port`, `after` seconds after it was started."""
    return [sys.executable, "-c", LISTEN, str(port), str(after)]


def port_rule(port: int) -> dict[str, Any]:
    return {"Type": "PortCheck", "Details": {"port": port, "protocol": "tcp"}}


@pytest.fixture
def cloud() -> Iterator[LocalCloudStack]:
    with LocalCloudStack(settings=CloudStackSettings(start_seconds=0.2, stop_seconds=0.1, guest_stop_grace=1.0)) as made:
        yield made


def backend_of(cloud: LocalCloudStack, **kw: Any) -> CloudStackBackend:
    return CloudStackBackend(CloudStackConfig(cloud.endpoint, cloud.api_key, cloud.secret,
                                              **{"job_wait": 0.5, "retry_seconds": 2.0, **kw}))


def run_to_end(operation: str, members: Any, cloud: LocalCloudStack, *, settings: GroupSettings = FAST,
               step_seconds: float = 0.3, forced: bool = False, **backend_kw: Any) -> tuple[BootRun, StepOutcome]:
    """Drive the run as the provider does: short steps, the run through JSON between them, and a
    new backend (no memory of its jobs) each time."""
    run = begin(operation, "g", members, settings=settings, now=time.time(), poll_interval=0.1, forced=forced)
    for _ in range(200):
        budget = Budget(clock=SYSTEM_CLOCK, step_started=time.time(), step_seconds=step_seconds, deadline=math.inf,
                        memory=Memory(), invocation_left=lambda: math.inf)
        outcome = advance(run, backend_of(cloud, **backend_kw), budget)
        if outcome.finished:
            return run, outcome
        time.sleep(outcome.delay)
        run = load_run(json.loads(json.dumps(dump_run(run))))
    raise AssertionError("the run did not finish")


def group_id(cloud: LocalCloudStack, vm_id: str) -> str:
    found = cloud.vm(vm_id).group_id
    assert found is not None
    return found


def two_tiers(cloud: LocalCloudStack, state: str = STOPPED) -> tuple[Any, list[Any], Any]:
    db = cloud.add_vm("db-1", state=state, guest=guest(DB_PORT, after=0.6))
    web = [cloud.add_vm(f"web-{n}", state=state, group="web", guest=guest(WEB_PORT)) for n in (1, 2)]
    members = members_of({"Backend": "cloudstack", "Members": [
        {"Instance": db.id, "BootOrder": 0, "ReadinessRules": [port_rule(DB_PORT)]},
        {"InstanceGroup": {"Name": "web", "Id": group_id(cloud, web[0].id)}, "BootOrder": 1,
         "ReadinessRules": [port_rule(WEB_PORT), {"Type": "Ping"}]},
    ]}, group_instances={"web": [vm.id for vm in web]})
    return db, web, members


def first(run: BootRun, kind: str, subject: str, contains: str = "") -> float:
    return next(e.at for e in run.timeline if e.kind == kind and e.subject == subject and contains in e.message)


@pytest.mark.slow
def test_a_two_tier_start_gates_on_port_checks_and_the_stop_runs_in_reverse(cloud: LocalCloudStack) -> None:
    db, web, members = two_tiers(cloud)
    run, outcome = run_to_end("start", members, cloud)
    assert outcome.ok, outcome.reason
    assert {cloud.vm(vm.id).state for vm in [db, *web]} == {"Running"}
    assert port_open(db.ip, DB_PORT) and all(port_open(vm.ip, WEB_PORT) for vm in web)
    starts = {r.parameters["id"]: r.time for r in cloud.calls("startVirtualMachine")}
    assert list(starts) == [db.id, web[0].id, web[1].id] or list(starts) == [db.id, web[1].id, web[0].id]
    db_ready = first(run, ev.CHECK, db.id, "Ready")
    assert all(starts[vm.id] > db_ready for vm in web)          # tier 1 started only once db accepted connections
    checks = [e.message for e in run.timeline if e.kind == ev.CHECK and e.subject == db.id]
    assert f"connection refused by {db.ip}:{DB_PORT}" in checks[0] and checks[-1].startswith("Ready")
    [db_cached] = [entry for key, entry in run.cache.items() if key.endswith(f"@{db.id}")]
    assert db_cached.status == READY and f"TCP connect to {db.ip}:{DB_PORT} accepted" in db_cached.message
    assert all(r.status == 200 for r in cloud.requests)         # every request signed by cs and verified

    cloud.api.recorded.clear()
    stopped, outcome = run_to_end("stop", members, cloud, forced=True)
    assert outcome.ok, outcome.reason
    stops = [r.parameters for r in cloud.calls("stopVirtualMachine")]
    assert [p["id"] for p in stops][-1] == db.id and {p["id"] for p in stops[:2]} == {vm.id for vm in web}
    assert {p["forced"] for p in stops} == {"true"}
    assert {cloud.vm(vm.id).state for vm in [db, *web]} == {"Stopped"} and not port_open(db.ip, DB_PORT)


@pytest.mark.slow
def test_a_reboot_stops_then_starts_in_order_with_new_guests(cloud: LocalCloudStack) -> None:
    db, web, members = two_tiers(cloud, state=RUNNING)
    before = {vm.id: cloud.guest_pid(vm.id) for vm in [db, *web]}
    run, outcome = run_to_end("reboot", members, cloud)
    assert outcome.ok, outcome.reason
    commands = [(r.command, r.parameters["id"]) for r in cloud.requests
                if r.command in ("stopVirtualMachine", "startVirtualMachine")]
    assert [c for c, _ in commands] == ["stopVirtualMachine"] * 3 + ["startVirtualMachine"] * 3
    assert commands[2] == ("stopVirtualMachine", db.id) and commands[3] == ("startVirtualMachine", db.id)
    after = {vm.id: cloud.guest_pid(vm.id) for vm in [db, *web]}
    assert all(after[vm] not in (None, before[vm]) for vm in after) and run.events[-1].type == ev.REBOOT


@pytest.mark.parametrize("job_wait, seen_by", [(1.0, "failed to start: CloudStack"),
                                              (0.0, "failed to start: CloudStack")],
                         ids=["seen-by-the-start", "seen-by-the-next-state-read"])
def test_a_failing_start_job_halts_with_the_cloudstack_error_text(cloud: LocalCloudStack, job_wait: float,
                                                                  seen_by: str) -> None:
    db = cloud.add_vm("db-1")
    web = cloud.add_vm("web-1")
    cloud.fail_jobs("startVirtualMachine", errortext="Insufficient capacity to deploy db-1 on any host")
    members = members_of({"Backend": "cloudstack", "Members": [
        {"Instance": db.id, "BootOrder": 0, "ReadinessRules": [port_rule(DB_PORT)]},
        {"Instance": web.id, "BootOrder": 1}]})
    run, outcome = run_to_end("start", members, cloud, job_wait=job_wait)
    assert not outcome.ok and outcome.reason is not None
    assert f"{seen_by} startVirtualMachine job" in outcome.reason and f"for VM {db.id!r}" in outcome.reason
    assert "errorcode 530): Insufficient capacity to deploy db-1 on any host" in outcome.reason
    assert "no rollback" in outcome.reason and [r.parameters["id"] for r in cloud.calls("startVirtualMachine")] == [db.id]
    assert cloud.vm(db.id).state == cloud.vm(web.id).state == "Stopped"


def test_guest_agent_liveness_is_error_on_a_non_kvm_vm_and_ready_on_a_running_kvm_one(cloud: LocalCloudStack) -> None:
    kvm = cloud.add_vm("kvm-1", state=RUNNING)
    xen = cloud.add_vm("xen-1", state=RUNNING, hypervisor="XenServer")
    agent = {"Type": "GuestAgentLiveness"}
    members = members_of({"Backend": "cloudstack", "Members": [
        {"Instance": kvm.id, "BootOrder": 0, "ReadinessRules": [agent]},
        {"InstanceGroup": {"Name": "xen", "Instances": [xen.id]}, "BootOrder": 1, "ReadinessRules": [agent]}]})
    run, outcome = run_to_end("start", members, cloud, settings=GroupSettings(timeout=2, max_retries=0, initial_delay=0))
    assert not outcome.ok and outcome.reason is not None
    assert f"instance {xen.id!r} runs on XenServer, not KVM: GuestAgentLiveness needs qemu-guest-agent" in outcome.reason
    [kvm_cached] = [entry for key, entry in run.cache.items() if key.endswith(f"@{kvm.id}")]
    assert kvm_cached.status == READY and "is Running on KVM" in kvm_cached.message
    assert not cloud.calls("startVirtualMachine")                  # both were Running: not restarted
    # A direct member is refused at Create when the backend tells validation it is not KVM.
    backend = backend_of(cloud)
    checked = check_group(InstanceBootGroupProps.model_validate({"Name": "g", "Backend": "cloudstack", "Members": [
        {"Instance": xen.id, "BootOrder": 0, "ReadinessRules": [agent]}]}), Context(has_guest_agent=backend.has_guest_agent))
    assert checked.problems and "GuestAgentLiveness" in str(checked.problems[0])
    assert backend.has_guest_agent(kvm.id) is True and backend.has_guest_agent("no-such-vm") is None


def test_states_and_checks_read_through_cs(cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("db-1", state=RUNNING, guest=guest(DB_PORT))
    backend = backend_of(cloud)
    state = backend.vm_state(vm.id)
    assert state.state == RUNNING and state.last_power_change == math.floor(cloud.vm(vm.id).lastupdated)
    assert backend.vm_state("no-such-vm").state == MISSING
    deadline = time.monotonic() + 5
    while not port_open(vm.ip, DB_PORT) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert backend.check("PortCheck", vm.id, {"port": str(DB_PORT)}, 1.0).status == READY
    refused = backend.check("PortCheck", vm.id, {"port": "1"}, 1.0)
    assert (refused.status, refused.message) == (ERROR, f"connection refused by {vm.ip}:1")
    assert backend.check("Ping", vm.id, {}, 1.0).status == READY
    assert backend.check("PortCheck", vm.id, {"port": str(DB_PORT)}, 0).status == ERROR   # no budget left


def test_errors_name_the_vm_and_the_command_and_never_the_secret(cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("db-1")
    wrong = CloudStackBackend(CloudStackConfig(cloud.endpoint, cloud.api_key, "not-the-secret", retry_seconds=0))
    with pytest.raises(CloudStackError) as signature:
        wrong.vm_state(vm.id)
    text = str(signature.value)
    assert text.startswith(f"CloudStack listVirtualMachines for VM {vm.id!r} failed: HTTP 401 (errorcode 401")
    assert "unable to verify user credentials and/or request signature" in text and "CLOUDSTACK_SECRET" in text
    assert "not-the-secret" not in text and "signature=" not in text
    backend = backend_of(cloud)
    with pytest.raises(CloudStackError, match=r"startVirtualMachine for VM 'nope' failed: HTTP 431 \(errorcode 431, "
                                              r"cserrorcode 4350\): .*value=nope"):
        backend.start_vm("nope")
    cloud.fail_next("stopVirtualMachine", errorcode=533, errortext="Insufficient capacity")
    running = cloud.add_vm("web-1", state=RUNNING)
    with pytest.raises(CloudStackError, match=f"stopVirtualMachine for VM {running.id!r} failed: HTTP 533 .*: Insufficient capacity"):
        backend.stop_vm(running.id, forced=False)
    assert len(cloud.calls("stopVirtualMachine")) == 1             # a lasting condition is not retried
    down = CloudStackBackend(CloudStackConfig("http://127.0.0.1:9/client/api", "k", "s", retry_seconds=0.3))
    with pytest.raises(CloudStackError, match=r"cannot reach http://127.0.0.1:9/client/api: \[Errno 111\]"):
        down.vm_state(vm.id)


def test_throttling_and_unavailable_answers_are_retried_with_backoff(cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("db-1")
    backend = backend_of(cloud, poll=PollSettings(0.05, 0.2), job_wait=0)
    cloud.fail_next("listVirtualMachines", times=2, errorcode=429, errortext="too many requests")
    assert backend.vm_state(vm.id).state == STOPPED and len(cloud.calls("listVirtualMachines")) == 3
    cloud.fail_next("startVirtualMachine", times=1, errorcode=534, errortext="service unavailable")
    backend.start_vm(vm.id)
    assert [r.status for r in cloud.calls("startVirtualMachine")] == [534, 200]


def test_the_config_comes_from_the_settings_or_the_cs_variables_and_hides_the_secret() -> None:
    env = {"CLOUDSTACK_ENDPOINT": "http://127.0.0.1:8080/client/api", "CLOUDSTACK_KEY": "k", "CLOUDSTACK_SECRET": "s3cr3t"}
    config = CloudStackConfig.resolve(None, env)
    assert make_backend(env).config == config
    assert (config.endpoint, config.key, config.secret, config.method, config.timeout) == (env["CLOUDSTACK_ENDPOINT"], "k", "s3cr3t", "get", 10)
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(CloudStackBackend(config))
    given = CloudStackConfig.resolve({"Endpoint": "https://cloud.example/client/api", "Method": "POST"}, env)
    assert (given.endpoint, given.method, given.secret) == ("https://cloud.example/client/api", "post", "s3cr3t")
    with pytest.raises(Failure, match=r"needs Key \(CLOUDSTACK_KEY\), Secret \(CLOUDSTACK_SECRET\)"):
        CloudStackConfig.resolve({"Endpoint": "http://x/client/api"}, {})
    with pytest.raises(Failure, match="must be an http"):
        CloudStackConfig.resolve({"Endpoint": "cloud.example"}, env)


@pytest.mark.slow
def test_importing_the_backend_imports_no_sdk() -> None:
    code = ("import sys, handlers.bootgroups.backend_cloudstack; "
            "print(sorted({'cs', 'requests'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "[]", out.stderr


# --- reboot-on-retry (review B3) -------------------------------------------------------------------

def test_a_reboot_returns_once_the_vm_reads_running_and_a_failed_reboot_job_raises(cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("db-1", state=RUNNING)
    backend = backend_of(cloud, poll=PollSettings(0.02, 0.1))
    backend.reboot_vm(vm.id)
    [job] = [j for j in cloud.state.jobs.values() if j.command == "rebootVirtualMachine"]
    assert job.completed is not None and cloud.vm(vm.id).state == "Running"
    assert [r.command for r in cloud.requests][-1] == "listVirtualMachines"     # read Running after the job
    cloud.fail_jobs("rebootVirtualMachine", errortext="Unable to reboot db-1: host in maintenance")
    with pytest.raises(CloudStackError, match=r"rebootVirtualMachine job .* for VM .* failed \(jobstatus 2, "
                                              r"jobresultcode 530, errorcode 530\): Unable to reboot db-1: host in maintenance"):
        backend.reboot_vm(vm.id)


def test_a_reboot_that_does_not_get_back_to_running_within_the_bound_names_vm_state_and_bound() -> None:
    with LocalCloudStack(settings=CloudStackSettings(start_seconds=5, stop_seconds=5)) as slow:
        vm = slow.add_vm("db-1", state=RUNNING)
        backend = backend_of(slow, reboot_wait=0.3, poll=PollSettings(0.05, 0.1))
        started = time.monotonic()
        with pytest.raises(CloudStackError) as info:
            backend.reboot_vm(vm.id)
        assert time.monotonic() - started < 2
    text = str(info.value)
    assert f"VM {vm.id!r} did not read Running within 0.3 s of its reboot (last state: Stopping" in text
    assert "is still pending" in text and REBOOT_WAIT_ENV in text


@pytest.mark.slow
def test_reboot_on_retry_reboots_n_times_and_evaluates_each_time_after_the_vm_is_running_again() -> None:
    """§4.2.4 on CloudStack: 1 s transitions, delay 0, MaxRetryAttempts 3, RebootOnRetry, a member
    never Ready: 3 reboots, 4 evaluations each on a Running VM, then the halt at attempt 4/4."""
    with LocalCloudStack(settings=CloudStackSettings(start_seconds=1, stop_seconds=1)) as slow:
        vm = slow.add_vm("db-1", state=RUNNING)
        members = members_of({"Backend": "cloudstack", "Members": [
            {"Instance": vm.id, "BootOrder": 0, "ReadinessRules": [port_rule(DB_PORT)]}]})
        settings = GroupSettings(timeout=2, max_retries=3, initial_delay=0, reboot_on_retry=True)
        run, outcome = run_to_end("start", members, slow, settings=settings, poll=PollSettings(0.05, 0.2))
        reboots = sorted((j for j in slow.state.jobs.values() if j.command == "rebootVirtualMachine"),
                         key=lambda j: j.created)
    assert len(slow.calls("rebootVirtualMachine")) == 3 and all(j.completed is not None for j in reboots)
    checks = [e for e in run.timeline if e.kind == ev.CHECK and e.subject == vm.id]
    assert len(checks) == 4
    for check, reboot in zip(checks[1:], reboots):                  # each evaluation after a reboot ...
        assert reboot.completed is not None and check.at >= reboot.completed   # ... once the VM was Running
    assert all(f"connection refused by {vm.ip}:{DB_PORT}" in e.message for e in checks)
    assert not outcome.ok and outcome.reason is not None
    assert "4/4" in outcome.reason and "PortCheck" in outcome.reason and "530" not in outcome.reason


# --- Inventory: vm_states, group_identity, ineligible -----------------------------------------------

def test_vm_states_lists_many_vms_per_call_and_an_unlisted_id_is_missing(cloud: LocalCloudStack) -> None:
    vms = [cloud.add_vm(f"vm-{n}", state=RUNNING if n % 2 else STOPPED) for n in range(5)]
    ghost = str(uuid.uuid4())                                        # no such VM (or another account's)
    backend = backend_of(cloud, ids_per_call=2)
    states = backend.vm_states([vm.id for vm in vms] + [ghost])
    assert {vm: s.state for vm, s in states.items()} == {
        **{vm.id: RUNNING if n % 2 else STOPPED for n, vm in enumerate(vms)}, ghost: MISSING}
    assert states[vms[1].id].last_power_change == math.floor(cloud.vm(vms[1].id).lastupdated)
    calls = cloud.calls("listVirtualMachines")
    assert [c.parameters["ids"].split(",") for c in calls] == [
        [vms[0].id, vms[1].id], [vms[2].id, vms[3].id], [vms[4].id, ghost]]      # one call per page of ids
    assert all("id" not in c.parameters for c in calls)


def test_vm_states_drops_an_id_a_real_server_refuses_with_a_431(cloud: LocalCloudStack) -> None:
    vm = cloud.add_vm("vm-1", state=RUNNING)
    ghost = str(uuid.uuid4())
    cloud.fail_next("listVirtualMachines", errorcode=431, cserrorcode=4350, errortext=(
        "Unable to execute API command listvirtualmachines due to invalid value. Invalid parameter ids "
        f"value={ghost} due to incorrect long value format, or entity does not exist or due to incorrect "
        "parameter annotation for the field in api cmd class."))
    states = backend_of(cloud).vm_states([vm.id, ghost])
    assert (states[vm.id].state, states[ghost].state) == (RUNNING, MISSING)
    assert [c.parameters["ids"] for c in cloud.calls("listVirtualMachines")] == [f"{vm.id},{ghost}", vm.id]


def test_group_identity_is_the_uuid_of_the_group_by_id_or_by_its_one_name(cloud: LocalCloudStack) -> None:
    web = cloud.add_group("web")
    backend = backend_of(cloud)
    assert backend.group_identity(GroupRef(name="web")) == web.id
    assert backend.group_identity(GroupRef(name="frontend", id=web.id)) == web.id
    assert [dict(c.parameters) for c in cloud.calls("listInstanceGroups")][-1]["id"] == web.id
    cloud.api.recorded.clear()
    assert backend.group_identity(GroupRef(name="mine", instances=["a", "b"])) is None and not cloud.requests
    with pytest.raises(NotFound, match="instance group Name 'db': no CloudStack instance group"):
        backend.group_identity(GroupRef(name="db"))
    ghost = str(uuid.uuid4())
    with pytest.raises(NotFound, match=f"instance group Id '{ghost}': no CloudStack instance group with this id"):
        backend.group_identity(GroupRef(name="web", id=ghost))
    cloud.fail_next("listInstanceGroups", errorcode=431, cserrorcode=4350,   # what a real server answers
                    errortext=f"Unable to execute API command listinstancegroups due to invalid value. Invalid "
                              f"parameter id value={ghost} due to incorrect long value format, or entity does not exist")
    with pytest.raises(NotFound, match=f"Id '{ghost}'"):
        backend.group_identity(GroupRef(id=ghost, instances=[]))
    other = InstanceGroup(str(uuid.uuid4()), "web", time.time())     # e.g. seen through a project
    cloud.state.groups[other.id] = other
    with pytest.raises(Failure, match=f"Name 'web': 2 CloudStack instance groups have this name \\({web.id}, "
                                      f"{other.id}\\); give the one you mean as Id"):
        backend.group_identity(GroupRef(name="web"))
    with pytest.raises(Failure, match="Tag selects ECS instances"):
        backend.group_identity(GroupRef(name="t", tag_key="tier", tag_value="web"))


def test_a_value_with_a_tilde_is_refused_before_it_is_signed(cloud: LocalCloudStack) -> None:
    backend = backend_of(cloud)
    with pytest.raises(CloudStackError, match=r"listInstanceGroups for instance group 'web~1' not sent: name "
                                              r"'web~1' contains '~'.*refuse the signature \(HTTP 401\)"):
        backend.group_identity(GroupRef(name="web~1"))
    with pytest.raises(CloudStackError, match="startVirtualMachine for VM 'i~2' not sent: id 'i~2'"):
        backend.start_vm("i~2")
    assert not cloud.requests                                       # nothing reached the server
    vm = cloud.add_vm("db-1")
    assert backend.vm_state("i~2").state == MISSING and not cloud.requests   # no CloudStack uuid has a '~'
    states = backend.vm_states(["i~2", vm.id])
    assert (states["i~2"].state, states[vm.id].state) == (MISSING, STOPPED)
    assert [r.parameters["ids"] for r in cloud.requests] == [vm.id]


def test_ineligible_names_vnf_appliances_cks_nodes_and_autoscale_members(cloud: LocalCloudStack) -> None:
    plain = cloud.add_vm("plain")
    vnf = cloud.add_vm("router", template_type="VNF")
    cks = cloud.add_vm("k8s-node-1", vm_type="cksnode")
    scaled = cloud.add_vm("web-autoscale-1", autoscale_group="web-asg")
    ghost = str(uuid.uuid4())
    reasons = backend_of(cloud, ids_per_call=3).ineligible([plain.id, vnf.id, cks.id, scaled.id, ghost])
    listed = cloud.state.describe(cloud.state.vms[scaled.id])
    assert reasons == {
        vnf.id: "it is a VNF appliance (templatetype VNF)",
        cks.id: "it is a CKS cluster node (vmtype cksnode)",
        scaled.id: f"it is in AutoScale VM group 'web-asg' (autoscalevmgroupid {listed['autoscalevmgroupid']})"}
    assert len(cloud.calls("listVirtualMachines")) == 2
