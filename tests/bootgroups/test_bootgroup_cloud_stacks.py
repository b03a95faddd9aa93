"""The cloud backends end to end through a stack, as a user deploys them: the stack emulator in
process runs a `Custom::InstanceBootGroup` whose `Backend` is `ecs` (against a real `LocalECS`,
through the official `alibabacloud-ecs20140526` SDK) or `cloudstack` (against a real
`LocalCloudStack`, through `cs`). Credentials and endpoints come from the environment only, as on
Function Compute (`ALIBABA_CLOUD_*` + `CRHELPER_ECS_ENDPOINT`, `CLOUDSTACK_*`). Each stack has two
tiers: an instance group (ECS: by Tag; CloudStack: by Id) whose instances inherit a PortCheck, then
a direct instance with its own PortCheck, every check a real TCP connect to the guest that the
endpoint runs on the instance's 127.0.0.N address. It is created Running, updated to Stopped and
deleted; after each step the instances' states are read on the endpoint and the resource's Data
through the stack's outputs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from crhelper.emulator import StackEmulator, StackEvent
from crhelper.emulator.delivery import StackDelivery
from crhelper.emulator.delivery_bindings import Bindings
from crhelper.local.ecs_server import EcsTimings, LocalECS
from crhelper.paths import home
from handlers.bootgroups import engine, events as ev
from handlers.bootgroups.state import SqliteGroupStore, default_path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
from cloud_support import sdk  # noqa: E402  (the optional-SDK rule: skipped locally, required on CI)

pytestmark = pytest.mark.slow

TOKEN = "acs:fc:cn-hangzhou:123456789:services/crhelper-bootgroups/functions/provider"
PROVIDER = "handlers.bootgroups.provider:provider"
#: Quick polls everywhere: the provider's rounds, the cloud waits, the CloudStack job watch.
FAST_ENV = {"CRHELPER_BOOTGROUP_POLL_INTERVAL": "0.1", "CRHELPER_POLL_INITIAL": "0.05", "CRHELPER_POLL_CAP": "0.2",
            "CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT": "0.5", "CRHELPER_BOOTGROUP_CLOUDSTACK_RETRY_SECONDS": "2",
            "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true"}


def guest_ports() -> tuple[int, int]:
    """Two ports for this process's guests: every local endpoint numbers its instances 127.0.0.2, .3,
    ..., so test processes side by side take ports by their pid, below Linux's ephemeral range
    (32768-60999), where no outgoing connection takes them meanwhile."""
    base = 12000 + 2 * (os.getpid() % 10000)
    return base, base + 1


def configure(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    """The provider's environment, as a deployed function's: the quick polls and the endpoint's settings."""
    for name, value in {**FAST_ENV, **variables}.items():
        monkeypatch.setenv(name, value)


def ecs_environment(ecs: LocalECS) -> dict[str, str]:
    """What the ecs backend reads: the caller's key (FC sets these for the function's role) and the endpoint."""
    return {"ALIBABA_CLOUD_ACCESS_KEY_ID": ecs.access_key_id, "ALIBABA_CLOUD_ACCESS_KEY_SECRET": ecs.access_key_secret,
            "CRHELPER_ECS_ENDPOINT": ecs.endpoint}


def http_server(port: int, address: str) -> str:
    """A guest: an HTTP server on the instance's own address (`$HOST`, set by both endpoints)."""
    return f"exec {sys.executable} -m http.server {port} --bind {address}"


def port_check(port: int, name: str) -> dict[str, Any]:
    return {"Type": "PortCheck", "Name": name, "Details": {"port": port, "protocol": "tcp"}}


