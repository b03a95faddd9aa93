"""The `ecs` node backend against the local ECS endpoint through the real `alibabacloud-ecs20140526`
SDK (every request signed by the SDK and verified by the endpoint; slow: the nodes' commands are
real processes in their sandboxes): nodes created once whatever is retried, found again by a
fresh backend, metadata written on the nodes, service commands with their exit codes, output and
environment, a command killed at its timeout, stop, vertical scaling and a new image, metadata
held for a stopped node, start and delete."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.poll import PollSettings
from crhelper.local.ecs_server import LocalECS
from handlers.appcenter import metadata
from handlers.appcenter.backend_ecs import (
    TAG_CLUSTER, TAG_NODE, TAG_ROLE, TAG_SID, EcsNodeBackend, EcsNodeSettings, client_token,
)
from handlers.appcenter.backend_for import backend_for
from handlers.appcenter.backends import MISSING, RUNNING, STOPPED, BackendError, CommandResult, NodeSpec
from crhelper.cloud.ecs import EcsSettings

for _folder in ("cloud", "ecs"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))
from ecs_support import acs3_request, local_ecs, send  # noqa: E402

pytestmark = pytest.mark.slow

T = TypeVar("T")
IMAGE = "ubuntu_22_04_x64_20G_alibase_20240101.vhd"
CLUSTER = "cl-7f3k2x"
NODES = [NodeSpec("cln-a1", "etcd_node", 1, image="img-qingcloud", cpu=2, memory=4096),
         NodeSpec("cln-a2", "etcd_node", 2, image="img-qingcloud", cpu=2, memory=4096, volume_size=30),
         NodeSpec("cln-b1", "etcd_proxy", 1, image="img-qingcloud", cpu=1, memory=1024)]
IDS = [node.node_id for node in NODES]


@pytest.fixture()
def ecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalECS]:
    yield from local_ecs(monkeypatch, with_sdk=True)


def backend_of(ecs: LocalECS, **nodes: Any) -> EcsNodeBackend:
    settings = EcsSettings(region=ecs.region, endpoint=ecs.endpoint, protocol="http", call_timeout=5.0,
                           poll=PollSettings(initial=0.02, cap=0.1))
    return EcsNodeBackend(settings, Credentials(ecs.access_key_id, ecs.access_key_secret),
                          EcsNodeSettings(**{"image": IMAGE, "agent_timeout": 5.0, "metadata_timeout": 5.0, **nodes}))


def eventually(look: Callable[[], T | None], limit: float = 10.0) -> T:
    ends = time.monotonic() + limit
    while True:
        seen = look()
        if seen is not None:
            return seen
        assert time.monotonic() < ends, "not within the limit"
        time.sleep(0.02)


def running(backend: EcsNodeBackend, node_ids: list[str] = IDS) -> dict[str, Any]:
    return eventually(lambda: (lambda found: found if all(n.state == RUNNING for n in found.values()) else None)(
        backend.describe_nodes(CLUSTER, node_ids)))


def results(backend: EcsNodeBackend, invocation: str) -> dict[str, CommandResult]:
    def look() -> dict[str, CommandResult] | None:
        found = backend.command_results(CLUSTER, invocation)
        return None if any(r is None for r in found.values()) else {k: v for k, v in found.items() if v is not None}
    return eventually(look)


def calls(ecs: LocalECS, action: str) -> list[Any]:
    return [r for r in ecs.requests if r.action == action]


def test_nodes_are_created_once_tagged_sized_and_found_again(ecs: LocalECS) -> None:
    backend = backend_of(ecs)
    created = backend.create_nodes(CLUSTER, NODES)
    assert set(created) == set(IDS) and all(info.instance_id.startswith("i-") for info in created.values())
    runs = calls(ecs, "RunInstances")
    assert [r.parameters["ClientToken"] for r in runs] == [client_token(CLUSTER, node) for node in IDS]
    assert [(r.parameters["InstanceType"], r.parameters["ImageId"]) for r in runs] == [
        ("ecs.c7.large", IMAGE), ("ecs.c7.large", IMAGE), ("ecs.s6-c1m1.small", IMAGE)]
    assert "DataDisk.1.Size" not in runs[0].parameters and runs[1].parameters["DataDisk.1.Size"] == "30"
    instance = ecs.instance(created["cln-b1"].instance_id)
    assert dict(instance.tags) == {TAG_CLUSTER: CLUSTER, TAG_ROLE: "etcd_proxy", TAG_NODE: "cln-b1", TAG_SID: "1"}
    assert (instance.instance_name, instance.host_name) == (f"{CLUSTER}-etcd_proxy-1", "etcd-proxy-1")

    # the step again, from a backend that remembers nothing (another process): nothing new
    again = backend_of(ecs).create_nodes(CLUSTER, NODES)
    assert {k: v.instance_id for k, v in again.items()} == {k: v.instance_id for k, v in created.items()}
    assert len(calls(ecs, "RunInstances")) == 3 and len(ecs.fleet.instances()) == 3
    # a RunInstances retried after its answer was lost (the very request again) returns the same instance
    status, _, body = send(ecs.endpoint, acs3_request(ecs.endpoint, "RunInstances", runs[0].parameters,
                                                      ecs.access_key_id, ecs.access_key_secret))
    assert status == 200 and body["InstanceIdSets"]["InstanceIdSet"] == [created["cln-a1"].instance_id]
    assert len(ecs.fleet.instances()) == 3

    nodes = running(backend)
    assert [nodes[n].ip for n in IDS] == [ecs.instance(created[n].instance_id).private_ip for n in IDS]
    assert all(ip.startswith("127.") for ip in (nodes[n].ip for n in IDS))
    assert backend.describe_nodes(CLUSTER, ["cln-gone"])["cln-gone"].state == MISSING
    assert backend.describe_nodes("cl-other", ["cln-a1"])["cln-a1"].state == MISSING
    assert {(r.signature_method, r.status) for r in ecs.requests} == {("ACS3-HMAC-SHA256", 200)}


def test_commands_run_in_the_node_sandboxes_with_their_metadata(ecs: LocalECS) -> None:
    backend = backend_of(ecs)
    backend.create_nodes(CLUSTER, NODES[:2])
    nodes = running(backend, IDS[:2])
    trees = {node: {"host": {"sid": str(sid), "ip": nodes[node].ip, "role": "etcd_node"},
                    "cluster": {"cluster_id": CLUSTER}, "env": {"web.console.enabled": "it's \"on\""},
                    "hosts": {"etcd_node": {f"i-{n}": {"sid": str(n), "pad": "x" * 9_000} for n in (1, 2)}}}
             for sid, node in enumerate(IDS[:2], start=1)}
    backend.publish_metadata_many(CLUSTER, trees)
    sandboxes = {node: ecs.sandbox(nodes[node].instance_id) for node in IDS[:2]}
    for node, tree in trees.items():   # 18 KB of tree: written by more than one command, whole
        assert json.loads((sandboxes[node] / "appcenter" / "metadata.json").read_text()) == tree
        assert not list((sandboxes[node] / "appcenter").glob("*.b64"))
    writes = [r.parameters["InstanceId.1"] for r in calls(ecs, "RunCommand")]
    a1, a2 = (nodes[node].instance_id for node in IDS[:2])
    assert len(writes) >= 4 and writes == [a1, a2] * (len(writes) // 2), writes  # chunks, the nodes side by side
    assert len(calls(ecs, "DescribeCloudAssistantStatus")) == 1
    backend.publish_metadata_many(CLUSTER, trees)                  # what they have: nothing written again
    assert len(calls(ecs, "RunCommand")) == len(writes)
    ecs.clear_requests()

    cmd = ('echo "sid=$APPCENTER_HOST_SID console=$APPCENTER_ENV_WEB_CONSOLE_ENABLED service=$SERVICE"; pwd; '
           'python3 -c "import json, os; print(json.load(open(os.environ[\'METADATA_FILE\']))[\'host\'][\'ip\'])"; '
           '[ "$APPCENTER_HOST_SID" = 1 ] || { echo "not the first" >&2; exit 3; }')
    backend.start_command(CLUSTER, "create-init-0", IDS[:2], cmd, timeout=10, env={"SERVICE": "init"})
    backend.start_command(CLUSTER, "create-init-0", IDS[:2], cmd, timeout=10, env={"SERVICE": "init"})  # a retry
    assert len(calls(ecs, "RunCommand")) == 1
    assert not calls(ecs, "DescribeCloudAssistantStatus")  # the agents were seen running by the metadata writes
    reader = backend_of(ecs)
    done = results(reader, "create-init-0")   # read by a backend that did not start it
    listed = len(calls(ecs, "DescribeInstances"))
    assert reader.command_results(CLUSTER, "create-init-0") == done
    assert len(calls(ecs, "DescribeInstances")) == listed    # its nodes known: results only
    assert set(done) == set(IDS[:2])
    first, second = done["cln-a1"], done["cln-a2"]
    assert first.ok and first.output.splitlines() == [
        "sid=1 console=it's \"on\" service=init", str(sandboxes["cln-a1"]), nodes["cln-a1"].ip]
    assert (second.exit_code, second.ok) == (3, False)
    assert second.output.splitlines() == ["sid=2 console=it's \"on\" service=init", str(sandboxes["cln-a2"]),
                                          nodes["cln-a2"].ip, "not the first"]
    run = calls(ecs, "RunCommand")[0].parameters
    assert (run["Timeout"], run["Type"], run["Name"]) == ("10", "RunShellScript", "create-init-0")
    assert {run["Tag.1.Value"], run["Tag.2.Value"]} == {CLUSTER, "create-init-0"}
    assert all(r.parameters.get("ContentEncoding") == "Base64" for r in calls(ecs, "DescribeInvocationResults"))

    with pytest.raises(BackendError) as raised:
        backend.command_results(CLUSTER, "never-started")
    assert "never-started" in str(raised.value)
    with pytest.raises(BackendError) as raised:
        backend.start_command(CLUSTER, "x", ["cln-zz"], "true", timeout=5, env={})
    assert "cln-zz" in str(raised.value)


def test_a_command_past_its_timeout_is_killed_and_reads_timed_out(ecs: LocalECS) -> None:
    backend = backend_of(ecs)
    backend.create_nodes(CLUSTER, NODES[:1])
    node = running(backend, IDS[:1])["cln-a1"]
    marker = ecs.sandbox(node.instance_id) / "finished"
    began = time.monotonic()
    backend.start_command(CLUSTER, "start-0", ["cln-a1"], f"echo begun; sleep 30; touch {marker}", timeout=1, env={})
    result = results(backend, "start-0")["cln-a1"]
    took = time.monotonic() - began
    assert result.timed_out and not result.ok and result.output.startswith("begun")
    assert took < 5, took
    time.sleep(0.2)
    assert not marker.exists()


def test_stop_resize_start_and_delete(ecs: LocalECS) -> None:
    backend = backend_of(ecs)
    backend.create_nodes(CLUSTER, NODES[:2])
    nodes = running(backend, IDS[:2])
    bigger = NodeSpec("cln-a1", "etcd_node", 1, cpu=4, memory=16384)
    with pytest.raises(BackendError) as raised:
        backend.resize_nodes(CLUSTER, [bigger])
    assert "only while it is Stopped" in str(raised.value) and "Running" in str(raised.value)

    backend.stop_nodes(CLUSTER, IDS[:2])
    backend.stop_nodes(CLUSTER, IDS[:2])                      # Stopping already: left alone
    assert len(calls(ecs, "StopInstances")) == 1
    eventually(lambda: all(n.state == STOPPED for n in backend.describe_nodes(CLUSTER, IDS[:2]).values()) or None)
    backend.resize_nodes(CLUSTER, [bigger, NodeSpec("cln-a2", "etcd_node", 2, cpu=2, memory=4096, volume_size=30)])
    assert ecs.instance(nodes["cln-a1"].instance_id).instance_type == "ecs.g7.xlarge"
    assert [r.parameters["InstanceType"] for r in calls(ecs, "ModifyInstanceSpec")] == ["ecs.g7.xlarge"]  # a2 unchanged
    bigger_disk = NodeSpec("cln-a2", "etcd_node", 2, cpu=2, memory=4096, volume_size=50)
    backend.resize_nodes(CLUSTER, [bigger_disk])              # the data disk grows: ResizeDisk, offline when Stopped
    backend.resize_nodes(CLUSTER, [bigger_disk])              # already so: nothing sent
    assert [(r.parameters["NewSize"], r.parameters["Type"]) for r in calls(ecs, "ResizeDisk")] == [("50", "offline")]
    data = [d for d in ecs.fleet.disks() if d.instance_id == nodes["cln-a2"].instance_id and d.disk_type == "data"]
    assert [d.size for d in data] == [50]
    with pytest.raises(BackendError) as raised:
        backend.resize_nodes(CLUSTER, [NodeSpec("cln-a2", "etcd_node", 2, cpu=2, memory=4096, volume_size=40)])
    assert "cannot shrink" in str(raised.value) and "50 GiB" in str(raised.value)
    with pytest.raises(BackendError) as raised:            # a node created without a volume has no disk to grow
        backend.resize_nodes(CLUSTER, [NodeSpec("cln-a1", "etcd_node", 1, cpu=4, memory=16384, volume_size=50)])
    assert "no data disk" in str(raised.value)

    upgraded = NodeSpec("cln-a1", "etcd_node", 1, image="m-upgraded", cpu=4, memory=16384)
    backend.resize_nodes(CLUSTER, [upgraded])                 # an upgrade's new image: the system disk replaced
    backend.resize_nodes(CLUSTER, [upgraded])                 # already so: nothing sent
    assert [r.parameters["ImageId"] for r in calls(ecs, "ReplaceSystemDisk")] == ["m-upgraded"]
    assert ecs.instance(nodes["cln-a1"].instance_id).image_id == "m-upgraded"

    # metadata published while a node is stopped reaches it before its next command
    tree = {"host": {"sid": "1"}, "env": {"greeting": "while stopped"}}
    backend.publish_metadata(CLUSTER, "cln-a1", tree)
    assert not calls(ecs, "RunCommand")
    with pytest.raises(BackendError) as raised:
        backend.start_command(CLUSTER, "too-early", ["cln-a1"], "true", timeout=5, env={})
    assert "running instances only" in str(raised.value) and "cln-a1 (Stopped)" in str(raised.value)
    backend.start_nodes(CLUSTER, IDS[:2])
    running(backend, IDS[:2])
    agent_checks = len(calls(ecs, "DescribeCloudAssistantStatus"))
    backend.start_command(CLUSTER, "start-0", ["cln-a1"], 'echo "$APPCENTER_ENV_GREETING"', timeout=5, env={})
    assert results(backend, "start-0")["cln-a1"].output == "while stopped\n"
    assert len(calls(ecs, "DescribeCloudAssistantStatus")) > agent_checks  # started again: asked again
    writes = len(calls(ecs, "RunCommand"))
    backend.publish_metadata(CLUSTER, "cln-a1", tree)       # the tree it has: not written again
    assert len(calls(ecs, "RunCommand")) == writes

    backend.delete_nodes(CLUSTER, IDS[:2] + ["cln-never"])
    assert ecs.fleet.instances() == []
    assert {n.state for n in backend.describe_nodes(CLUSTER, IDS[:2]).values()} == {MISSING}
    backend.delete_nodes(CLUSTER, IDS[:2])                    # gone already: done, nothing sent
    deletes = calls(ecs, "DeleteInstances")
    assert len(deletes) == 1 and deletes[0].parameters["Force"] == "True"
    with pytest.raises(BackendError) as raised:
        backend.start_nodes(CLUSTER, IDS[:1])
    assert "no instance for node(s) cln-a1" in str(raised.value)


def test_backend_for_builds_it_from_the_environment(ecs: LocalECS, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "ALIBABA_CLOUD_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CRHELPER_ECS_ENDPOINT", ecs.endpoint)
    monkeypatch.setenv("CRHELPER_ECS_REGION", ecs.region)
    monkeypatch.setenv("CRHELPER_POLL_INITIAL", "0.02")   # the retries' back-off, a setting
    monkeypatch.setenv("CRHELPER_POLL_CAP", "0.1")
    with pytest.raises(BackendError) as raised:
        backend_for("ecs")
    assert "credentials" in str(raised.value)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", ecs.access_key_id)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", ecs.access_key_secret)
    monkeypatch.setenv("CRHELPER_APPCENTER_ECS_IMAGE", "m-from-env")
    backend = backend_for("ecs")
    assert backend.name == "ecs" and isinstance(backend, EcsNodeBackend)
    assert backend.ecs.protocol == "http" and backend.nodes.image == "m-from-env"
    backend.create_nodes(CLUSTER, NODES[:1])
    assert calls(ecs, "RunInstances")[0].parameters["ImageId"] == "m-from-env"
    ecs.inject_fault("DescribeInstances", status=503, code="ServiceUnavailable", times=2)  # retried
    assert backend.describe_nodes(CLUSTER, ["cln-a1"])["cln-a1"].instance_id
    ecs.inject_fault("DescribeInstances", status=403, code="Forbidden.RAM", message="not allowed")
    with pytest.raises(BackendError) as raised:
        backend.describe_nodes(CLUSTER, ["cln-a1"])
    assert str(raised.value).startswith(f"ECS DescribeInstances of cluster {CLUSTER} failed: Forbidden.RAM (HTTP 403)")
    assert ecs.access_key_secret not in str(raised.value)
    assert metadata.ENV_FILE == "METADATA_FILE"  # the name the scripts export (shared with the local backend)
    backend.close()
