"""`crhelper appcenter validate|render|plan`: output, --json, exit codes 0/1/2 (in process through
the real command line, and once as a real process through the installed entry point)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from appcenter_support import NAMES, REPO, files_of, make_zip, package_dir
from crhelper.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["appcenter", *args])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", NAMES)
def test_every_shared_package_validates_renders_and_plans(capsys: pytest.CaptureFixture[str], name: str) -> None:
    path = str(package_dir(name))
    code, out, _ = run(capsys, "validate", path)
    assert code == 0 and out.startswith(f"valid: {path} (")
    code, out, _ = run(capsys, "render", path)
    assert code == 0 and json.loads(out)["nodes"]
    for operation in ("create", "delete"):
        code, out, _ = run(capsys, "plan", path, "--operation", operation, "--json")
        assert code == 0 and json.loads(out)["Operation"] == operation


def test_validate_lists_every_problem_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(package_dir("etcd")), "--set", "cluster.etcd_node.count=2",
                       "--set", "env.etcd_node.quotabytes=1", "--set", "env.nope=1")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].endswith(": 3 problem(s)") and lines[0].startswith("invalid: ")
    assert "  cluster.etcd_node.count: must be one of 1, 3, 5, 7, 9" in lines
    assert "  env.etcd_node.quotabytes: must be at least 2147483648" in lines
    assert "  --set env.nope: no such item in config.json" in lines


def test_validate_json_and_zone(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(package_dir("zookeeper")), "--zone", "pek3a", "--json")
    doc = json.loads(out)
    assert code == 0 and doc == {"Valid": True, "Package": str(package_dir("zookeeper")), "Problems": [],
                                 "Roles": {"zk_node": 3}}
    code, out, _ = run(capsys, "render", str(package_dir("zookeeper")), "--zone", "pek3a")
    assert json.loads(out)["nodes"][0]["instance_class"] == 0
    code, out, _ = run(capsys, "validate", str(package_dir("zookeeper")), "--set", "env.tickTime=0", "--json")
    assert code == 1 and json.loads(out)["Problems"] == [
        {"where": "env.tickTime", "rule": "must be at least 1", "severity": "error"}]


def test_render_prints_the_cluster_or_the_problems(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(package_dir("etcd")), "--resource-group", "Test")
    assert code == 0 and json.loads(out)["nodes"][0]["count"] == 1
    code, out, err = run(capsys, "render", str(package_dir("etcd")), "--set", "cluster.etcd_node.count=2")
    assert code == 1 and out == "" and "cluster.etcd_node.count: must be one of 1, 3, 5, 7, 9" in err
    code, out, err = run(capsys, "render", str(package_dir("etcd")), "--set", "cluster.etcd_node.count=2", "--json")
    assert code == 1 and json.loads(out)["Valid"] is False and err == ""


def test_unreadable_packages_and_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "validate", str(tmp_path / "missing"))
    assert code == 2 and "unreadable package" in err
    bad = make_zip(tmp_path / "bad.zip", {**files_of("etcd"), "../x": b""})
    code, out, _ = run(capsys, "validate", str(bad), "--json")
    assert code == 2 and json.loads(out)["Error"].startswith("unreadable package: unsafe archive member")
    code, _, err = run(capsys, "validate", str(package_dir("etcd")), "--set", "novalue")
    assert code == 2 and "argument --set: takes KEY=VALUE" in err
    code, _, err = run(capsys, "plan", str(package_dir("etcd")))
    assert code == 2 and "--operation" in err
    code, _, err = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-out")
    assert code == 2 and "needs --role ROLE and --count N" in err
    code, _, err = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-in", "--role", "ghost", "--count", "1")
    assert code == 2 and "no role ghost" in err
    code, out, err = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-in", "--role", "etcd_node",
                         "--count", "5")  # more than the role has: the plan's own message, a usage error
    assert code == 2 and out == "" and "usage: --count: role etcd_node has 3 node(s); cannot remove 5" in err, err
    code, out, _ = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-in", "--role", "etcd_node",
                       "--count", "5", "--json")
    assert code == 2 and json.loads(out)["Error"] == "usage: --count: role etcd_node has 3 node(s); cannot remove 5"
    code, out, _ = run(capsys)
    assert code == 2 and "validate" in out


def test_a_required_entry_without_default_is_a_warning_for_the_author(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    files = files_of("zookeeper")
    config = json.loads(files["config.json"])
    admin = next(item for item in config["properties"][1]["properties"] if item["key"] == "admin_username")
    del admin["default"]
    admin["required"] = "yes"
    files["config.json"] = json.dumps(config).encode()
    path = str(make_zip(tmp_path / "p.zip", files))
    code, out, _ = run(capsys, "validate", path)
    assert code == 0
    assert "  warning: env.admin_username: is required and has no default: give it a value (--set env.admin_username)" in out
    code, out, _ = run(capsys, "validate", path, "--set", "env.admin_username=admin")
    assert code == 0 and "warning" not in out


def test_a_package_with_a_bom_is_invalid_not_unreadable(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = files_of("etcd")
    files["config.json"] = b"\xef\xbb\xbf" + files["config.json"]
    code, out, _ = run(capsys, "validate", str(make_zip(tmp_path / "bom.zip", files)))
    assert code == 1 and "config.json: starts with a UTF-8 byte order mark (BOM)" in out


def test_plan_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan", str(package_dir("etcd")), "--operation", "delete")
    assert code == 0
    assert "etcd_node: destroy on etcd_node-1 etcd_node-2 etcd_node-3  [timeout 100s, blocking, force refused]" in out
    code, out, _ = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-out", "--role", "etcd_node",
                       "--count", "2", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["NodesAfter"]["etcd_node"][-1] == "etcd_node-5"
    assert [stage["Label"] for stage in doc["OnAbort"]] == ["delete-resources", "deregister-metadata", "clear /adding-hosts"]
    code, out, _ = run(capsys, "plan", str(package_dir("etcd")), "--operation", "custom", "--service", "compact")
    assert code == 0 and "etcd_node: compact on etcd_node-1" in out


def test_plan_refuses_what_the_package_forbids(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", str(package_dir("etcd")), "--operation", "scale-out", "--role", "etcd_node",
                       "--count", "1")
    assert code == 1 and "cluster.etcd_node.count: must be one of 1, 3, 5, 7, 9" in err  # 3 + 1 = 4
    code, _, err = run(capsys, "plan", str(package_dir("tomcat")), "--operation", "scale-out", "--role", "log_node",
                       "--count", "1")
    assert code == 1 and "scale_horizontal is not in its advanced_actions" in err


@pytest.mark.slow
def test_the_installed_command_runs_as_a_process() -> None:
    result = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "appcenter", "validate",
                             str(package_dir("redis-standalone")), "--json"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["Roles"] == {"node": 1}


#: What QKE, OpenSearch, EHPC and Harbor do that the spec does not say, in one small package.
TOLERANT_CONFIG = {"type": "array", "properties": [
    {"key": "cluster", "type": "array", "properties": [
        {"key": "name", "type": "string", "default": "app", "required": "no"},
        {"key": "description", "type": "string", "default": "", "required": "no"},
        {"key": "vxnet", "type": "string", "default": "vxnet-1", "required": "yes"},
        {"key": "node", "type": "array", "properties": [
            {"key": "count", "type": "integer", "default": 2, "required": "yes"},
            {"key": "instance_class", "type": "integer", "default": 203, "range": [101, 202, 203], "required": "no"},
            {"key": "volume_class", "type": "integer", "default": 2, "range": [100, 200, 5, 6], "required": "no"},
            {"key": "volume_size", "type": "integer", "default": 20, "required": "no"}]}]},
    {"key": "env", "type": "array", "properties": [
        {"key": "global", "type": "array", "properties": [
            {"key": "cert.os.user_ca", "type": "string", "default": "ca", "required": "true"},
            {"key": "port_range", "type": "string", "default": "30000-32767", "pattern": "^\\d+-\\d+$",
             "required": "false"}]}]},
    {"key": "service_params", "type": "array", "properties": [
        {"key": "controller_sp", "type": "array", "properties": [
            {"key": "user_name", "type": "string", "default": "admin", "required": "no"}]}]},
]}
TOLERANT_TEMPLATE = """{
  "name": {{cluster.name}}, "description": {{cluster.description}}, "vxnet": {{cluster.vxnet}},
  "exclude_node_columns": ["instance_class"], "advanced_actions": ["attach_keypairs"],
  "nodes": [{"role": "node", "container": {"type": "kvm", "image": "img-1", "zone": "pek3"},
             "count": {{cluster.node.count}}, "instance_class": {{cluster.node.instance_class}},
             "volume": {"size": {{cluster.node.volume_size}}, "class": {{cluster.node.volume_class}}},
             "advanced_actions": ["scale_horizontal", "attach_keypairs"],
             "services": {"start": {"cmd": "start"},
                          "adduser": {"type": "custom", "cmd": "adduser",
                                      "service_params": {"user_name": {{service_params.controller_sp.user_name}}}}}}],
  "env": {"user_ca": {{env.global.cert.os.user_ca}}},
  "endpoints": {"nodeport": {"port": {{env.global.port_range}}, "protocol": "tcp"}}
}"""


def test_what_real_packages_do_beyond_the_spec_validates_renders_and_plans_with_warnings(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TOLERANT_CONFIG))
    (tmp_path / "cluster.json.mustache").write_text(TOLERANT_TEMPLATE)
    path = str(tmp_path)
    code, out, _ = run(capsys, "validate", path)
    assert code == 0 and out.startswith(f"valid: {path} (node x2)"), out
    for warned in ('config.json env.global.cert.os.user_ca: required should be "yes" or "no", not "true"',
                   "config.json env.global: names no cluster role", "config.json service_params.controller_sp: names",
                   "cluster.node.volume_class: must be one of 100, 200, 5, 6 (the package's default",
                   "cluster.node.instance_class: is not a instance_class QingCloud offers",
                   "exclude_node_columns[0]: instance_class is not one the spec lists",
                   "cluster.json.mustache advanced_actions[0]: attach_keypairs is not one the spec lists",
                   "nodes[0].advanced_actions[1]: attach_keypairs", "endpoints.nodeport.port: 30000-32767 is a port"):
        assert any(line.startswith("  warning: ") and warned in line for line in out.splitlines()), (warned, out)
    code, out, _ = run(capsys, "render", path)
    rendered = json.loads(out)
    assert code == 0 and rendered["env"] == {"user_ca": "ca"}
    assert rendered["nodes"][0]["services"]["adduser"]["service_params"] == {"user_name": "admin"}
    code, out, _ = run(capsys, "plan", path, "--operation", "create", "--json")
    assert code == 0 and json.loads(out)["Operation"] == "create"
    code, out, _ = run(capsys, "validate", path, "--set", "cluster.node.volume_class=2")  # chosen: an error
    assert code == 1 and "  cluster.node.volume_class: must be one of 100, 200, 5, 6" in out
