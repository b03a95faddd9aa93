"""§5 membership on the cloud backends, through the provider in process against the real local ECS
and CloudStack endpoints (real SDKs, signed calls): one boot group per item across stacks for an
ECS Tag group and a CloudStack Id group, claimed by their identity and by the instances they hold
(B2); an instance that does not exist for these credentials refused at Create even with
DesiredState Stopped (B8); ineligible instances refused (B10); an unreachable backend refused with
what to fix."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from bootgroup_fakes import no_cloud_environment
from crhelper import Provider
from crhelper.cloud.credentials import Credentials
from crhelper.testing import ResponseServer, make_event
from handlers.bootgroups.provider import build_provider, group_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
from cloud_support import sdk  # noqa: E402  (the optional-SDK rule: skipped locally, required on CI)

pytestmark = pytest.mark.slow
GROUP = "Custom::InstanceBootGroup"


class Stacks:
    """Requests of several stacks (one provider, one store), each answered at a real ResponseURL."""

    def __init__(self, provider: Provider, server: ResponseServer, props: dict[str, Any], context: object | None,
                 **request: Any) -> None:
        self.provider, self.server, self.props, self.context, self.request = provider, server, props, context, request

    def send(self, request_type: str, stack: str, name: str, *members: dict[str, Any], **kw: Any) -> dict[str, Any]:
        props = {**self.props, "Name": name, "DesiredState": "Stopped", "Members": list(members)}
        event = self.server.attach(make_event(request_type, GROUP, props, stack_id=stack, **{**self.request, **kw}))
        self.provider.fc_handler(event, self.context)
        return self.server.wait_for(event["RequestId"], timeout=20)

    def create(self, stack: str, name: str, *members: dict[str, Any]) -> dict[str, Any]:
        return self.send("Create", stack, name, *members)

    def refused(self, stack: str, name: str, *members: dict[str, Any]) -> str:
        body = self.create(stack, name, *members)
        assert body["Status"] == "FAILED", body
        assert group_store().find_group(name) is None
        return str(body["Reason"])

    def delete(self, stack: str, name: str, physical_id: str) -> None:
        body = self.send("Delete", stack, name, physical_resource_id=physical_id)
        assert body["Status"] == "SUCCESS", body.get("Reason")


def vm(instance: str) -> dict[str, Any]:
    return {"Instance": instance, "BootOrder": 0}


def tag_group(name: str, value: str, order: int = 1) -> dict[str, Any]:
    return {"InstanceGroup": {"Name": name, "Tag": {"Key": "tier", "Value": value}}, "BootOrder": order}


def id_group(name: str, group_id: str, order: int = 1) -> dict[str, Any]:
    return {"InstanceGroup": {"Name": name, "Id": group_id}, "BootOrder": order}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def provider(response_server: ResponseServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    no_cloud_environment(monkeypatch)
    built = build_provider()
    yield built
    built.close()


@pytest.fixture
def ecs() -> Iterator[Any]:
    sdk("alibabacloud_ecs20140526.client")
    from crhelper.local.ecs_server import EcsTimings, LocalECS

    with LocalECS(timings=EcsTimings(pending=0.05, starting=0.05, stopping=0.05, forced_stopping=0.02)) as server:
        yield server


@pytest.fixture
def cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("CRHELPER_BOOTGROUP_CLOUDSTACK_RETRY_SECONDS", "0.5")  # an endpoint that is down: retried briefly
    if os.environ.get("CI") != "true":
        pytest.importorskip("cs")
    from crhelper.local.cloudstack_server import LocalCloudStack
    from crhelper.local.cloudstack_state import CloudStackSettings

    with LocalCloudStack(settings=CloudStackSettings(start_seconds=0.05, stop_seconds=0.05)) as server:
        yield server


def ecs_stacks(provider: Provider, response_server: ResponseServer, ecs: Any, endpoint: str | None = None) -> Stacks:
    context = SimpleNamespace(credentials=Credentials(ecs.access_key_id, ecs.access_key_secret), account_id="42")
    return Stacks(provider, response_server, {"Backend": "ecs", "Ecs": {"Endpoint": endpoint or ecs.endpoint}}, context,
                  RegionId=ecs.region)


def test_an_ecs_tag_group_is_one_item_by_its_tag_and_holds_the_instances_it_selects(
        provider: Provider, response_server: ResponseServer, ecs: Any) -> None:
    x = ecs.add_instance("x", tags={"tier": "web"})
    y = ecs.add_instance("y")
    stacks = ecs_stacks(provider, response_server, ecs)
    a = stacks.create("stack-a", "a", vm(x))
    assert a["Status"] == "SUCCESS", a.get("Reason")
    # a VM tagged into B's group while it is a direct member of A
    reason = stacks.refused("stack-b", "b", tag_group("web", "web"))
    assert (f"ResourceProperties.Members[0].InstanceGroup: instance {x!r} (in instance group 'web') is already a member "
            f"of boot group 'a'") in reason
    stacks.delete("stack-a", "a", a["PhysicalResourceId"])
    b = stacks.create("stack-b", "b", tag_group("web", "web"), tag_group("spare", "none", 2))  # "none" matches nothing
    assert b["Status"] == "SUCCESS", b.get("Reason")
    record = group_store().find_group("b")
    assert record is not None
    claims = group_store().for_owner(record.owner).claims(["group:tag:tier=web", "group:tag:tier=none", f"instance:{x}"])
    assert claims == {"group:tag:tier=web": "b", "group:tag:tier=none": "b", f"instance:{x}": "b"}
    # the same tag under another Name: refused by the tag's identity, even for a tag that selects nothing
    reason = stacks.refused("stack-c", "c", tag_group("frontend", "web"), tag_group("other", "none", 2))
    assert "ResourceProperties.Members[0].InstanceGroup: instance group 'frontend' is already a member of boot group 'b'" in reason
    assert "ResourceProperties.Members[1].InstanceGroup: instance group 'other' is already a member of boot group 'b'" in reason
    assert f"instance {x!r} (in instance group 'frontend') is already a member of boot group 'b'" in reason
    # a VM tagged into B's group after B was created: refused as a member of a member group
    ecs.tag_instance(y, {"tier": "web"})
    reason = stacks.refused("stack-d", "d", vm(y))
    assert (f"ResourceProperties.Members[0].Instance: instance {y!r} belongs to instance group 'tag:tier=web', a member "
            f"of boot group 'b'") in reason
    # InstanceRules on an instance the tag does not select
    rules = {**tag_group("web2", "web2"), "InstanceRules": {x: [{"Type": "Ping"}]}}
    reason = stacks.refused("stack-e", "e", rules)
    assert f"ResourceProperties.Members[0].InstanceRules.{x}: instance {x!r} is not in instance group 'web2'" in reason


def test_an_ecs_instance_that_does_not_exist_or_may_not_join_is_refused_at_create(
        provider: Provider, response_server: ResponseServer, ecs: Any) -> None:
    real = ecs.add_instance("real")
    node = ecs.add_instance("node")
    ecs.tag_instance(node, {"ack.aliyun.com": "c-cluster"})
    stacks = ecs_stacks(provider, response_server, ecs)
    listed = {"InstanceGroup": {"Name": "pair", "Instances": [real, "i-listed-nowhere"]}, "BootOrder": 1}
    reason = stacks.refused("stack-a", "a", vm("i-nowhere"), listed, {"Instance": node, "BootOrder": 2})
    assert ("ResourceProperties.Members[0].Instance: no ECS instance 'i-nowhere' for these credentials (it may be in "
            "another account or region)") in reason
    assert "ResourceProperties.Members[1].InstanceGroup.Instances[1]: no ECS instance 'i-listed-nowhere'" in reason
    assert f"ResourceProperties.Members[2].Instance: instance {node!r} cannot be a member" in reason
    assert real not in reason.replace(f"Instances[{real}", "")
    assert not [r for r in ecs.requests if r.action in ("StartInstances", "StopInstances")]
    # an endpoint nobody answers: what to fix, not a traceback
    down = ecs_stacks(provider, response_server, ecs, endpoint=f"127.0.0.1:{closed_port()}")
    reason = down.refused("stack-b", "b", vm(real))
    assert reason.startswith("the ecs backend could not describe the instances the template names: "), reason
    assert "check Ecs.Endpoint (or CRHELPER_ECS_ENDPOINT), the region, and the credentials" in reason
    assert "Traceback" not in reason and ecs.access_key_secret not in reason


def cloud_stacks(provider: Provider, response_server: ResponseServer, cloud: Any, endpoint: str | None = None) -> Stacks:
    connection = {"Endpoint": endpoint or cloud.endpoint, "Key": cloud.api_key, "Secret": cloud.secret}
    return Stacks(provider, response_server, {"Backend": "cloudstack", "CloudStack": connection}, None)


def test_a_cloudstack_id_group_is_one_item_by_its_uuid_under_any_name(
        provider: Provider, response_server: ResponseServer, cloud: Any) -> None:
    w1 = cloud.add_vm("w1", group="web")
    web = next(g for g in cloud.state.groups.values() if g.name == "web")
    empty = cloud.add_group("empty")
    stacks = cloud_stacks(provider, response_server, cloud)
    a = stacks.create("stack-a", "a", id_group("web", web.id), id_group("spare", empty.id, 2))
    assert a["Status"] == "SUCCESS", a.get("Reason")
    reason = stacks.refused("stack-b", "b", id_group("frontend", web.id), id_group("other", empty.id, 2))
    assert "ResourceProperties.Members[0].InstanceGroup: instance group 'frontend' is already a member of boot group 'a'" in reason
    assert "ResourceProperties.Members[1].InstanceGroup: instance group 'other' is already a member of boot group 'a'" in reason
    reason = stacks.refused("stack-c", "c", vm(w1.id))
    assert f"ResourceProperties.Members[0].Instance: instance {w1.id!r} is already a member of boot group 'a'" in reason
    # an Id these keys do not see, a VM that does not exist, a VNF appliance
    vnf = cloud.add_vm("vnf", template_type="VNF")
    reason = stacks.refused("stack-d", "d", id_group("nowhere", "6a1f0000-0000-4000-8000-000000000000"),
                            vm("0b5e0000-0000-4000-8000-000000000000"), {"Instance": vnf.id, "BootOrder": 2})
    assert "ResourceProperties.Members[0].InstanceGroup: instance group Id '6a1f0000-0000-4000-8000-000000000000'" in reason
    assert ("ResourceProperties.Members[1].Instance: no CloudStack VM '0b5e0000-0000-4000-8000-000000000000' for these "
            "credentials (it may belong to another account)") in reason
    assert f"ResourceProperties.Members[2].Instance: instance {vnf.id!r} cannot be a member" in reason
    assert not cloud.calls("startVirtualMachine") and not cloud.calls("stopVirtualMachine")
    down = cloud_stacks(provider, response_server, cloud, endpoint=f"http://127.0.0.1:{closed_port()}/client/api")
    reason = down.refused("stack-e", "e", vm(vnf.id))
    assert reason.startswith("the cloudstack backend could not "), reason
    assert "check CloudStack.Endpoint and CloudStack.Key/Secret" in reason and cloud.secret not in reason
