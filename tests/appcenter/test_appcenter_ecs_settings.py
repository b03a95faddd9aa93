"""The `ecs` node backend's pure parts (quick, no SDK): the instance type a role's cpu and memory
map to, the image rule, the per-role settings, ClientTokens, host names, the scripts that write a
node's files in chunks, and how a Cloud Assistant result row reads as a CommandResult."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from crhelper.config import ConfigError
from handlers.appcenter.backend_ecs import (
    ENV_IMAGE, ENV_INSTANCE_TYPE, MAX_SCRIPT, EcsNodeSettings, client_token, command_result, command_script,
    file_scripts, host_name, image_for, instance_type_for,
)
from handlers.appcenter.backends import BackendError, NodeSpec


def spec(role: str = "etcd_node", cpu: int | None = None, memory: int | None = None, image: str = "") -> NodeSpec:
    return NodeSpec(node_id="cln-1", role=role, sid=1, cpu=cpu, memory=memory, image=image)


@pytest.mark.parametrize(("cpu", "memory", "expected"), [
    (None, None, "ecs.s6-c1m1.small"),
    (1, 1024, "ecs.s6-c1m1.small"),
    (1, 2048, "ecs.s6-c1m2.small"),
    (1, 6144, "ecs.g7.large"),        # no 1-vCPU size has 6 GiB: the smallest 2-vCPU one that does
    (2, 4096, "ecs.c7.large"),
    (2, 8192, "ecs.g7.large"),
    (4, 32768, "ecs.r7.xlarge"),
    (12, 24576, "ecs.c7.3xlarge"),
    (64, 327680, "ecs.r7.16xlarge"),
])
def test_the_smallest_instance_type_with_the_roles_cpu_and_memory(cpu: int | None, memory: int | None,
                                                                   expected: str) -> None:
    assert instance_type_for(spec(cpu=cpu, memory=memory), EcsNodeSettings()) == expected


def test_no_fitting_type_names_the_setting() -> None:
    with pytest.raises(BackendError) as raised:
        instance_type_for(spec(cpu=64, memory=1024 * 1024), EcsNodeSettings())
    assert ENV_INSTANCE_TYPE in str(raised.value) and "cln-1" in str(raised.value)


def test_settings_name_one_value_or_one_per_role() -> None:
    one = EcsNodeSettings.from_env({ENV_INSTANCE_TYPE: "ecs.g7.xlarge", ENV_IMAGE: "m-base"})
    assert instance_type_for(spec(cpu=1, memory=1024), one) == "ecs.g7.xlarge"
    per_role = EcsNodeSettings.from_env({ENV_INSTANCE_TYPE: "etcd_proxy=ecs.c7.large, *=ecs.g7.2xlarge",
                                         ENV_IMAGE: "etcd_node=m-node"})
    assert instance_type_for(spec(role="etcd_proxy"), per_role) == "ecs.c7.large"
    assert instance_type_for(spec(role="etcd_node"), per_role) == "ecs.g7.2xlarge"
    partial = EcsNodeSettings.from_env({ENV_INSTANCE_TYPE: "etcd_proxy=ecs.c7.large"})
    assert instance_type_for(spec(role="etcd_node", cpu=2, memory=8192), partial) == "ecs.g7.large"
    assert image_for(spec(role="etcd_node", image="img-qingcloud"), per_role) == "m-node"
    with pytest.raises(ConfigError) as raised:
        EcsNodeSettings.from_env({ENV_IMAGE: "etcd_node=m-1,broken"})
    assert ENV_IMAGE in str(raised.value) and "role=value" in str(raised.value)


def test_the_image_is_the_setting_unless_the_package_names_an_ecs_image() -> None:
    settings = EcsNodeSettings(image="ubuntu_22_04_x64_20G_alibase_20240101.vhd")
    assert image_for(spec(image="img-svr9kxpn"), settings) == settings.image          # QingCloud's id: not ECS's
    assert image_for(spec(image="m-bp1abc"), settings) == "m-bp1abc"
    assert image_for(spec(image="centos_7_9_x64_20G_alibase_20240101.vhd"), settings).startswith("centos")
    with pytest.raises(BackendError) as raised:
        image_for(spec(image="img-svr9kxpn"), EcsNodeSettings())
    assert ENV_IMAGE in str(raised.value) and "img-svr9kxpn" in str(raised.value)


def test_client_tokens_are_the_ids_or_a_hash_within_64_ascii_characters() -> None:
    assert client_token("cl-abc", "cln-1") == "cl-abc:cln-1"
    long = client_token("cl-" + "x" * 60, "cln-1")
    assert len(long) == 64 and long.startswith("ac-") and long == client_token("cl-" + "x" * 60, "cln-1")
    assert long != client_token("cl-" + "x" * 60, "cln-2")
    assert client_token("cl-ü", "n").isascii()


def test_host_names_follow_the_role() -> None:
    assert host_name("etcd_node", 3) == "etcd-node-3"
    assert host_name("redeploy WAR", 1) == "redeploy-WAR-1"
    assert host_name("a--b_.c", 2) == "a-b-c-2"


def test_a_command_script_runs_the_command_after_the_node_environment() -> None:
    script = command_script("exit 3", {"SERVICE": "it's"}, EcsNodeSettings())
    lines = script.splitlines()
    assert lines[-1] == "exit 3" and "export SERVICE='it'\"'\"'s'" in lines
    assert lines[0] == 'APPCENTER_NODE_DIR="$PWD"/appcenter; export APPCENTER_NODE_DIR'
    assert 'export METADATA_FILE="$APPCENTER_NODE_DIR/metadata.json"' in lines
    assert command_script("true", {}, EcsNodeSettings(node_dir="/opt/app")).startswith("APPCENTER_NODE_DIR=/opt/app;")
    with pytest.raises(BackendError):
        command_script("true", {"NOT-A-NAME": "x"}, EcsNodeSettings())


def test_a_large_file_is_written_in_chunks_that_each_fit_a_command() -> None:
    content = bytes(range(256)) * 200  # 51,200 bytes: about 68 KB of Base64
    scripts = file_scripts({"metadata.json": content, "env.sh": b"export A=1\n"}, EcsNodeSettings())
    assert len(scripts) >= 5 and all(len(s.encode()) <= MAX_SCRIPT for s in scripts)
    staged = "".join(line.split("'")[3] for s in scripts for line in s.splitlines()
                     if line.startswith("printf") and "metadata.json.b64" in line)
    assert base64.b64decode(staged) == content
    assert scripts[-1].rstrip().endswith('rm -f "$APPCENTER_NODE_DIR"/env.sh.b64')
    assert len(file_scripts({"env.sh": b"export A=1\n"}, EcsNodeSettings())) == 1


def row(status: str, exit_code: int = 0, output: bytes = b"", error_code: str = "", error_info: str = "",
        dropped: int = 0) -> Any:
    return SimpleNamespace(invocation_status=status, exit_code=exit_code, output=base64.b64encode(output).decode(),
                           error_code=error_code, error_info=error_info, dropped=dropped)


def test_result_rows_read_as_command_results() -> None:
    assert command_result(row("Running")) is None and command_result(row("Pending")) is None
    done = command_result(row("Success", 0, "ok ✓\n".encode()))
    assert done is not None and done.ok and done.output == "ok ✓\n"
    failed = command_result(row("Failed", 3, b"boom\n", "ExitCodeNonzero"))
    assert failed is not None and (failed.exit_code, failed.output, failed.ok) == (3, "boom\n", False)
    late = command_result(row("Timeout", -9, b"half", "ExecutionTimeout"))
    assert late is not None and late.timed_out and not late.ok
    aborted = command_result(row("Aborted", 0, b"", "InstanceNotRunning", "the instance is not Running"))
    assert aborted is not None and aborted.exit_code == 1 and not aborted.ok
    assert "Aborted InstanceNotRunning: the instance is not Running" in aborted.output
    big = command_result(row("Success", 0, b"x" * 10_000, dropped=5))
    assert big is not None and len(big.output) == 4096 and big.output.endswith("[5 more bytes dropped by Cloud Assistant]")
