"""Issue 13's lifecycle semantics through the stack emulator in process, on the local backend (real
node folders, real processes under the supervisor): a Stopped cluster stays stopped through a
scale-out, an env change and an upgrade, and its Delete runs no service; a sequential upgrade
follows get_nodes_order; an upgrade keeps the mount points; custom_metadata's output is the token;
secrets stay out of the record's Inputs, the kept output and the Reason; a new run clears what a
failed one left registered. What ran is read from the nodes' journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appcenter_resource_support import PORT, Stack, copy_package, properties, services, template, the_cluster
from crhelper.local.supervisor import SupervisorClient
from crhelper.paths import state_dir
from handlers.appcenter.executor import MASK
from test_appcenter_resource_stack import get, served

pytestmark = pytest.mark.slow

SECRET = "s3cr3t-Value-42"
#: get_nodes_order of the copies: every node's node_id, the web nodes by descending sid, then the store.
ORDER = '''import json, os
tree = json.load(open(os.environ["METADATA_FILE"]))
hosts = [entry for role in tree["hosts"].values() for entry in role.values()]
hosts.sort(key=lambda entry: (entry["role"] != "web", -int(entry["sid"])))
print("ordering the upgrade")
print(",".join(entry["node_id"] for entry in hosts))
'''


def edited(tmp_path: Path, name: str, template: dict[str, str] | None = None) -> Path:
    """A copy of the sample with a password item, a plain token on web-1, the secret in a failing
    command's output, an ``order`` command, and the template's text replaced as `template` says."""
    package = copy_package(tmp_path, name)
    config = json.loads((package / "config.json").read_text())
    env = next(section for section in config["properties"] if section["key"] == "env")
    env["properties"].append({"key": "secret", "label": "Secret", "description": "a password", "type": "password",
                              "default": "", "changeable": True, "required": "no"})
    (package / "config.json").write_text(json.dumps(config))
    ctl = (package / "bin" / "ctl.sh").read_text()
    ctl = ctl.replace('''  token)
    note
''', '''  token)
    note
    if [ "$sid" = "1" ]; then echo "  plain-$role-$sid  "; exit 0; fi
''').replace('''(env.fail_service)" >&2''', '''(env.fail_service) with ${APPCENTER_ENV_SECRET:-}" >&2''')
    ctl = ctl.replace('''  greet)''', '''  order)
    note
    exec "$APPCENTER_PYTHON" "$APPCENTER_PACKAGE_DIR/bin/order.py" ;;
  greet)''')
    (package / "bin" / "ctl.sh").write_text(ctl)
    (package / "bin" / "order.py").write_text(ORDER)
    text = (package / "cluster.json.mustache").read_text().replace('"port": {{env.port}},', '''"port": {{env.port}},
    "secret": {{env.secret}},''')
    for old, new in (template or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    (package / "cluster.json.mustache").write_text(text)
    return package


def node_file(cluster_id: str, node: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((state_dir("appcenter") / "clusters" / cluster_id / "nodes" / node /
                                        "metadata.json").read_text())
    return found


def owners_running(supervisor: SupervisorClient) -> set[str]:
    return {status.owner.rpartition("/")[2] for status in supervisor.list() if status.running}


PARALLEL = {'"upgrading_policy": "in-place-parallel"': '"upgrading_policy": "parallel"'}


def test_a_stopped_cluster_stays_stopped_through_scale_out_env_and_upgrade_and_its_delete_runs_no_service(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient) -> None:
    v1, v2 = edited(tmp_path, "v1"), edited(tmp_path, "v2", PARALLEL)
    props = properties(stack.journal, {"cluster.web.count": 1}, Package=str(v1))
    stopped = {**props, "DesiredState": "Stopped"}
    assert stack.create(stopped) == "CREATE_COMPLETE", stack.reasons()  # created, then stopped
    assert sorted(services(stack.ran(), "stop")) == [("stop", "store-1"), ("stop", "web-1")]
    cluster_id = the_cluster().cluster_id

    # A scale-out and an env change while Stopped: the new node gets init and its token, and is stopped
    # like the others; nothing runs on the stopped nodes (no pre_check, scale_out or reload).
    grown = {**stopped, "Inputs": {**props["Inputs"], "cluster.web.count": 2, "env.greeting": "bonjour"}}
    assert stack.update(grown) == "UPDATE_COMPLETE", stack.reasons()
    assert sorted(services(stack.ran())) == [("init", "web-2"), ("token", "web-2")]
    assert owners_running(supervisor) & {"store-1", "web-1", "web-2"} == set()
    tree = node_file(cluster_id, "web-1")  # the stopped nodes' metadata is the new one
    assert tree["env"]["greeting"] == "bonjour" and len(tree["hosts"]["web"]) == 2 and "adding-hosts" not in tree

    # An upgrade while Stopped under the parallel policy does not start the cluster: its upgrade
    # services run with the next start, upgrade before start (§7 parallel).
    upgraded = {**grown, "Package": str(v2), "Version": "1.1.0"}
    assert stack.update(upgraded) == "UPDATE_COMPLETE", stack.reasons()
    assert stack.ran() == [] and the_cluster().pending_upgrade and stack.outputs()["State"] == "Stopped"
    assert owners_running(supervisor) & {"store-1", "web-1", "web-2"} == set()
    assert stack.update({**upgraded, "DesiredState": "Running"}) == "UPDATE_COMPLETE", stack.reasons()
    ran = stack.ran()
    nodes = ["store-1", "web-1", "web-2"]
    assert sorted(node for service, node in services(ran, "upgrade")) == nodes
    assert sorted(node for service, node in services(ran, "start")) == nodes
    assert max(r.at for r in ran if r.service == "upgrade") < min(r.at for r in ran if r.service == "start")
    assert not the_cluster().pending_upgrade and served(stack.outputs()["Nodes"]["web"][1])["greeting"] == "bonjour"

    # Delete while Stopped: no service runs (no destroy gate: a failing destroy cannot stop it), nodes released.
    failing = {**upgraded, "Inputs": {**grown["Inputs"], "env.fail_service": "destroy"}}
    assert stack.update(failing) == "UPDATE_COMPLETE", stack.reasons()  # reload while running, then stop
    assert {service for service, _ in services(stack.ran())} == {"reload", "stop"}
    assert stack.delete() == "DELETE_COMPLETE", stack.reasons()
    assert stack.ran() == [] and not (state_dir("appcenter") / "clusters" / cluster_id).exists()


def test_upgrade_order_mount_points_token_secrets_and_a_failed_runs_leftovers(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient, capsys: pytest.CaptureFixture[str]) -> None:
    sequential = {'"upgrading_policy": "in-place-parallel"': '"upgrading_policy": "in-place-sequential"',
                  '"greet": {': '''"get_nodes_order": {"event": ["upgrade"], "nodes_to_execute_on": 1,
                                   "cmd": "sh $APPCENTER_PACKAGE_DIR/bin/ctl.sh order"},
      "greet": {'''}
    v1, v2 = edited(tmp_path, "v1"), edited(tmp_path, "v2", sequential)
    v3 = edited(tmp_path, "v3", {**sequential, '"mount_point": "/data"': '"mount_point": "/srv"'})
    props = properties(stack.journal, {"env.secret": SECRET}, Package=str(v1))
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    record = the_cluster()
    assert record.inputs["env.secret"] == MASK and record.values["env.secret"] == SECRET  # the nodes get it
    web1, web2 = stack.outputs()["Nodes"]["web"]
    assert get(f"http://{web1}:9611/self/env/secret") == SECRET
    hosts = get(f"http://{web1}:9611/self/hosts/web")  # custom_metadata's whole output, stripped, is the token
    assert sorted(entry["token"] for entry in hosts.values()) == ["plain-web-1", "tok-web-2"]
    stack.ran()

    # in-place-sequential: one node after another in the order get_nodes_order printed (web-2, web-1, store-1).
    upgraded = {**props, "Package": str(v2), "Version": "1.1.0"}
    assert stack.update(upgraded) == "UPDATE_COMPLETE", stack.reasons()
    ran = stack.ran()
    assert services(ran, "order") == [("order", "web-1")]
    assert [node for _, node in services(ran, "upgrade")] == ["web-2", "web-1", "store-1"]

    # Another version whose web nodes mount other points cannot upgrade this cluster.
    assert stack.update({**upgraded, "Package": str(v3), "Version": "1.2.0"}) == "ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "an upgrade keeps the same roles and the same mount points (upgrade_policy), but role web's mount " \
           "points differ (/data -> /srv)" in reason, reason
    assert stack.ran() == [] and the_cluster().version == "1.1.0"

    # A failing command printing the secret: the Reason, the kept output and status show the mask instead.
    failing = {**upgraded, "Inputs": {**upgraded["Inputs"], "env.fail_service": "reload", "env.fail_sid": 1}}
    assert update_without_rollback(stack, failing) == "UPDATE_FAILED"
    (reason,) = stack.reasons()
    assert "service reload of role " in reason and f"(env.fail_service) with {MASK}" in reason, reason
    assert SECRET not in reason
    from crhelper.cli.main import main
    assert main(["appcenter", "status", record.cluster_id, "--json"]) == 0
    shown = capsys.readouterr().out
    assert f"with {MASK}" in shown and SECRET not in shown and SECRET not in json.dumps(the_cluster().run)

    # A scale-out whose scale_out fails (no rollback) leaves /adding-hosts registered; the next Update clears it.
    grown = {**upgraded, "Inputs": {**upgraded["Inputs"], "cluster.web.count": 3, "env.fail_service": "scale_out"}}
    assert update_without_rollback(stack, grown) == "UPDATE_FAILED"
    assert the_cluster().adding == ["web-3"] and "adding-hosts" in get(f"http://{web1}:9611/self")
    fixed = {**grown, "Inputs": {**grown["Inputs"], "env.fail_service": ""}}
    assert stack.update(fixed) == "UPDATE_COMPLETE", stack.reasons()
    assert the_cluster().adding == [] and "adding-hosts" not in get(f"http://{web1}:9611/self")
    assert served(web2)["nodes"] == 4 and PORT


def update_without_rollback(stack: Stack, props: dict[str, Any]) -> str:
    """An Update that stays failed (ROS DisableRollback), its events in `stack.events`."""
    stack.events.clear()
    with stack._deliver() as deliver:
        return stack.emulator.update(stack.name, template(props), {}, deliver, disable_rollback=True,
                                     on_event=stack.events.append).status
