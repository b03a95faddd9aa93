"""Custom::AppCluster's pure parts, quick: the metadata tree, the Update's phases, Data within 4,096
bytes, the Package path, the manifest; and the executor's walk (resume, the abort stages, Force)
over an in-memory node backend that keeps the NodeBackend contract (commands "run" by a table)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest
from pydantic import ValidationError

from appcenter_resource_support import SAMPLE
from crhelper import Failure
from handlers.appcenter import metadata, plan as plans
from handlers.appcenter.backends import RUNNING, CommandResult, NodeInfo, NodeSpec
from handlers.appcenter.changes import plan_update
from handlers.appcenter.check import check_package
from handlers.appcenter.config import parse_config
from handlers.appcenter.cluster import Cluster
from handlers.appcenter.executor import Executor, new_run, phase_of
from handlers.appcenter.model import AppClusterProps
from handlers.appcenter.package import load_package
from handlers.appcenter.provider import DATA_BUDGET, _rendered, cluster_data, delete_force, resolve_package, upgrade_inputs
from handlers.appcenter.settings import AppCenterSettings
from handlers.appcenter.state import ClusterRecord

REPO = Path(__file__).resolve().parents[2]


def sample(inputs: Mapping[str, Any] | None = None) -> Cluster:
    checked = check_package(load_package(SAMPLE), inputs)
    assert checked.ok and checked.cluster is not None, checked.errors
    return checked.cluster


# --- metadata -----------------------------------------------------------------------------------

def test_the_self_tree_has_the_spec_keys_and_flattens_to_variables() -> None:
    web = {"node_id": "cln-1", "instance_id": "i-1", "ip": "127.1.1.1", "sid": 1, "role": "web", "cpu": 2,
           "custom": {"token": "t1"}}
    store = {"node_id": "cln-2", "instance_id": "i-2", "ip": "127.1.1.2", "sid": 1, "role": "store"}
    tree = metadata.self_tree(web, [web, store], {"cluster_id": "cl-1", "endpoints": {"http": {"port": 80}}},
                              {"web.console.enabled": True, "n": 3}, adding=[store], vertical_roles=["web"],
                              role_env={"web": {"n": 4}})
    assert tree["hosts"]["web"]["i-1"]["ip"] == "127.1.1.1" and tree["host"]["token"] == "t1"
    assert tree["host"]["cpu"] == "2" and tree["host"]["memory"] == ""  # strings, as metad answers
    assert tree["env"] == {"web.console.enabled": "true", "n": "4"}  # the role's env over the cluster's
    assert list(tree["adding-hosts"]["store"]) == ["i-2"] and tree["vertical-scaling-roles"] == "web"
    assert metadata.lookup(tree, "/self/cluster/endpoints/http/port") == 80
    with pytest.raises(KeyError):
        metadata.lookup(tree, "/self/deleting-hosts")
    variables = metadata.environment(tree)
    assert variables["APPCENTER_HOST_IP"] == "127.1.1.1" and variables["APPCENTER_ENV_WEB_CONSOLE_ENABLED"] == "true"
    assert variables["APPCENTER_CLUSTER_CLUSTER_ID"] == "cl-1" and "APPCENTER_CLUSTER_ENDPOINTS" not in variables


# --- the Update's phases ------------------------------------------------------------------------

TOPOLOGY = {"store": ("store-1",), "web": ("web-1", "web-2")}


def operations_of(changes: Any) -> list[str]:
    return [phase["operation"] for phase in changes.phases]


def test_an_update_plans_upgrade_resize_scale_env_state_and_service_in_that_order() -> None:
    old = sample()
    new = sample({"cluster.web.count": 3, "cluster.web.cpu": 2, "env.greeting": "hi"})
    changes = plan_update(old, new, TOPOLOGY, upgrade=("1.0.0", "1.1.0"), desired=("Running", "Stopped"),
                          run_service={"Name": "greet", "Role": None, "Params": {"name": "Ada"}}, force=False)
    # the service runs while the nodes still run, then the cluster stops
    assert operations_of(changes) == ["upgrade", "vertical-scaling", "scale-out", "env", "custom", "stop"]
    assert changes.upgrade_audit == {"from_app_version": "1.0.0", "to_app_version": "1.1.0"}
    env = changes.phases[3]
    assert [step["name"] for stage in env["stages"] for step in stage["steps"]][:1] == [plans.REGISTER_METADATA]
    assert {tuple(step["nodes"]) for stage in env["stages"][1:] for step in stage["steps"]} == {
        ("store-1",), ("web-1", "web-2", "web-3")}  # the reload hook runs on the topology the scale left
    (greet,) = [step for stage in changes.phases[4]["stages"] for step in stage["steps"]]
    assert greet["nodes"] == ["web-1"] and greet["service_params"] == {"name": "Ada"}
    assert operations_of(plan_update(old, sample({"cluster.web.count": 1}), TOPOLOGY, upgrade=None,
                                     desired=("Running", "Running"), run_service=None, force=False)) == ["scale-in"]
    assert plan_update(old, old, TOPOLOGY, upgrade=None, desired=("Stopped", "Stopped"), run_service=None,
                       force=False).phases == []


def test_an_update_refuses_what_cannot_be_done() -> None:
    old = sample()
    with pytest.raises(plans.PlanError, match="cannot upgrade from 0.1: its upgrade_policy allows 1.0.0, 1.1.0"):
        plan_update(old, old, TOPOLOGY, upgrade=("0.1", "2.0"), desired=("Running", "Running"), run_service=None,
                    force=False)
    unlisted = old.model_copy(update={"upgrade_policy": []})  # absent: no version may upgrade to it
    with pytest.raises(plans.PlanError, match="cannot upgrade from 1.0.0: it has no upgrade_policy"):
        plan_update(old, unlisted, TOPOLOGY, upgrade=("1.0.0", "2.0"), desired=("Running", "Running"),
                    run_service=None, force=False)
    with pytest.raises(plans.PlanError, match="role store cannot scale horizontally"):
        plan_update(old, sample({"cluster.store.count": 1}), {**TOPOLOGY, "store": ()}, upgrade=None,
                    desired=("Running", "Running"), run_service=None, force=False)


def test_force_is_read_as_ros_passes_it_and_anything_else_names_the_property() -> None:
    assert [AppClusterProps.model_validate({"Package": "p", "Force": raw}).Force
            for raw in (True, False, "true", "FALSE", " True ")] == [True, False, True, False, True]
    for odd in ("yes", "1", 1, "", None):
        with pytest.raises(ValidationError, match=r"Force\n.*must be true or false"):
            AppClusterProps.model_validate({"Package": "p", "Force": odd})
    assert delete_force({"Force": "false"}) is False and delete_force({}) is False  # a Delete's raw properties
    assert delete_force({"Force": "true"}) is True
    with pytest.raises(Failure, match='^Force: must be true or false'):
        delete_force({"Force": "no"})


def test_an_upgrade_carries_the_deployed_values_of_what_cannot_change() -> None:
    config = parse_config(load_package(SAMPLE).config)
    deployed = {"env.db_name": "shop", "env.port": 9000, "env.greeting": "hi", "env.gone": "x"}
    assert upgrade_inputs(config, {"env.port": 9001}, deployed) == {"env.db_name": "shop", "env.port": 9001}


# --- Data, Package, manifest --------------------------------------------------------------------

def record_with(nodes: int) -> ClusterRecord:
    cluster = sample()
    made = [{"node_id": f"web-{sid}", "role": "web", "sid": sid, "ip": f"127.0.{sid // 250}.{sid % 250 + 1}"}
            for sid in range(1, nodes + 1)]
    return ClusterRecord(cluster_id="cl-x", package=str(SAMPLE), version="1.0.0", rendered=_rendered(cluster),
                         nodes=[{"node_id": "store-1", "role": "store", "sid": 1, "ip": "127.9.9.9"}, *made])


def test_data_names_the_roles_endpoints_and_version_and_stays_within_the_budget() -> None:
    data = cluster_data(record_with(2))
    assert data == {"ClusterId": "cl-x", "Backend": "local", "Version": "1.0.0", "State": "Running",
                    "Roles": {"store": 1, "web": 2}, "Endpoints": {"http": "127.9.9.9:8080"},
                    "Nodes": {"store": ["127.9.9.9"], "web": ["127.0.0.2", "127.0.0.3"]}}
    large = cluster_data(record_with(400))
    assert len(json.dumps(large).encode()) <= DATA_BUDGET < 4096 and "Nodes" not in large
    assert large["Roles"] == {"store": 1, "web": 400}


def test_a_relative_package_is_resolved_against_the_template_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_package("../samples/appcenter-demo", str(REPO / "templates")) == str(SAMPLE)
    monkeypatch.setenv("CRHELPER_TEMPLATE_DIR", str(REPO / "templates"))
    assert resolve_package("../samples/appcenter-demo") == str(SAMPLE)
    assert resolve_package(str(tmp_path)) == str(tmp_path)
    assert resolve_package("oss://bucket/app.zip") == "oss://bucket/app.zip"


def test_the_manifest_tells_the_truth() -> None:
    from crhelper.cli.provider_spec import load_provider
    from crhelper.manifest import installed_manifests
    from handlers.appcenter.manifest import manifest
    from handlers.appcenter.state import STATE_DIR

    assert "appcenter" in [m.name for m in installed_manifests()]
    assert sorted(load_provider(manifest.handler).types) == sorted(manifest.resource_types)
    assert manifest.state_dir == STATE_DIR
    sources = "".join(path.read_text() for path in (REPO / "handlers" / "appcenter").glob("*.py")
                      if path.name != "manifest.py")
    assert [v.name for v in manifest.environment if v.name not in sources] == []


# --- the executor's walk ------------------------------------------------------------------------

class TableBackend:
    """The NodeBackend contract in memory: a command's exit code comes from `codes` by
    (command word, node), every start is counted, results appear at the first poll."""

    name = "table"

    def __init__(self, codes: Mapping[tuple[str, str], int] | None = None) -> None:
        self.codes = dict(codes or {})
        self.nodes: dict[str, NodeInfo] = {}
        self.started: list[tuple[str, str]] = []
        self.invocations: dict[str, dict[str, CommandResult]] = {}
        self.published: dict[str, Any] = {}

    def create_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> dict[str, NodeInfo]:
        for spec in nodes:
            self.nodes.setdefault(spec.node_id, NodeInfo(spec.node_id, f"i-{spec.node_id}", "127.0.0.1", RUNNING))
        return {spec.node_id: self.nodes[spec.node_id] for spec in nodes}

    def describe_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> dict[str, NodeInfo]:
        return {node: self.nodes[node] for node in node_ids}

    def delete_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        for node in node_ids:
            self.nodes.pop(node, None)

    def start_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None: ...

    def stop_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None: ...

    def resize_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> None: ...

    def publish_metadata(self, cluster_id: str, node_id: str, tree: Mapping[str, Any]) -> None:
        self.published[node_id] = tree

    def start_command(self, cluster_id: str, invocation: str, node_ids: Sequence[str], cmd: str, *,
                      timeout: float, env: Mapping[str, str]) -> None:
        if invocation in self.invocations:
            return
        word = cmd.split()[-1]
        self.invocations[invocation] = {}
        for node in node_ids:
            self.started.append((word, node))
            self.invocations[invocation][node] = CommandResult(self.codes.get((word, node), 0), f"{word} on {node}")

    def command_results(self, cluster_id: str, invocation: str) -> dict[str, CommandResult | None]:
        return dict(self.invocations[invocation])

    def close(self) -> None: ...


SETTINGS = AppCenterSettings(poll_interval=0.01, step_budget=1.0)


def walk(record: ClusterRecord, backend: TableBackend, saved: list[str] | None = None,
         stop_after: int | None = None) -> float | None:
    """Advance `record`'s run; `saved` collects every checkpoint (JSON), `stop_after` ends the walk
    (like a SIGKILL) at that checkpoint."""
    class Killed(BaseException):
        """The process dies here: nothing after this checkpoint runs."""

    def checkpoint(current: ClusterRecord) -> None:
        if saved is not None:
            saved.append(json.dumps(current.to_json()))
            if stop_after is not None and len(saved) >= stop_after:
                raise Killed

    executor = Executor(record, Cluster.model_validate(record.rendered), backend, checkpoint, SETTINGS)
    try:
        return executor.advance(lambda: 10.0)
    except Killed:
        return -1.0


def created(force: bool = False) -> ClusterRecord:
    cluster = sample()
    record = ClusterRecord(cluster_id="cl-t", package=str(SAMPLE), rendered=_rendered(cluster))
    record.run = new_run("r1", [phase_of(plans.plan_create(cluster), force)])
    return record


def test_a_walk_killed_at_any_checkpoint_resumes_without_starting_a_command_twice() -> None:
    whole = TableBackend()
    saved: list[str] = []
    assert walk(created(), whole, saved) is None
    for point in range(1, len(saved)):
        backend = TableBackend()
        progress: list[str] = []
        assert walk(created(), backend, progress, stop_after=point) == -1.0
        resumed = ClusterRecord.from_json(json.loads(progress[-1]))  # what the store kept
        backend.nodes = {node: info for node, info in backend.nodes.items()}  # the nodes outlive the worker
        assert walk(resumed, backend) is None and resumed.run is not None and resumed.run["ok"]
        assert sorted(backend.started) == sorted(whole.started), point  # each command started once
    assert sorted(whole.started) == sorted([("init", "store-1"), ("init", "web-1"), ("init", "web-2"),
                                            ("token", "web-1"), ("token", "web-2"), ("start", "store-1"),
                                            ("start", "web-1"), ("start", "web-2")])


def deleted(record: ClusterRecord, force: bool) -> ClusterRecord:
    record.run = new_run("r2", [phase_of(plans.plan_delete(Cluster.model_validate(record.rendered),
                                                           record.topology()), force)])
    return record


def test_force_passes_a_failing_destroy_only_where_allow_force_permits_and_the_gate_stops_the_rest() -> None:
    backend = TableBackend({("destroy", "web-2"): 5})
    record = created()
    walk(record, backend)
    walk(deleted(record, force=False), backend)
    assert record.run is not None and not record.run["ok"]
    assert re.search(r"service destroy of role web failed on node web-2 \(i-web-2\): exit code 5; its output ends: "
                     r"destroy on web-2; the operation was stopped; Force: true passes", record.run["reason"])
    assert ("stop", "web-1") not in backend.started and len(record.nodes) == 3
    walk(deleted(record, force=True), backend)
    assert record.run is not None and record.run["ok"] and record.nodes == [] and backend.nodes == {}
    backend = TableBackend({("destroy", "store-1"): 5})
    record = created()
    walk(record, backend)
    walk(deleted(record, force=True), backend)
    assert record.run is not None and not record.run["ok"] and "allow_force: false" in record.run["reason"]


def test_a_failing_pre_check_runs_the_abort_stages_releasing_the_new_nodes() -> None:
    backend = TableBackend({("pre_check", "web-1"): 211})
    record = created()
    walk(record, backend)
    cluster = sample({"cluster.web.count": 3})
    record.run = new_run("r3", [phase_of(plans.plan_scale_out(cluster, "web", 1, record.topology()))])
    walk(record, backend)
    assert record.run is not None and not record.run["ok"] and "scale_out pre_check of role web failed on node web-1" in record.run["reason"]
    assert record.topology()["web"] == ("web-1", "web-2") and "web-3" not in backend.nodes and record.adding == []
    assert "adding-hosts" not in backend.published["web-1"]


# --- health checks ------------------------------------------------------------------------------

def test_the_health_plan_and_thresholds_turn_a_node_unhealthy_once_and_healthy_again() -> None:
    from handlers.appcenter.health import HEALTHY, UNHEALTHY, UNKNOWN, NodeHealth, health_plan, monitor_values, run_round

    nodes = [{"node_id": "store-1", "role": "store"}, {"node_id": "web-1", "role": "web"}]
    (checks,) = health_plan(sample(), nodes)
    assert (checks.node_id, checks.interval, checks.healthy_threshold, checks.unhealthy_threshold) == ("web-1", 60, 2, 2)
    assert checks.check_cmd and checks.check_cmd.endswith("ctl.sh check") and checks.monitor_items == ("requests",)
    assert health_plan(sample(), nodes, interval=0.5)[0].interval == 0.5

    state = NodeHealth("web-1")
    seen = [(state.observe(ok, checks), state.status) for ok in (False, False, False, True, True, False, False)]
    assert seen == [(False, UNKNOWN), (True, UNHEALTHY), (False, UNHEALTHY), (False, UNHEALTHY), (False, HEALTHY),
                    (False, HEALTHY), (True, UNHEALTHY)]  # the action is due once per turn to Unhealthy

    ran: list[str] = []

    def runner(node: Any, cmd: str, timeout: float) -> tuple[int, str]:
        ran.append(cmd.split()[-1])
        return (1, "down") if cmd.endswith("check") else (0, 'noise\n{"requests": 7, "other": 1}')

    health: dict[str, NodeHealth] = {}
    due: dict[str, float] = {}
    assert run_round([checks], health, runner, now=100.0, due=due) and due == {"web-1": 160.0}
    assert not run_round([checks], health, runner, now=120.0, due=due)  # not due yet
    run_round([checks], health, runner, now=160.0, due=due)
    assert ran == ["check", "measure", "check", "restart_server", "measure"] and health["web-1"].actions == 1
    assert health["web-1"].monitor == {"requests": 7} and monitor_values("not json", ()) == {}


def test_status_of_an_unknown_cluster_exits_1_and_creates_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from crhelper.cli.main import main
    from crhelper.paths import state_dir

    assert main(["appcenter", "status", "cl-nope"]) == 1
    assert "no cluster 'cl-nope': no cluster was deployed" in capsys.readouterr().err
    assert not state_dir("appcenter").exists()
