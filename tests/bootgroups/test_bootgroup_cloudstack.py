"""The boot-group engine on the cloudstack backend against the local CloudStack endpoint: the real
`cs` client signs every request and the endpoint verifies it; VMs run real guest processes on
127.0.0.N, so a PortCheck is a real TCP connect. Two-tier start, reboot and stop; a failing start
job halts with CloudStack's error text; GuestAgentLiveness on a non-KVM VM is Error; API errors
name the VM and the command; throttling is retried."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from typing import Any, Iterator

import pytest

from bootgroup_fakes import members_of
from crhelper.cloud.poll import PollSettings
from crhelper.errors import Failure
from crhelper.local.cloudstack_server import LocalCloudStack
from crhelper.local.cloudstack_state import CloudStackSettings
from crhelper.local.supervisor import port_open
from crhelper.operations import SYSTEM_CLOCK, Budget, Memory
from handlers.bootgroups import events as ev
from handlers.bootgroups.backend_cloudstack import CloudStackBackend, CloudStackConfig, CloudStackError, make_backend
from handlers.bootgroups.backends import MISSING, RUNNING, STOPPED
from handlers.bootgroups.engine import BootRun, StepOutcome, advance, begin, dump_run, load_run
from handlers.bootgroups.model import ERROR, READY, InstanceBootGroupProps
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

