"""Both resource types through the framework in process, against a real ResponseURL server: the
Reasons of refused Creates (the plan over the deadline, guest agents, unknown instances, claims),
Data, events of an Update, Delete, and the manifest. Groups here are Stopped, so no process runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from crhelper import Provider
from crhelper.testing import ResponseServer, make_event
from handlers.bootgroups import events as ev
from handlers.bootgroups.backend_for import BackendUnavailable, make_backend
from handlers.bootgroups.provider import build_provider, group_store

REPO = Path(__file__).resolve().parents[2]
GROUP, INSTANCE = "Custom::InstanceBootGroup", "Custom::LocalInstance"


class Stack:
    def __init__(self, provider: Provider, server: ResponseServer) -> None:
        self.provider, self.server, self.stack_id = provider, server, "stack-1"

    def send(self, request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
        kw.setdefault("stack_id", self.stack_id)
        event = self.server.attach(make_event(request_type, resource_type, props, **kw))
        self.provider.handle(event)
        return self.server.wait_for(event["RequestId"], timeout=10)

    def ok(self, request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
        body = self.send(request_type, resource_type, props, **kw)
        assert body["Status"] == "SUCCESS", body.get("Reason")
        return body

    def instance(self, name: str, **props: Any) -> str:
        body = self.ok("Create", INSTANCE, {"Command": ["sleep", "60"], "Ports": [5432], **props}, logical_resource_id=name)
        return str(body["PhysicalResourceId"])


@pytest.fixture
def stack(response_server: ResponseServer) -> Any:
    provider = build_provider()
    yield Stack(provider, response_server)
    provider.close()


def group(name: str, *members: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {"Name": name, "DesiredState": "Stopped", "Members": list(members), **props}


def test_a_plan_whose_worst_case_exceeds_the_deadline_is_refused_with_both_numbers(stack: Stack) -> None:
    refused = stack.send("Create", GROUP, group("big", {"Instance": "i-1", "BootOrder": 0},
                                                Settings={"ReadinessTimeoutSeconds": 3600, "MaxRetryAttempts": 20}))
    assert refused["Status"] == "FAILED"
    # 1 tier × (InitialDelay 30 (default) + 21×3600 + 20×poll 10 (default)) = 75,830 s against 43,200 s
    assert "the plan may take 75,830 s but Custom::InstanceBootGroup's deadline is 43,200 s" in refused["Reason"]
    assert "ReadinessTimeoutSeconds" in refused["Reason"]


def test_a_local_instance_registers_stopped_with_its_attributes_and_goes_on_delete(stack: Stack) -> None:
    body = stack.ok("Create", INSTANCE, {"Command": "exec sleep 60", "Host": "127.0.0.5", "Ports": [80, 443]},
                    logical_resource_id="Web")
    instance_id = body["PhysicalResourceId"]
    assert instance_id.startswith("li-web-")
    assert body["Data"] == {"InstanceId": instance_id, "Host": "127.0.0.5", "Ports": [80, 443], "State": "Stopped"}
    record = group_store().get_instance(instance_id)
    assert record is not None and record.shell and record.argv == ["exec sleep 60"] and Path(record.cwd).is_dir()
    assert record.owner == "stack-1/Web"
    bad = stack.send("Create", INSTANCE, {"Command": [], "Ports": [0], "WorkingDirectory": "rel"})
    assert bad["Status"] == "FAILED"
    assert "ResourceProperties.Command: must not be empty" in bad["Reason"]
    assert "ResourceProperties.Ports[0]: must be a port number 1-65535" in bad["Reason"]
    stack.ok("Delete", INSTANCE, {}, physical_resource_id=instance_id)
    assert group_store().get_instance(instance_id) is None
    stack.ok("Delete", INSTANCE, {}, physical_resource_id=instance_id)  # again: nothing to do


def test_members_must_be_registered_instances_and_guest_agent_rules_need_an_agent(stack: Stack) -> None:
    db = stack.instance("Db")
    refused = stack.send("Create", GROUP, group(
        "g", {"Instance": db, "BootOrder": 0, "ReadinessRules": [{"Type": "GuestAgentLiveness"}]},
        {"Instance": "li-nope", "BootOrder": 1}, {"Instance": db, "BootOrder": 2}))
    assert refused["Status"] == "FAILED"
    reason = refused["Reason"]
    assert (f"ResourceProperties.Members[0].ReadinessRules[0].Type: GuestAgentLiveness needs a KVM instance with a guest "
            f"agent; instance {db!r} has none") in reason
    assert "ResourceProperties.Members[1].Instance: no Custom::LocalInstance 'li-nope' is registered" in reason
    assert f"ResourceProperties.Members[2].Instance: instance {db!r} is already a member of this boot group" in reason
    assert group_store().list_groups() == []


def test_create_update_delete_of_a_stopped_group_with_events_and_claims(stack: Stack) -> None:
    db, app = stack.instance("Db"), stack.instance("App")
    props = group("shop", {"Instance": db, "BootOrder": 0, "ReadinessRules": [{"Type": "PortCheck", "Details": {"port": 5432}}]},
                  {"Instance": app, "BootOrder": 1})
    created = stack.ok("Create", GROUP, props, request_id="REQ-1", logical_resource_id="Tiers")
    group_id = created["PhysicalResourceId"]
    data = created["Data"]
    assert data["GroupId"] == group_id and data["State"] == "Stopped" and data["Backend"] == "local"
    assert data["Tiers"] == [{"Order": 0, "Members": [db]}, {"Order": 1, "Members": [app]}]
    assert data["Readiness"] == {db: "NotReady", app: "NotReady"}
    assert data["Settings"] == {"ReadinessTimeoutSeconds": 300, "MaxRetryAttempts": 5, "InitialDelaySeconds": 30,
                                "RebootOnRetry": False}
    assert len(json.dumps(data)) < 4096
    again = stack.ok("Create", GROUP, props, request_id="REQ-1", logical_resource_id="Tiers")  # a redelivery
    assert again["PhysicalResourceId"] == group_id and len(group_store().list_groups()) == 1

    taken = stack.send("Create", GROUP, group("other", {"Instance": app, "BootOrder": 0}), logical_resource_id="Other")
    assert taken["Status"] == "FAILED"
    assert f"instance {app!r} is already a member of boot group 'shop'" in taken["Reason"]

    reordered = dict(props, Members=[{"Instance": db, "BootOrder": 3}, {"Instance": app, "BootOrder": 1}])
    updated = stack.ok("Update", GROUP, reordered, old_properties=props, physical_resource_id=group_id)
    assert updated["Data"]["Tiers"] == [{"Order": 1, "Members": [app]}, {"Order": 3, "Members": [db]}]
    kinds = [e.type for e in group_store().events(group_id)]
    assert kinds[:2] == [ev.CREATE, ev.MEMBER_ADD] and ev.RULE_CREATE in kinds
    assert kinds[-4:] == [ev.UPDATE, ev.MEMBER_REORDER, ev.RULE_DELETE, ev.STOP]  # db's rule was left out

    held = stack.send("Delete", INSTANCE, {}, physical_resource_id=app)
    assert held["Status"] == "FAILED" and "is a member of boot group 'shop'" in held["Reason"]
    stack.ok("Delete", GROUP, reordered, physical_resource_id=group_id)
    assert group_store().get_group(group_id) is None and group_store().claims([f"instance:{app}"]) == {}
    assert group_store().events(group_id)[-1].type == ev.DELETE
    stack.ok("Delete", GROUP, reordered, physical_resource_id=group_id)  # unknown now: nothing to do
    stack.ok("Create", GROUP, group("other", {"Instance": app, "BootOrder": 0}), logical_resource_id="Other")


def test_an_unknown_or_unbuilt_backend_is_a_precise_failure() -> None:
    with pytest.raises(BackendUnavailable, match="'nope' is not a boot-group backend"):
        make_backend("nope", group_store(), {})
    for name, module in (("ecs", "backend_ecs"), ("cloudstack", "backend_cloudstack")):
        if importlib.util.find_spec(f"handlers.bootgroups.{module}") is None:
            with pytest.raises(BackendUnavailable, match=f"the {name} backend is not built in this version"):
                make_backend(name, group_store(), {})


def test_the_manifest_tells_the_truth() -> None:
    from crhelper.loading import load_provider
    from crhelper.manifest import installed_manifests
    from handlers.bootgroups.manifest import manifest
    from handlers.bootgroups.state import STATE_DIR

    assert "bootgroups" in [m.name for m in installed_manifests()]
    provider = load_provider(manifest.handler)
    assert sorted(provider.types) == sorted(manifest.resource_types)
    assert manifest.state_dir == STATE_DIR
    sources = "".join(path.read_text(encoding="utf-8") for path in (REPO / "handlers" / "bootgroups").glob("*.py")
                      if path.name != "manifest.py")
    assert [v.name for v in manifest.environment if v.name not in sources] == []


@pytest.mark.parametrize("name_of", [
    pytest.param(lambda index: f"tier-{index}", id="short names: every tier listed"),
    pytest.param(lambda index: f"{index}-" + "w" * 253, id="255-character names: tiers as order:count"),
    pytest.param(lambda index: f"{index}-" + "界" * 253, id="255 CJK characters: readiness as counts"),
])
def test_data_of_the_largest_legal_group_stays_within_4096_bytes_keeping_group_id_and_tiers(name_of: Any) -> None:
    from crhelper.operations import ManualClock
    from handlers.bootgroups.provider import DATA_BUDGET, group_data
    from handlers.bootgroups.settings import GroupSettings
    from handlers.bootgroups.state import GroupRecord
    from handlers.bootgroups.validation import MAX_NAME
    from bootgroup_fakes import FakeBackend, drive, members_of, new_run

    rules = [{"Type": "Ping"}, {"Type": "PortCheck", "Details": {"port": 80}}, {"Type": "PortCheck", "Details": {"port": 443}},
             {"Type": "MemberQuorum", "Details": {"thresholdtype": "PERCENTAGE", "thresholdvalue": 90}}]
    props = {"Members": [{"InstanceGroup": {"Name": name_of(index), "Instances": [f"vm-{index}-{n:03d}" for n in range(50)]},
                          "BootOrder": index, "ReadinessRules": rules,
                          "InstanceRules": {f"vm-{index}-000": [{"Type": "GuestAgentLiveness"}]}} for index in range(10)]}
    members = members_of(props)  # 10 members (the limit), 500 instances, 5 rules each
    clock = ManualClock()
    backend = FakeBackend(clock)
    for member in members:
        for vm in member.group.instances or ():  # type: ignore[union-attr]
            backend.add(vm)
    settings = GroupSettings(initial_delay=0.0)
    run, outcome, _ = drive(new_run("start", members, clock, settings=settings), backend, clock)
    assert outcome.ok, outcome.reason
    record = GroupRecord(group_id="ibg-" + "g" * 40 + "-0123456789", name=name_of(0)[:MAX_NAME], members=members,
                         settings=settings, cache=dict(run.cache))
    data = group_data(record, run, backend)
    size = len(json.dumps(data, ensure_ascii=False).encode())
    assert size <= DATA_BUDGET < 4096
    assert data["GroupId"] == record.group_id and data["Name"] == record.name
    keys = [member.key for member in members]
    if isinstance(data["Tiers"][0], dict):
        assert data["Tiers"] == [{"Order": index, "Members": [key]} for index, key in enumerate(keys)]
    else:
        assert data["Tiers"] == [f"{index}:1" for index in range(10)]
    assert data["Readiness"] in ({key: "Ready" for key in keys}, {"Ready": 10})
    shapes = (isinstance(data["Tiers"][0], dict), set(data["Readiness"]) == {"Ready"})
    expected = {"tier-0": (True, False), "0-" + "w" * 253: (False, False), "0-" + "界" * 253: (False, True)}[keys[0]]
    assert shapes == expected


def test_a_name_past_255_characters_is_refused(stack: Stack) -> None:
    refused = stack.send("Create", GROUP, group("n" * 256, {"Instance": "i-1", "BootOrder": 0}))
    assert refused["Status"] == "FAILED"
    assert "ResourceProperties.Name: must be at most 255 characters (it is 256)" in refused["Reason"]
