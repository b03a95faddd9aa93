"""Custom::AppCluster with `Backend: ecs` through the stack emulator in process, against the local
ECS endpoint (real SDK, signed and verified requests, real commands in the instances' sandboxes;
slow): a two-role package is created as ECS instances, its init and start run by order through
Cloud Assistant with the nodes' metadata, a scale-out adds an instance, and the delete runs stop
and releases every instance. The order is read from what the nodes wrote, not from the plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from appcenter_resource_support import Stack
from crhelper.local.ecs_server import LocalECS
from handlers.appcenter.backend_ecs import TAG_CLUSTER, TAG_ROLE

for _folder in ("cloud", "ecs"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / _folder))
from ecs_support import local_ecs  # noqa: E402

pytestmark = pytest.mark.slow

#: Each service appends "<service> <role> <sid> <operation> <what it saw>" to the journal.
NOTE = ('echo "{service} $APPCENTER_HOST_ROLE $APPCENTER_HOST_SID $APPCENTER_OPERATION '
        '$(cat "$METADATA_FILE" | wc -c | tr -d \' \')" >> "$APPCENTER_ENV_JOURNAL"')


def role(name: str, count: int) -> dict[str, Any]:
    return {"key": name, "type": "array", "properties": [
        {"key": "cpu", "type": "integer", "default": 2, "range": [1, 2, 4], "required": "yes"},
        {"key": "memory", "type": "integer", "default": 4096, "range": [1024, 4096], "required": "yes"},
        {"key": "count", "type": "integer", "default": count, "min": 1, "max": 5, "required": "yes"}]}


def services(start_order: int) -> dict[str, Any]:
    return {name: {"order": order, "cmd": NOTE.format(service=name), "timeout": 30}
            for name, order in (("init", 0), ("start", start_order), ("stop", 0), ("scale_out", 0))}


def node(name: str, start_order: int) -> str:
    return (f'{{"role": "{name}", "container": {{"type": "kvm", "image": "img-tiny"}}, '
            f'"count": {{{{cluster.{name}.count}}}}, "cpu": {{{{cluster.{name}.cpu}}}}, '
            f'"memory": {{{{cluster.{name}.memory}}}}, "services": {json.dumps(services(start_order))}}}')


def tiny_package(folder: Path) -> Path:
    """Roles db (start order 0) and app (start order 1); every service writes to the journal."""
    folder.mkdir()
    config = {"type": "array", "properties": [
        {"key": "cluster", "type": "array", "properties": [
            {"key": "name", "type": "string", "default": "tiny", "required": "no"},
            {"key": "description", "type": "string", "default": "", "required": "no"},
            {"key": "vxnet", "type": "string", "default": "vxnet-local", "required": "yes"},
            role("db", 1), role("app", 2)]},
        {"key": "env", "type": "array", "properties": [
            {"key": "journal", "type": "string", "default": "", "required": "no"}]}]}
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "cluster.json.mustache").write_text(
        '{"name": {{cluster.name}}, "description": {{cluster.description}}, "vxnet": {{cluster.vxnet}},\n'
        ' "advanced_actions": ["scale_horizontal"],\n'
        f' "nodes": [{node("db", 0)},\n {node("app", 1)}],\n'
        ' "env": {"journal": {{env.journal}}}}\n')
    return folder


def pointed_at(monkeypatch: pytest.MonkeyPatch, **more: str) -> Iterator[LocalECS]:
    """The local endpoint, and the environment that points the AppCluster provider's ecs backend at
    it (with `more` variables), for a fixture to yield from."""
    for server in local_ecs(monkeypatch, with_sdk=True):
        for name, value in {"CRHELPER_ECS_ENDPOINT": server.endpoint, "CRHELPER_ECS_REGION": server.region,
                            "ALIBABA_CLOUD_ACCESS_KEY_ID": server.access_key_id,
                            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": server.access_key_secret,
                            "CRHELPER_APPCENTER_ECS_IMAGE": "ubuntu_22_04_x64_20G_alibase_20240101.vhd",
                            "CRHELPER_APPCENTER_ECS_AGENT_TIMEOUT": "5", "CRHELPER_ECS_CALL_TIMEOUT": "5",
                            "CRHELPER_POLL_INITIAL": "0.02", "CRHELPER_POLL_CAP": "0.1",
                            "CRHELPER_APPCENTER_POLL_INTERVAL": "0.02", **more}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("ALIBABA_CLOUD_SECURITY_TOKEN", raising=False)
        yield server


@pytest.fixture()
def ecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalECS]:
    """The local endpoint, and the environment that points the AppCluster provider's ecs backend at it."""
    yield from pointed_at(monkeypatch)


def journal_of(path: Path) -> list[tuple[str, str]]:
    """(service, node) in the order they were written, with the operation and the metadata size."""
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    path.write_text("")
    return [(service, f"{role}-{sid}") for service, role, sid, *_ in lines]


def test_an_app_cluster_on_ecs_is_created_scaled_out_and_deleted_as_instances(ecs: LocalECS, tmp_path: Path) -> None:
    journal = tmp_path / "journal.log"
    inputs: dict[str, Any] = {"env.journal": str(journal)}
    props = {"Package": str(tiny_package(tmp_path / "tiny")), "Version": "1.0.0", "Backend": "ecs", "Inputs": inputs}
    stack = Stack(tmp_path)
    try:
        assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
        instances = ecs.fleet.instances()
        assert sorted(dict(i.tags)[TAG_ROLE] for i in instances) == ["app", "app", "db"]
        assert {i.instance_type for i in instances} == {"ecs.c7.large"} and {i.status for i in instances} == {"Running"}
        cluster_id = dict(instances[0].tags)[TAG_CLUSTER]
        assert stack.outputs()["ClusterId"] == cluster_id
        ran = journal_of(journal)
        inits, starts = [r for r in ran if r[0] == "init"], [r for r in ran if r[0] == "start"]
        assert sorted(n for _, n in inits) == ["app-1", "app-2", "db-1"]
        assert ran.index(max(inits, key=ran.index)) < ran.index(starts[0])      # init before start
        assert starts[0][1] == "db-1" and sorted(n for _, n in starts[1:]) == ["app-1", "app-2"]
        for instance in instances:           # each node's metadata file, written by Cloud Assistant
            tree = json.loads((ecs.sandbox(instance.instance_id) / "appcenter" / "metadata.json").read_text())
            assert tree["host"]["role"] == dict(instance.tags)[TAG_ROLE] and tree["cluster"]["cluster_id"] == cluster_id
            assert sorted(tree["hosts"]) == ["app", "db"]

        grown = {**props, "Inputs": {**inputs, "cluster.app.count": 3}}
        assert stack.update(grown) == "UPDATE_COMPLETE", stack.reasons()
        assert len(ecs.fleet.instances()) == 4
        ran = journal_of(journal)
        assert ("init", "app-3") in ran and ("start", "app-3") in ran
        assert sorted(n for s, n in ran if s == "scale_out") == ["app-1", "app-2", "db-1"]

        assert stack.delete() == "DELETE_COMPLETE", stack.reasons()
        assert sorted(n for s, n in journal_of(journal) if s == "stop") == ["app-1", "app-2", "app-3", "db-1"]
        assert ecs.fleet.instances() == []
        assert {(r.signature_method, r.status) for r in ecs.requests} == {("ACS3-HMAC-SHA256", 200)}
    finally:
        stack.close()