def template(backend: str, group: dict[str, Any], web: str, db_port: int, web_port: int) -> str:
    """Two tiers: the instance group (its instances inherit the db PortCheck), then the web instance."""
    return json.dumps({
        "ROSTemplateFormatVersion": "2015-09-01",
        "Parameters": {"DesiredState": {"Type": "String", "Default": "Running", "AllowedValues": ["Running", "Stopped"]}},
        "Resources": {"Tiers": {"Type": "Custom::InstanceBootGroup", "Properties": {
            "ServiceToken": TOKEN, "Timeout": 120, "Parameters": {
                "Name": {"Fn::Sub": "${ALIYUN::StackName}-tiers"}, "Backend": backend,
                "DesiredState": {"Ref": "DesiredState"},
                "Settings": {"ReadinessTimeoutSeconds": 5, "MaxRetryAttempts": 40, "InitialDelaySeconds": 0},
                "Members": [
                    {"InstanceGroup": group, "BootOrder": 0, "ReadinessRules": [port_check(db_port, "db-port")]},
                    {"Instance": web, "BootOrder": 1, "ReadinessRules": [port_check(web_port, "web-port")]},
                ]}}}},
        "Outputs": {name: {"Value": {"Fn::GetAtt": ["Tiers", name]}}
                    for name in ("GroupId", "Backend", "State", "Tiers", "Readiness")},
    })


class Stack:
    """One stack in the emulator, each operation delivered in process to the boot-group provider."""

    def __init__(self, emulator: StackEmulator, name: str) -> None:
        self.emulator, self.name = emulator, name
        self.events: list[StackEvent] = []

    def _deliver(self) -> StackDelivery:
        return StackDelivery(Bindings({TOKEN: PROVIDER}, mode="inprocess"))

    def create(self, text: str, **options: Any) -> Any:
        with self._deliver() as deliver:
            return self.emulator.create(self.name, text, {}, deliver, on_event=self.events.append, **options)

    def update(self, **parameters: str) -> Any:
        with self._deliver() as deliver:
            return self.emulator.update(self.name, None, parameters, deliver, on_event=self.events.append)

    def delete(self) -> Any:
        with self._deliver() as deliver:
            return self.emulator.delete(self.name, deliver, on_event=self.events.append)

    def reasons(self) -> list[str]:
        return [f"{e.logical_id} {e.status}: {e.reason}" for e in self.events if e.status.endswith("FAILED")]


@pytest.fixture
def emulator() -> Iterator[StackEmulator]:
    with StackEmulator(home()) as made:
        yield made


def groups() -> list[Any]:
    return SqliteGroupStore(default_path()).list_groups()


def assert_gated(record: Any, ports: dict[str, tuple[str, int]], first: list[str], then: str) -> None:
    """Each instance's PortCheck result (the group's cache) is a TCP connect its guest accepted on
    its own address, and `then` was started only once every instance of `first` read Ready."""
    for vm, (address, port) in ports.items():
        (result,) = [entry for key, entry in record.cache.items() if key.endswith(f"@{vm}")]
        assert result.status == "Ready" and result.message.startswith(f"TCP connect to {address}:{port} accepted"), result
    timeline = engine.load_run(record.run).timeline
    ready = [e.at for e in timeline if e.kind == ev.CHECK and e.subject in first and e.message.startswith("Ready")]
    (started,) = [e.at for e in timeline if e.kind == ev.VM_START and e.subject == then]
    assert len(ready) == len(first) and max(ready) <= started


def assert_data(outputs: dict[str, Any], backend: str, state: str, group_key: str, web: str, readiness: str) -> None:
    assert (outputs["Backend"], outputs["State"]) == (backend, state), outputs
    assert outputs["Tiers"] == [{"Order": 0, "Members": [group_key]}, {"Order": 1, "Members": [web]}], outputs
    assert outputs["Readiness"] == {group_key: readiness, web: readiness}, outputs


# --- ecs -------------------------------------------------------------------------------------------


