"""Custom::AppCluster's guards through the stack emulator in process, on the local backend (review 13
B1, B3, B4, B9): `Force` as ROS passes it (a String parameter's text), `changeable: false` and
`upgrade_policy` holding across an upgrade, and Data's endpoints on the role that serves them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from appcenter_resource_support import PORT, Stack, copy_package, properties, services, the_cluster
from crhelper.local.supervisor import SupervisorClient

pytestmark = pytest.mark.slow

FAILING_DESTROY = {"env.fail_service": "destroy", "env.fail_code": 210, "env.fail_sid": 2}  # web-2's destroy


def test_force_as_the_string_false_keeps_the_destroy_gate_true_passes_it_and_anything_else_is_refused(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient) -> None:
    assert stack.create(properties(stack.journal, FAILING_DESTROY, Force="false")) == "CREATE_COMPLETE", stack.reasons()
    stack.ran()
    assert stack.delete() == "DELETE_FAILED"
    (reason,) = stack.reasons()
    assert "service destroy of role web failed on node web-2" in reason, reason
    assert {s for s, _ in services(stack.ran())} == {"destroy"}  # the gate held: nothing stopped or released
    assert len(the_cluster().nodes) == 3

    forced = Stack(tmp_path, "forced")
    try:
        assert forced.create(properties(stack.journal, FAILING_DESTROY, Force="True")) == "CREATE_COMPLETE", \
            forced.reasons()
        forced.ran()
        assert forced.delete() == "DELETE_COMPLETE", forced.reasons()
        ran = services(forced.ran())
        assert ("destroy", "web-2") in ran and ("stop", "store-1") in ran  # forced past web-2, then torn down
    finally:
        forced.close()

    odd = Stack(tmp_path, "odd")
    try:
        assert odd.create(properties(stack.journal, Force="yes")) == "CREATE_ROLLBACK_COMPLETE"
        (reason,) = odd.reasons()
        assert "Force" in reason and 'must be true or false (a boolean, or the string "true" or "false")' in reason
        assert odd.ran() == []  # refused before any node was made
    finally:
        odd.close()


def _with_template(package: Path, old: str, new: str) -> None:
    template = package / "cluster.json.mustache"
    text = template.read_text()
    assert old in text
    template.write_text(text.replace(old, new))


def _with_config(package: Path, edit: dict[str, dict[str, object]], added: list[dict[str, object]]) -> None:
    """Change env entries of config.json by key, and add new ones."""
    path = package / "config.json"
    config = json.loads(path.read_text())
    (env,) = [section for section in config["properties"] if section["key"] == "env"]
    for entry in env["properties"]:
        entry.update(edit.get(entry["key"], {}))
    env["properties"].extend(added)
    path.write_text(json.dumps(config, indent=1))


def test_an_upgrade_keeps_changeable_false_needs_the_upgrade_policy_and_data_names_the_serving_role(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient) -> None:
    v1 = copy_package(tmp_path, "v1")  # the sample, with an endpoint the web role serves on its own port
    _with_template(v1, '"vertical_scaling_policy": "sequential",',
                   '"vertical_scaling_policy": "sequential", "env": {"admin_port": {{env.port}}},')
    _with_template(v1, '"http": {"port": "env.port", "protocol": "http"}',
                   '"http": {"port": "env.port", "protocol": "http"}, "admin": {"port": "web.env.admin_port"}')
    props = {**properties(stack.journal), "Package": str(v1)}
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    out = stack.outputs()
    (store_ip,), (web1, _) = out["Nodes"]["store"], out["Nodes"]["web"]
    assert out["Endpoints"] == {"http": f"{store_ip}:{PORT}", "admin": f"{web1}:{PORT}"}  # admin: on a web node
    stack.ran()

    v2 = tmp_path / "v2"
    shutil.copytree(v1, v2)
    upgrade = {**props, "Package": str(v2), "Version": "1.1.0"}
    changed = {**upgrade, "Inputs": {**upgrade["Inputs"], "env.db_name": "other"}}
    assert stack.update(changed) == "ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "env.db_name: cannot change after creation (changeable: false)" in reason, reason
    assert the_cluster().values["env.db_name"] == "demo" and the_cluster().version == "1.0.0"
    assert [s for s, _ in services(stack.ran())] == []

    v3 = tmp_path / "v3"
    shutil.copytree(v1, v3)
    _with_template(v3, '"upgrade_policy": ["1.0.0", "1.1.0"],', "")
    assert stack.update({**upgrade, "Package": str(v3), "Version": "3.0.0"}) == "ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "version 3.0.0 cannot upgrade from 1.0.0: it has no upgrade_policy" in reason, reason
    assert the_cluster().version == "1.0.0" and "upgrade" not in {s for s, _ in services(stack.ran())}

    # The new version changes db_name's default and adds a fixed item: the deployed db_name carries
    # over (unchanged, so allowed), the new item takes its default.
    _with_config(v2, {"db_name": {"default": "demo2"}},
                 [{"key": "tier", "label": "Tier", "description": "new in 1.1.0", "type": "string",
                   "default": "gold", "changeable": False, "required": "no"}])
    _with_template(v2, '"db_name": {{env.db_name}},', '"db_name": {{env.db_name}}, "tier": {{env.tier}},')
    assert stack.update(upgrade) == "UPDATE_COMPLETE", stack.reasons()
    record = the_cluster()
    assert record.version == "1.1.0" and record.values["env.db_name"] == "demo" and record.values["env.tier"] == "gold"
    ran = stack.ran()
    assert sorted(services(ran, "upgrade")) == [("upgrade", "store-1"), ("upgrade", "web-1"), ("upgrade", "web-2")]
    assert {r.node for r in ran if r.service == "reload"} == {"store-1", "web-1", "web-2"}  # env.tier: new env
    assert stack.outputs()["Endpoints"]["admin"] == f"{web1}:{PORT}"
