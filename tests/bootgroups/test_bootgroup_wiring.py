"""How the provider wires its cloud backends (issue 12): CloudStack's connection from the template
(the Secret never shown), GuestAgentLiveness refused at Create on a non-KVM CloudStack member and on
an ECS instance whose Cloud Assistant says "false", the ECS backend built from the invocation's FC
context (its STS key; no credentials in the environment) and the request's region, the power
changes it saw kept with the group, and the owner of claims and names per backend."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from bootgroup_fakes import no_cloud_environment
from crhelper import Provider
from crhelper.cloud.credentials import Credentials
from crhelper.errors import Failure
from crhelper.invocation import fc_context, run_in_invocation
from crhelper.testing import ResponseServer, make_event
from handlers.bootgroups.backend_for import Wiring, make_backend, owner_of
from handlers.bootgroups.provider import build_provider, group_store

GROUP = "Custom::InstanceBootGroup"


class Stack:
    def __init__(self, provider: Provider, server: ResponseServer) -> None:
        self.provider, self.server = provider, server

    def send(self, request_type: str, props: dict[str, Any], *, context: object | None = None,
             **kw: Any) -> dict[str, Any]:
        event = self.server.attach(make_event(request_type, GROUP, props, **kw))
        self.provider.fc_handler(event, context)
        return self.server.wait_for(event["RequestId"], timeout=20)


@pytest.fixture
def stack(response_server: ResponseServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    no_cloud_environment(monkeypatch)
    monkeypatch.setenv("CRHELPER_BOOTGROUP_POLL_INTERVAL", "0.05")
    provider = build_provider()
    yield Stack(provider, response_server)
    provider.close()


def guest_agent_member(vm: str) -> dict[str, Any]:
    return {"Instance": vm, "BootOrder": 0, "ReadinessRules": [{"Type": "GuestAgentLiveness"}]}


# --- pure -------------------------------------------------------------------------------------------


def test_the_owner_is_the_home_locally_the_account_on_ecs_and_the_key_hash_on_cloudstack(tmp_path: Path) -> None:
    env = {"CRHELPER_HOME": str(tmp_path)}
    assert owner_of("local", env) == str(tmp_path)
    assert owner_of("ecs", env, account="1234", context=SimpleNamespace(account_id="999")) == "ecs:1234"
    assert owner_of("ecs", env, context=SimpleNamespace(account_id="999")) == "ecs:999"
    with pytest.raises(Failure, match="cannot tell the account"):
        owner_of("ecs", env)
    backend = make_backend("cloudstack", group_store(), {}, Wiring(connection={
        "Endpoint": "http://127.0.0.1:9/client/api", "Key": "the-api-key", "Secret": "s3cr3t"}))
    owner = owner_of("cloudstack", env, backend=backend)
    assert owner == f"cloudstack:http://127.0.0.1:9/client/api#{hashlib.sha256(b'the-api-key').hexdigest()[:16]}"
    assert "the-api-key" not in owner and "s3cr3t" not in repr(backend)


def test_the_fc_context_is_visible_inside_its_invocation_only() -> None:
    context = SimpleNamespace(account_id="1")
    assert fc_context() is None
    assert run_in_invocation(context, fc_context) is context
    assert fc_context() is None


# --- CloudStack ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cloudstack_from_the_template_refuses_guest_agent_on_a_non_kvm_member(stack: Stack) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("cs")
    from crhelper.local.cloudstack_server import LocalCloudStack
    from crhelper.local.cloudstack_state import CloudStackSettings

    with LocalCloudStack(settings=CloudStackSettings(start_seconds=0.1, stop_seconds=0.1)) as cloud:
        xen = cloud.add_vm("xen-1", hypervisor="XenServer")
        kvm = cloud.add_vm("kvm-1")
        connection = {"Endpoint": cloud.endpoint, "Key": cloud.api_key, "Secret": cloud.secret}
        props = {"Name": "cs", "Backend": "cloudstack", "DesiredState": "Stopped", "CloudStack": connection}
        refused = stack.send("Create", {**props, "Members": [guest_agent_member(xen.id)]})
        assert refused["Status"] == "FAILED"
        assert (f"ResourceProperties.Members[0].ReadinessRules[0].Type: GuestAgentLiveness needs a KVM instance with a "
                f"guest agent; instance {xen.id!r} has none") in refused["Reason"]
        assert cloud.secret not in refused["Reason"] and group_store().find_group("cs") is None
        body = stack.send("Create", {**props, "Members": [guest_agent_member(kvm.id)]})
        assert body["Status"] == "SUCCESS", body.get("Reason")
        assert [r.parameters["id"] for r in cloud.calls("listVirtualMachines") if "id" in r.parameters][:2] == [xen.id, kvm.id]
        # the connection belongs to its own backend, and its values are checked where they are written
        wrong = stack.send("Create", {**props, "Name": "other", "Backend": "local",
                                      "CloudStack": {**connection, "Method": "put", "Timeout": 0}})
        assert wrong["Status"] == "FAILED"
        for expected in ("ResourceProperties.CloudStack: configures the cloudstack backend, but this group runs on local",
                         "ResourceProperties.CloudStack.Method: must be get or post",
                         "ResourceProperties.CloudStack.Timeout: must be a whole number of seconds ≥ 1"):
            assert expected in wrong["Reason"]
        assert cloud.secret not in wrong["Reason"]


# --- ECS ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ecs_runs_on_the_fc_contexts_credentials_and_the_requests_region(stack: Stack,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
    from cloud_support import sdk

    sdk("alibabacloud_ecs20140526.client")
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
    from crhelper.local.ecs_server import EcsTimings, LocalECS

    timings = EcsTimings(pending=0.05, starting=0.05, stopping=0.05, forced_stopping=0.02)
    with LocalECS(timings=timings, kill_grace=0.3) as ecs:
        bare = ecs.add_instance("bare", status="Running", cloud_assistant=False)
        db = ecs.add_instance("db")
        context = SimpleNamespace(credentials=Credentials(ecs.access_key_id, ecs.access_key_secret), account_id="42")
        props = {"Name": "e", "Backend": "ecs", "Ecs": {"Endpoint": ecs.endpoint},
                 "Settings": {"InitialDelaySeconds": 0, "ReadinessTimeoutSeconds": 5}}
        refused = stack.send("Create", {**props, "Members": [guest_agent_member(bare)]}, context=context,
                             RegionId=ecs.region)
        assert refused["Status"] == "FAILED"
        assert f"Members[0].ReadinessRules[0].Type: GuestAgentLiveness needs a KVM instance with a guest agent; " \
               f"instance {bare!r} has none" in refused["Reason"]
        # no credentials in the environment: without the context the backend is refused precisely
        without = stack.send("Create", {**props, "Members": [{"Instance": db, "BootOrder": 0}]}, RegionId=ecs.region)
        assert without["Status"] == "FAILED" and "the ecs backend has no Alibaba Cloud credentials" in without["Reason"]
        body = stack.send("Create", {**props, "Members": [{"Instance": db, "BootOrder": 0}]}, context=context,
                          RegionId=ecs.region)
        assert body["Status"] == "SUCCESS", body.get("Reason")
        assert ecs.instance(db).status == "Running"
        record = group_store().find_group("e")
        assert record is not None and db in record.power_changes
        regions = {r.parameters.get("RegionId") for r in ecs.requests if r.action == "StartInstances"}
        assert regions == {ecs.region}
        wrong_region = stack.send("Create", {**props, "Name": "e2", "Members": [{"Instance": bare, "BootOrder": 0}]},
                                  context=context, RegionId="cn-nowhere")
        assert wrong_region["Status"] == "FAILED", "the request's region is the one called"
        assert any(r.parameters.get("RegionId") == "cn-nowhere" for r in ecs.requests)