def test_an_ecs_boot_group_through_a_stack_starts_a_tag_group_then_an_instance_stops_and_deletes(
        emulator: StackEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    sdk("alibabacloud_ecs20140526.client")
    db_port, web_port = guest_ports()
    with LocalECS(timings=EcsTimings(pending=0.05, starting=0.2, stopping=0.1, forced_stopping=0.02),
                  kill_grace=0.3) as ecs:
        configure(monkeypatch, ecs_environment(ecs))
        dbs = [ecs.add_instance(f"db{n}", tags={"tier": "db"}, user_data=http_server(db_port, "$HOST")) for n in (1, 2)]
        web = ecs.add_instance("web", tags={"tier": "web"}, user_data=http_server(web_port, "$HOST"))
        bystander = ecs.add_instance("bystander", tags={"tier": "db-old"}, user_data=http_server(db_port, "$HOST"))
        stack = Stack(emulator, "shop")
        group = {"Name": "dbs", "Tag": {"Key": "tier", "Value": "db"}}

        created = stack.create(template("ecs", group, web, db_port, web_port))
        assert created.status == "CREATE_COMPLETE", stack.reasons()
        assert [ecs.status(vm) for vm in (*dbs, web, bystander)] == ["Running"] * 3 + ["Stopped"]
        starts = [r.parameters["InstanceId.1"] for r in ecs.requests if r.action == "StartInstances"]
        assert sorted(starts[:2]) == sorted(dbs) and starts[2:] == [web]  # tier 0, then tier 1
        assert all(r.status == 200 and r.signature_method == "ACS3-HMAC-SHA256" for r in ecs.requests)
        assert any(r.action == "DescribeInstanceStatus" for r in ecs.requests), "poll rounds read states in one call"
        outputs = created.output_values()
        (record,) = groups()
        assert outputs["GroupId"] == record.group_id == created.resources[0].physical_id
        assert_data(outputs, "ecs", "Running", "dbs", web, "Ready")
        assert record.name == "shop-tiers" and record.owner == "ecs:123456789"
        assert_gated(record, {vm: (ecs.instance(vm).private_ip, port) for vm, port in
                              ((dbs[0], db_port), (dbs[1], db_port), (web, web_port))}, dbs, web)

        ecs.clear_requests()
        stopped = stack.update(DesiredState="Stopped")
        assert stopped.status == "UPDATE_COMPLETE", stack.reasons()
        assert [ecs.status(vm) for vm in (*dbs, web, bystander)] == ["Stopped"] * 4
        stops = [r.parameters["InstanceId.1"] for r in ecs.requests if r.action == "StopInstances"]
        assert stops[0] == web and sorted(stops[1:]) == sorted(dbs)  # descending tiers
        assert_data(stopped.output_values(), "ecs", "Stopped", "dbs", web, "NotReady")

        ecs.clear_requests()
        deleted = stack.delete()
        assert deleted.status == "DELETE_COMPLETE", stack.reasons()
        assert groups() == []
        assert not [r for r in ecs.requests if r.action in ("StartInstances", "StopInstances", "DeleteInstances")]
        assert {i.instance_id for i in ecs.fleet.instances()} == {*dbs, web, bystander}  # the VMs are untouched


# --- cloudstack ------------------------------------------------------------------------------------


def test_a_cloudstack_boot_group_through_a_stack_starts_a_group_by_id_then_a_vm_stops_and_deletes(
        emulator: StackEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    sdk("cs")
    from crhelper.local.cloudstack_server import LocalCloudStack
    from crhelper.local.cloudstack_state import CloudStackSettings

    db_port, web_port = guest_ports()
    with LocalCloudStack(settings=CloudStackSettings(start_seconds=0.2, stop_seconds=0.1, guest_stop_grace=0.5),
                         extensions=()) as cloud:
        configure(monkeypatch, {"CLOUDSTACK_ENDPOINT": cloud.endpoint, "CLOUDSTACK_KEY": cloud.api_key,
                                "CLOUDSTACK_SECRET": cloud.secret})
        dbs = [cloud.add_vm(f"db{n}", group="dbs", guest=http_server(db_port, "$VM_IP")).id for n in (1, 2)]
        web = cloud.add_vm("web", guest=http_server(web_port, "$VM_IP")).id
        other = cloud.add_vm("other", group="others").id
        group_id = next(g.id for g in cloud.state.groups.values() if g.name == "dbs")
        stack = Stack(emulator, "crm")

        created = stack.create(template("cloudstack", {"Id": group_id}, web, db_port, web_port))
        assert created.status == "CREATE_COMPLETE", stack.reasons()
        assert [cloud.vm(vm).state for vm in (*dbs, web, other)] == ["Running"] * 3 + ["Stopped"]
        starts = [r.parameters["id"] for r in cloud.calls("startVirtualMachine")]
        assert sorted(starts[:2]) == sorted(dbs) and starts[2:] == [web]
        (record,) = groups()
        outputs = created.output_values()
        assert outputs["GroupId"] == record.group_id == created.resources[0].physical_id
        assert_data(outputs, "cloudstack", "Running", group_id, web, "Ready")
        assert record.owner.startswith(f"cloudstack:{cloud.endpoint}#") and cloud.api_key not in record.owner
        assert_gated(record, {vm: (cloud.vm(vm).ip, port) for vm, port in
                              ((dbs[0], db_port), (dbs[1], db_port), (web, web_port))}, dbs, web)

        stopped = stack.update(DesiredState="Stopped")
        assert stopped.status == "UPDATE_COMPLETE", stack.reasons()
        assert [cloud.vm(vm).state for vm in (*dbs, web, other)] == ["Stopped"] * 4
        stops = [r.parameters["id"] for r in cloud.calls("stopVirtualMachine")]
        assert stops[0] == web and sorted(stops[1:]) == sorted(dbs)
        assert_data(stopped.output_values(), "cloudstack", "Stopped", group_id, web, "NotReady")

        calls_before = len(cloud.requests)
        deleted = stack.delete()
        assert deleted.status == "DELETE_COMPLETE", stack.reasons()
        assert groups() == []
        assert not [r for r in cloud.requests[calls_before:] if r.command.endswith("VirtualMachine")
                    and not r.command.startswith("list")]
        assert [cloud.vm(vm).state for vm in (*dbs, web, other)] == ["Stopped"] * 4


def test_an_ecs_create_naming_an_ack_node_or_a_missing_instance_fails_naming_both_and_starts_nothing(
        emulator: StackEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """§5 on ECS through the stack: an ACK node inside the Tag group (its `ack.aliyun.com` tag) and a
    direct instance the account does not have are both refused at Create; nothing is started."""
    sdk("alibabacloud_ecs20140526.client")
    with LocalECS(timings=EcsTimings.uniform(0.05), kill_grace=0.3) as ecs:
        configure(monkeypatch, ecs_environment(ecs))
        db = ecs.add_instance("db", tags={"tier": "db"})
        node = ecs.add_instance("node", tags={"tier": "db"})
        ecs.tag_instance(node, {"ack.aliyun.com": "c-k8s", "acs:autoscaling:scalingGroupId": "asg-pool"})
        stack = Stack(emulator, "refused")
        text = template("ecs", {"Name": "dbs", "Tag": {"Key": "tier", "Value": "db"}}, "i-not-in-this-account", 1, 2)
        created = stack.create(text, disable_rollback=True)
        assert created.status == "CREATE_FAILED"
        (reason,) = [e.reason for e in stack.events if e.logical_id == "Tiers" and e.status == "CREATE_FAILED"]
        assert (f"ResourceProperties.Members[0].InstanceGroup: instance {node!r} (in instance group 'dbs') cannot be a "
                "member: it is a node of ACK (Kubernetes) cluster 'c-k8s' (tag ack.aliyun.com)") in reason, reason
        assert "ResourceProperties.Members[1].Instance" in reason and "i-not-in-this-account" in reason, reason
        assert db not in reason
        assert not [r for r in ecs.requests if r.action == "StartInstances"] and groups() == []
