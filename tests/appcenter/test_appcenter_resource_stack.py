"""Custom::AppCluster through the stack emulator in process, on the local backend: the sample package's
nodes are real working directories, their service commands real processes under the supervisor,
their servers real HTTP servers reading their metadata from the node's metad endpoint. The order is
read from what the nodes ran (the package's journal), not from the plan."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from appcenter_resource_support import PORT, Ran, Stack, copy_package, properties, services, store, the_cluster
from crhelper.local.supervisor import SupervisorClient
from crhelper.paths import state_dir

pytestmark = pytest.mark.slow


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as answer:
        body = answer.read().decode()
        return json.loads(body) if answer.headers.get_content_type() == "application/json" else body


def served(ip: str) -> dict[str, Any]:
    return get(f"http://{ip}:{PORT}/")


def before(ran: list[Ran], first: set[str], then: set[str]) -> bool:
    """Every command of the `first` services began before any of the `then` services."""
    return max(r.at for r in ran if r.service in first) < min(r.at for r in ran if r.service in then)


def nodes_dir(cluster_id: str) -> Path:
    return state_dir("appcenter") / "clusters" / cluster_id / "nodes"


def test_create_scale_out_scale_in_env_change_and_delete_run_in_the_documented_order(
        stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal, {"env.delay": 0.5})
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    out = stack.outputs()
    assert out["Roles"] == {"store": 1, "web": 2} and out["Version"] == "1.0.0" and out["State"] == "Running"
    store_ip, (web1, web2) = out["Nodes"]["store"][0], out["Nodes"]["web"]
    assert out["Endpoints"] == {"http": f"{store_ip}:{PORT}"}
    ran = stack.ran()
    assert sorted(services(ran, "init")) == [("init", "store-1"), ("init", "web-1"), ("init", "web-2")]
    inits = [r.at for r in ran if r.service == "init"]
    assert max(inits) - min(inits) < 0.5  # one order: the three ran at once (each waits 0.5 s first)
    assert before(ran, {"init"}, {"token"}) and before(ran, {"token"}, {"start"})  # custom_metadata between
    assert services(ran, "start")[0] == ("start", "store-1")  # store's start is order 0, web's order 1
    store_start = next(r.at for r in ran if r.service == "start" and r.role == "store")
    assert all(r.at > store_start + 0.5 for r in ran if r.service == "start" and r.role == "web")  # after it ended
    assert served(web1) == {"role": "web", "sid": "1", "ip": web1, "greeting": "hello", "nodes": 3}
    # custom_metadata's whole output is the token, via metad (the sample prints a plain tok-<role>-<sid>)
    assert get(f"http://{web2}:9611/self/host/token") == "tok-web-2"
    assert get(f"http://{web2}:9611/self/cluster/cluster_id") == out["ClusterId"]

    # Scale out to 4 (and the delay back to 0: an env change, reaching the nodes after the scale).
    props["Inputs"].update({"cluster.web.count": 4, "env.delay": 0})
    assert stack.update(props) == "UPDATE_COMPLETE", stack.reasons()
    ran = stack.ran()
    new = {"web-3", "web-4"}
    assert {node for _, node in services(ran, "init", "token", "start")} == new  # the new nodes only
    assert sorted(services(ran, "pre_check", "scale_out")) == [
        ("pre_check", "web-1"), ("pre_check", "web-2"), ("scale_out", "web-1"), ("scale_out", "web-2")]
    # pre_check first (a blocked scale-out boots nothing), then the new nodes, then scale_out on the old ones
    assert before(ran, {"pre_check"}, {"init"}) and before(ran, {"start"}, {"scale_out"})
    assert {r.extra for r in ran if r.service == "scale_out"} == {"adding-hosts"}  # registered during scale_out
    assert before(ran, {"scale_out"}, {"reload"}) and len(services(ran, "reload")) == 5
    assert stack.outputs()["Roles"] == {"store": 1, "web": 4}
    web3 = stack.outputs()["Nodes"]["web"][2]
    assert "adding-hosts" not in get(f"http://{web1}:9611/self")  # cleared afterwards
    assert len(get(f"http://{web1}:9611/self/hosts/web")) == 4
    assert served(web3)["nodes"] == 5 and served(web1)["nodes"] == 5

    # Scale back in to 2: pre_check on the remaining nodes, the destroy gate on the leaving ones, then
    # scale_in on the remaining and stop on the leaving.
    props["Inputs"]["cluster.web.count"] = 2
    assert stack.update(props) == "UPDATE_COMPLETE", stack.reasons()
    ran = stack.ran()
    kinds = [service for service, _ in services(ran)]
    assert kinds == sorted(kinds, key=["pre_check", "destroy", "scale_in", "stop"].index)  # stage by stage
    assert {s: sorted(n for s2, n in services(ran) if s2 == s) for s in ("pre_check", "destroy", "scale_in", "stop")} == {
        "pre_check": ["web-1", "web-2"], "destroy": ["web-3", "web-4"], "scale_in": ["web-1", "web-2"],
        "stop": ["web-3", "web-4"]}
    assert {r.extra for r in ran if r.service == "scale_in"} == {"deleting-hosts"}
    record = the_cluster()
    assert record.topology() == {"store": ("store-1",), "web": ("web-1", "web-2")}
    assert sorted(path.name for path in nodes_dir(record.cluster_id).iterdir()) == ["store-1", "web-1", "web-2"]
    owners = {status.owner.rpartition("/")[2] for status in supervisor.list() if status.running}
    assert owners == {"store-1", "web-1", "web-2", "health"}  # the leaving nodes' server and metad are gone
    assert "deleting-hosts" not in get(f"http://{web1}:9611/self") and served(web1)["nodes"] == 3

    # An env change reaches every node: its metadata (the servers read it live) and the reload hook.
    props["Inputs"]["env.greeting"] = "bonjour"
    assert stack.update(props) == "UPDATE_COMPLETE", stack.reasons()
    ran = stack.ran()
    assert sorted(services(ran)) == [("reload", "store-1"), ("reload", "web-1"), ("reload", "web-2")]
    assert {r.extra for r in ran} == {"greeting=bonjour"}
    assert served(web2)["greeting"] == "bonjour"

    # Delete: destroy by ascending order (web 0, store 1), then stop by ascending order (not reversed).
    assert stack.delete() == "DELETE_COMPLETE", stack.reasons()
    order = services(stack.ran())
    assert sorted(order[:2]) == [("destroy", "web-1"), ("destroy", "web-2")] and order[2] == ("destroy", "store-1")
    assert sorted(order[3:5]) == [("stop", "web-1"), ("stop", "web-2")] and order[5:] == [("stop", "store-1")]
    assert store().list() == []
    assert not (state_dir("appcenter") / "clusters" / record.cluster_id).exists()
    assert [status.name for status in supervisor.list() if status.running] == []
    with pytest.raises(urllib.error.URLError):
        served(web1)


def running_names(supervisor: SupervisorClient) -> list[str]:
    return [status.name for status in supervisor.list() if status.running]


def test_a_failing_start_fails_the_create_with_the_localized_message_naming_service_role_and_node(
        stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal, {"env.fail_service": "start", "env.fail_sid": 2, "env.fail_code": 211},
                       Language="zh-CN")
    assert stack.create(props) == "CREATE_ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "service start of role web failed on node web-2 (i-" in reason, reason
    assert "exit code 211: Web 节点拒绝参与扩缩容" in reason  # locale/zh-cn.json's err_code211
    assert "its output ends: demo: start fails on web 2 (env.fail_service)" in reason
    assert ("start", "web-1") in services(stack.ran())  # the other node of that order did start ...
    assert store().list() == [] and running_names(supervisor) == []  # ... and every node was released
    assert not any((state_dir("appcenter") / "clusters").iterdir())


def test_a_service_past_its_timeout_fails_the_step_and_is_stopped(stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal, {"env.delay": 30, "env.service_timeout": 1})
    assert stack.create(props) == "CREATE_ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "service init of role store failed on node store-1" in reason and "timed out after 1 s" in reason, reason
    assert stack.ran() == [] and running_names(supervisor) == []  # stopped before it noted anything


def test_the_destroy_gate_stops_a_delete_and_force_passes_it_only_where_allow_force_permits(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient) -> None:
    failing = {"env.fail_service": "destroy", "env.fail_code": 210}
    assert stack.create(properties(stack.journal, failing)) == "CREATE_COMPLETE", stack.reasons()
    stack.ran()
    assert stack.delete() == "DELETE_FAILED"
    (reason,) = stack.reasons()
    assert reason.startswith("cluster cl-app-") and "service destroy of role web failed on node web-" in reason
    assert "exit code 210: the store still holds data" in reason and "Force: true passes a failing destroy" in reason
    assert {s for s, _ in services(stack.ran())} == {"destroy"}  # the gate: nothing stopped, nothing released
    assert len(the_cluster().nodes) == 3 and served(stack.outputs()["Nodes"]["web"][0])["role"] == "web"

    forced = Stack(tmp_path, "forced")
    try:
        assert forced.create(properties(stack.journal, failing, Force=True)) == "CREATE_COMPLETE", forced.reasons()
        forced.ran()
        assert forced.delete() == "DELETE_FAILED"
        (reason,) = forced.reasons()
        assert "service destroy of role store failed on node store-1" in reason
        assert "this package does not allow forcing it (allow_force: false)" in reason
        ran = services(forced.ran())
        assert sorted(ran) == [("destroy", "store-1"), ("destroy", "web-1"), ("destroy", "web-2")]  # web's passed
    finally:
        forced.close()


def test_changeable_false_is_refused_and_a_failing_pre_check_blocks_a_scale_out_and_releases_its_nodes(
        stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal)
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    stack.ran()
    changed = properties(stack.journal, {"env.db_name": "other"})
    assert stack.update(changed) == "ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "env.db_name: cannot change after creation (changeable: false)" in reason, reason
    assert stack.ran() == []

    blocked = properties(stack.journal, {"cluster.web.count": 3, "env.fail_service": "pre_check", "env.fail_code": 211})
    assert stack.update(blocked) == "ROLLBACK_COMPLETE"
    (reason,) = stack.reasons()
    assert "service scale_out pre_check of role web failed on node web-" in reason
    assert "a web node refused to take part in the scaling" in reason and "the operation was stopped" in reason
    ran = stack.ran()
    # pre_check runs first: the blocked scale-out booted nothing (no init or start on web-3), ran no scale_out
    assert not [node for _, node in services(ran) if node == "web-3"] and "scale_out" not in {s for s, _ in services(ran)}
    assert sorted(services(ran, "pre_check")) == [("pre_check", "web-1"), ("pre_check", "web-2")]
    record = the_cluster()
    assert record.topology() == {"store": ("store-1",), "web": ("web-1", "web-2")}  # the new node released
    assert not (nodes_dir(record.cluster_id) / "web-3").exists() and record.adding == []
    assert stack.outputs()["Roles"] == {"store": 1, "web": 2}


def test_desired_state_stops_and_starts_and_run_service_runs_a_custom_service_once_per_token(
        stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal)
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    web1 = stack.outputs()["Nodes"]["web"][0]
    stack.ran()
    assert stack.update({**props, "DesiredState": "Stopped"}) == "UPDATE_COMPLETE", stack.reasons()
    assert services(stack.ran())[2:] == [("stop", "store-1")] and stack.outputs()["State"] == "Stopped"
    assert running_names(supervisor) == []
    with pytest.raises(urllib.error.URLError):
        served(web1)
    assert stack.update(props) == "UPDATE_COMPLETE", stack.reasons()
    assert services(stack.ran())[0] == ("start", "store-1") and served(web1)["greeting"] == "hello"

    greet = {**props, "RunService": {"Name": "greet", "Params": {"name": "Ada"}, "Token": "1"}}
    assert stack.update(greet) == "UPDATE_COMPLETE", stack.reasons()
    (ran,) = stack.ran()
    assert (ran.service, ran.node) == ("greet", "web-1")  # nodes_to_execute_on: 1
    assert json.loads(ran.extra.removeprefix("params=")) == {"name": "Ada"}
    same_token = {**greet, "Inputs": {**greet["Inputs"], "env.greeting": "hi"}}
    assert stack.update(same_token) == "UPDATE_COMPLETE", stack.reasons()
    assert "greet" not in {r.service for r in stack.ran()}
    bad = {**same_token, "RunService": {"Name": "greet", "Params": {"name": "Ada 1"}, "Token": "2"}}
    assert stack.update(bad) == "ROLLBACK_COMPLETE"
    assert "RunService greet: service_params.web.name:" in stack.reasons()[0]


def test_vertical_scaling_goes_node_by_node_and_a_new_version_upgrades_under_its_policy(
        tmp_path: Path, stack: Stack, supervisor: SupervisorClient) -> None:
    props = properties(stack.journal)
    assert stack.create(props) == "CREATE_COMPLETE", stack.reasons()
    web2 = stack.outputs()["Nodes"]["web"][1]
    stack.ran()
    bigger = properties(stack.journal, {"cluster.web.cpu": 2, "cluster.web.memory": 2048})
    assert stack.update(bigger) == "UPDATE_COMPLETE", stack.reasons()
    assert services(stack.ran()) == [("stop", "web-1"), ("start", "web-1"), ("stop", "web-2"), ("start", "web-2")]
    assert get(f"http://{web2}:9611/self/host/cpu") == "2" and get(f"http://{web2}:9611/self/host/memory") == "2048"
    assert "vertical-scaling-roles" not in get(f"http://{web2}:9611/self")

    newer = copy_package(tmp_path, "v1.1")
    upgraded = {**bigger, "Package": str(newer), "Version": "1.1.0"}
    assert stack.update(upgraded) == "UPDATE_COMPLETE", stack.reasons()
    assert sorted(services(stack.ran())) == [("upgrade", "store-1"), ("upgrade", "web-1"), ("upgrade", "web-2")]
    assert get(f"http://{web2}:9611/self/cluster/upgrade-audit") == {"from_app_version": "1.0.0",
                                                                     "to_app_version": "1.1.0"}
    assert the_cluster().package == str(newer) and stack.outputs()["Version"] == "1.1.0"
    node = json.loads((nodes_dir(the_cluster().cluster_id) / "web-2" / "node.json").read_text())
    assert node["spec"]["placement"]["package_dir"] == str(newer)  # the nodes run the new version's scripts

    assert stack.update({**upgraded, "Version": "1.2.0"}) == "ROLLBACK_COMPLETE"
    assert "Package and Version change together" in stack.reasons()[0]
    refusing = copy_package(tmp_path, "v2")
    template = refusing / "cluster.json.mustache"
    template.write_text(template.read_text().replace('["1.0.0", "1.1.0"]', '["0.9.0"]'))
    assert stack.update({**upgraded, "Package": str(refusing), "Version": "2.0.0"}) == "ROLLBACK_COMPLETE"
    assert "version 2.0.0 cannot upgrade from 1.1.0: its upgrade_policy allows 0.9.0" in stack.reasons()[0]


def wait(probe: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def test_health_checks_restart_a_dead_server_and_status_shows_health_and_monitor_values(
        stack: Stack, supervisor: SupervisorClient, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from crhelper.cli.main import main
    from handlers.appcenter.backend_local import LocalNodeBackend

    monkeypatch.setenv("CRHELPER_APPCENTER_HEALTH_INTERVAL", "0.2")
    assert stack.create(properties(stack.journal)) == "CREATE_COMPLETE", stack.reasons()
    cluster_id, web1 = stack.outputs()["ClusterId"], stack.outputs()["Nodes"]["web"][0]
    backend = LocalNodeBackend.from_env()

    def nodes() -> dict[str, Any]:
        return (backend.health(cluster_id) or {}).get("nodes") or {}

    wait(lambda: {n: h["status"] for n, h in nodes().items()} == {"web-1": "Healthy", "web-2": "Healthy"})
    served(web1), served(web1)
    wait(lambda: nodes()["web-1"]["monitor"].get("requests") == 2)  # the monitor command's items, collected
    (server,) = [s for s in supervisor.list() if s.owner.endswith("/web-1") and s.name.endswith(".server")]
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    wait(lambda: nodes()["web-1"]["actions"] == 1 and nodes()["web-1"]["status"] == "Healthy")  # action_cmd ran
    assert served(web1)["role"] == "web" and ("restart_server", "web-1") in services(stack.ran())
    assert nodes()["web-2"]["actions"] == 0

    assert main(["appcenter", "status", cluster_id, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(n["NodeId"], (n["Health"] or {}).get("status")) for n in doc["Nodes"]] == [
        ("store-1", None), ("web-1", "Healthy"), ("web-2", "Healthy")]
    assert doc["LastRun"] == {"Operations": ["create"], "Finished": True, "Ok": True, "Reason": None,
                              "Seconds": doc["LastRun"]["Seconds"]}
    assert main(["appcenter", "status", cluster_id]) == 0
    text = capsys.readouterr().out
    assert f"cluster {cluster_id} (local, Running, version 1.0.0): Active" in text
    assert "Healthy (checks" in text and "actions 1" in text and "requests=" in text

    assert stack.delete() == "DELETE_COMPLETE", stack.reasons()
    assert [status.name for status in supervisor.list() if status.running] == []  # the agent too
