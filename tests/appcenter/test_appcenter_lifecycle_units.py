"""The lifecycle semantics of issue 13's review (D1, D3, D4, B8, B10, the executor's writes), quick:
the plans of a stopped cluster, what an upgrade may not change, and the executor's walk over the
in-memory node backend of `test_appcenter_resource_units` (commands "run" by a table)."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import pytest

from appcenter_resource_support import SAMPLE
from crhelper.texts import scalar_text
from handlers.appcenter import plan as plans
from handlers.appcenter.backends import CommandResult
from handlers.appcenter.changes import layout_changes, plan_update
from handlers.appcenter.check import check_package
from handlers.appcenter.cluster import Cluster
from handlers.appcenter.config import parse_config
from handlers.appcenter.executor import MASK, Executor, masked_inputs, new_run, phase_of, scrub, secret_texts
from handlers.appcenter.package import load_package
from handlers.appcenter.provider import _rendered, clear_abandoned
from handlers.appcenter.state import ClusterRecord
from handlers.appcenter.values import UTF8_RULE, resolve_values
from test_appcenter_resource_units import SETTINGS, TOPOLOGY, TableBackend, created, sample, walk


def names(plan: plans.Plan) -> list[str]:
    return [f"{step.name}{'?' if step.pre_check else ''}" for stage in plan.stages for step in stage.steps]


def phase_names(phase: Mapping[str, Any]) -> list[str]:
    return [f"{step['name']}{'?' if step['pre_check'] else ''}" for stage in phase["stages"] for step in stage["steps"]]


# --- plans ----------------------------------------------------------------------------------------

def test_a_scale_out_checks_first_and_a_stopped_cluster_runs_nothing_on_its_stopped_nodes() -> None:
    cluster = sample({"cluster.web.count": 3})
    running = names(plans.plan_scale_out(cluster, "web", 1, TOPOLOGY))
    assert running[:2] == [plans.REGISTER_METADATA, "scale_out?"]
    assert running.index("scale_out?") < running.index(plans.CREATE_RESOURCES)
    stopped = names(plans.plan_scale_out(cluster, "web", 1, TOPOLOGY, running=False))
    assert stopped == [plans.CREATE_RESOURCES, plans.REGISTER_ADDING_HOSTS, plans.START_CONFD, "init",
                       plans.CUSTOM_METADATA, plans.STOP_NODES, plans.CLEAR_ADDING_HOSTS]
    assert names(plans.plan_scale_in(sample({"cluster.web.count": 1}), "web", 1, TOPOLOGY, running=False)) == [
        plans.REGISTER_DELETING_HOSTS, plans.DELETE_RESOURCES, plans.DEREGISTER_METADATA, plans.CLEAR_DELETING_HOSTS]
    assert names(plans.plan_delete(sample(), TOPOLOGY, running=False)) == [plans.DELETE_RESOURCES,
                                                                           plans.DEREGISTER_METADATA]
    assert "destroy" in names(plans.plan_delete(sample(), TOPOLOGY))
    assert names(plans.plan_vertical_scaling(sample(), ["web"], topology=TOPOLOGY, running=False)) == [
        plans.REGISTER_VERTICAL, plans.RESIZE, plans.CLEAR_VERTICAL]


def test_an_update_of_a_stopped_cluster_starts_nothing_and_its_upgrade_services_wait_for_the_start() -> None:
    old = sample()
    new = sample({"cluster.web.count": 3, "env.greeting": "hi"})
    kept = plan_update(old, new, TOPOLOGY, upgrade=("1.0.0", "1.1.0"), desired=("Stopped", "Stopped"),
                       run_service=None, force=False)
    assert [phase["operation"] for phase in kept.phases] == ["upgrade", "scale-out", "env"] and kept.pending_upgrade
    upgrade, scale, env = kept.phases
    assert phase_names(upgrade) == [plans.COPY_DATA]  # the sample's policy is in-place-parallel
    assert "start" not in phase_names(scale) and "scale_out?" not in phase_names(scale)
    assert phase_names(env) == [plans.REGISTER_METADATA]  # no reload on stopped nodes
    started = plan_update(new, new, {**TOPOLOGY, "web": ("web-1", "web-2", "web-3")}, upgrade=None,
                          desired=("Stopped", "Running"), run_service=None, force=False, pending_upgrade=True)
    (start,) = started.phases
    assert not started.pending_upgrade
    assert phase_names(start)[:2] == [plans.START_NODES, plans.START_CONFD]
    assert phase_names(start).index("upgrade") < phase_names(start).index("start")
    parallel = old.model_copy(update={"upgrading_policy": "parallel"})
    stopped = plan_update(old, parallel, TOPOLOGY, upgrade=("1.0.0", "1.1.0"), desired=("Stopped", "Stopped"),
                          run_service=None, force=False)
    assert [phase_names(phase) for phase in stopped.phases] == [[plans.BOOT_NEW_IMAGE]]


def test_run_service_on_a_stopped_cluster_is_refused_and_runs_once_it_is_started() -> None:
    cluster = sample()
    greet = {"Name": "greet", "Role": None, "Params": {}}
    with pytest.raises(plans.PlanError, match=r"RunService greet: the cluster is Stopped .*set DesiredState: Running"):
        plan_update(cluster, cluster, TOPOLOGY, upgrade=None, desired=("Stopped", "Stopped"), run_service=greet,
                    force=False)
    stopping = plan_update(cluster, cluster, TOPOLOGY, upgrade=None, desired=("Running", "Stopped"), run_service=greet,
                           force=False)
    assert [phase["operation"] for phase in stopping.phases] == ["custom", "stop"]  # while the nodes still run
    started = plan_update(cluster, cluster, TOPOLOGY, upgrade=None, desired=("Stopped", "Running"), run_service=greet,
                          force=False)
    assert [phase["operation"] for phase in started.phases][-1] != "start" and "greet" in phase_names(started.phases[-1])


def test_an_upgrade_keeps_the_roles_and_the_mount_points() -> None:
    old = sample()
    moved = old.model_copy(deep=True)
    volume = moved.node("web").volume
    assert volume is not None
    moved.node("web").volume = volume.model_copy(update={"mount_point": ["/data", "/logs"]})
    assert layout_changes(old, old) == []
    assert layout_changes(old, moved) == ["role web's mount points differ (/data -> /data, /logs)"]
    with pytest.raises(plans.PlanError, match=r"cannot upgrade from 1.0.0: an upgrade keeps the same roles and the "
                                              r"same mount points \(upgrade_policy\), but role web's mount points"):
        plan_update(old, moved, TOPOLOGY, upgrade=("1.0.0", "1.1.0"), desired=("Running", "Running"),
                    run_service=None, force=False)


def test_get_nodes_order_output_is_parsed_and_reorders_the_one_node_blocks() -> None:
    assert plans.parse_nodes_order("starting\ncln-b, cln-a,cln-b\n") == ["cln-b", "cln-a"]
    assert plans.parse_nodes_order("") == []
    stages: list[dict[str, Any]] = [{"label": "x", "node": None}, {"label": "a1", "node": "a"}, {"label": "a2", "node": "a"},
              {"label": "b1", "node": "b"}, {"label": "c1", "node": "c"}, {"label": "end"}]
    assert [s["label"] for s in plans.follow_nodes_order(stages, ["c", "a"])] == ["x", "c1", "a1", "a2", "b1", "end"]


# --- the executor ---------------------------------------------------------------------------------

class OrderedBackend(TableBackend):
    """The table backend with what the lifecycle needs here: get_nodes_order prints a set order,
    the token command prints per node, a publish of many nodes in one call, calls logged."""

    def __init__(self, outputs: Mapping[str, str] | None = None, codes: Mapping[tuple[str, str], int] | None = None,
                 many: bool = True) -> None:
        super().__init__(codes)
        self.outputs = dict(outputs or {})
        self.calls: list[str] = []
        if many:
            self.publish_metadata_many = self._many

    def _many(self, cluster_id: str, trees: Mapping[str, Mapping[str, Any]]) -> None:
        self.calls.append(f"publish_many:{len(trees)}")
        self.published.update(trees)

    def publish_metadata(self, cluster_id: str, node_id: str, tree: Mapping[str, Any]) -> None:
        self.calls.append("publish")
        super().publish_metadata(cluster_id, node_id, tree)

    def start_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        self.calls.append("start_nodes")

    def start_command(self, cluster_id: str, invocation: str, node_ids: Sequence[str], cmd: str, *,
                      timeout: float, env: Mapping[str, str]) -> None:
        super().start_command(cluster_id, invocation, node_ids, cmd, timeout=timeout, env=env)
        word = cmd.split()[-1]
        for node in node_ids:
            output = self.outputs.get(f"{word}@{node}", self.outputs.get(word))
            if output is not None:
                result = self.invocations[invocation][node]
                self.invocations[invocation][node] = CommandResult(result.exit_code, output)


def upgraded(record: ClusterRecord, policy: str) -> ClusterRecord:
    cluster = sample().model_copy(update={"upgrading_policy": policy}, deep=True)
    cluster.node("web").services["get_nodes_order"] = cluster.node("web").services["upgrade"].model_copy(
        update={"cmd": "sh ctl.sh order", "event": ["upgrade"]})
    record.rendered = _rendered(cluster)
    record.run = new_run("up", [phase_of(plans.plan_upgrade(cluster, record.topology()))])
    return record


def test_a_sequential_upgrade_follows_the_order_get_nodes_order_printed() -> None:
    record = created()
    backend = OrderedBackend()
    walk(record, backend)
    cln = {node["node_id"]: node["cln"] for node in record.nodes}
    backend.outputs["order"] = f"checking\n{cln['web-2']},{cln['store-1']}, {cln['web-1']}\n"
    backend.started.clear()
    walk(upgraded(record, "in-place-sequential"), backend)
    assert record.run is not None and record.run["ok"], record.run
    assert [node for word, node in backend.started if word == "upgrade"] == ["web-2", "store-1", "web-1"]
    sequential = created()
    backend = OrderedBackend()
    walk(sequential, backend)
    backend.outputs["order"] = "web-1,web-2"  # our own node ids are understood too; the rest keep their order
    backend.started.clear()
    walk(upgraded(sequential, "sequential"), backend)
    assert [node for word, node in backend.started if word == "upgrade"] == ["web-1", "web-2", "store-1"]
    assert [word for word, node in backend.started if node == "web-1"] == ["order", "stop", "upgrade", "start"]


def test_get_nodes_order_naming_a_node_the_cluster_lacks_fails_the_upgrade_naming_it() -> None:
    record = created()
    backend = OrderedBackend({"order": "cln-nope,web-1"})
    walk(record, backend)
    backend.started.clear()
    walk(upgraded(record, "in-place-sequential"), backend)
    assert record.run is not None and not record.run["ok"]
    assert record.run["reason"] == ("service get_nodes_order of role web printed node id(s) cln-nope that this "
                                    "cluster does not have (it prints the nodes' node_id, comma-separated)")
    assert [word for word, _ in backend.started] == ["order", "order"]  # no upgrade ran


def test_a_sequential_vertical_scaling_follows_get_nodes_order_with_the_scale_vertical_event() -> None:
    record = created()
    backend = OrderedBackend({"order": "web-2,web-1"})
    walk(record, backend)
    bigger = sample({"cluster.web.cpu": 2}).model_copy(deep=True)
    bigger.node("web").services["get_nodes_order"] = bigger.node("web").services["upgrade"].model_copy(
        update={"cmd": "sh ctl.sh order", "event": ["scale_vertical"]})
    record.rendered = _rendered(bigger)
    backend.started.clear()
    record.run = new_run("v", [phase_of(plans.plan_vertical_scaling(bigger, ["web"], topology=record.topology()))])
    walk(record, backend)
    assert record.run["ok"] and [node for word, node in backend.started if word == "start"] == ["web-2", "web-1"]
    assert record.run["phases"][0]["stages"][-1]["label"].startswith("update the metadata")  # kept last


def test_custom_metadata_output_is_the_token_whole_and_published_in_one_call_per_change() -> None:
    backend = OrderedBackend({"token@web-1": "  plain-token\n", "token@web-2": '{"init_token": "t", "n": 2}\n'})
    record = created()
    walk(record, backend)
    hosts = backend.published["store-1"]["hosts"]["web"]
    assert {entry["node_id"]: entry["token"] for entry in hosts.values()} == {
        record.nodes[1]["cln"]: "plain-token", record.nodes[2]["cln"]: '{"init_token": "t", "n": 2}'}
    assert "init_token" not in backend.published["web-2"]["host"]  # the token as printed, not merged
    assert "publish" not in backend.calls and "publish_many:3" in backend.calls
    fallback = OrderedBackend(many=False)
    walk(created(), fallback)
    assert "publish" in fallback.calls and not any(call.startswith("publish_many") for call in fallback.calls)


def test_the_metadata_is_published_again_once_stopped_nodes_run_again() -> None:
    backend = OrderedBackend()
    record = created()
    walk(record, backend)
    cluster = sample()
    record.run = new_run("start", [phase_of(plans.plan_start(cluster, record.topology()))])
    backend.calls.clear()
    walk(record, backend)
    assert backend.calls.index("start_nodes") < backend.calls.index("publish_many:3")


def test_one_store_write_per_stage_of_quick_commands() -> None:
    saved: list[str] = []
    walk(created(), TableBackend(), saved)
    stages = len(created().run["phases"][0]["stages"])  # type: ignore[index]
    service_steps = 6  # init x2 roles, custom_metadata, start x2 orders: one save after each started
    assert len(saved) <= stages + service_steps + 3, len(saved)  # + create-resources' deadline, phase, finish


def test_the_walk_looks_at_running_commands_at_the_check_interval_within_a_call() -> None:
    naps: list[float] = []

    class Slow(TableBackend):
        polls = 0

        def command_results(self, cluster_id: str, invocation: str) -> dict[str, CommandResult | None]:
            Slow.polls += 1
            found = super().command_results(cluster_id, invocation)
            return found if Slow.polls % 3 == 0 else {node: None for node in found}

    record = created()
    executor = Executor(record, Cluster.model_validate(record.rendered), Slow(), lambda r: None,
                        SETTINGS.__class__(poll_interval=5.0, step_budget=1.0), sleep=naps.append)
    assert executor.advance(lambda: 10.0) is None and record.run is not None and record.run["ok"]
    assert naps and set(naps) == {0.05}  # never the 5 s poll interval inside a call
    assert executor.advance(lambda: 0.0) is None


# --- secrets, abandoned runs, values --------------------------------------------------------------

def test_secrets_are_masked_in_the_inputs_and_scrubbed_from_kept_output_and_the_reason() -> None:
    assert secret_texts({"env.p": "hunter22", "env.k": {"id": "AK1", "secret": "S3"}, "env.n": None},
                        ["env.p", "env.k", "env.n"]) == ["hunter22", "AK1", "S3"]
    assert scrub("pw hunter22!", ["hunter22"]) == f"pw {MASK}!"
    assert masked_inputs({"env.p": "x", "env.q": "y", "env.n": None}, ["env.p", "env.n"]) == {
        "env.p": MASK, "env.q": "y", "env.n": None}
    backend = OrderedBackend({"destroy@web-2": "cleanup failed for hunter22"}, codes={("destroy", "web-2"): 3})
    record = created()
    record.values["env.greeting"], record.secret_paths = "hunter22", ["env.greeting"]
    walk(record, backend)
    record.run = new_run("d", [phase_of(plans.plan_delete(sample(), record.topology()))])
    walk(record, backend)
    assert record.run is not None and not record.run["ok"]
    assert "hunter22" not in record.run["reason"] and f"its output ends: cleanup failed for {MASK}" in record.run["reason"]
    assert "hunter22" not in json.dumps(record.run)


def test_a_new_run_clears_what_an_unfinished_one_left_registered() -> None:
    backend = OrderedBackend()
    record = created()
    walk(record, backend)
    record.adding, record.deleting = ["web-2"], ["web-1"]  # left by a run a new request replaced
    Executor(record, Cluster.model_validate(record.rendered), backend, lambda r: None, SETTINGS).publish()
    assert "adding-hosts" in backend.published["web-1"] and "deleting-hosts" in backend.published["web-1"]
    phases = clear_abandoned(record)
    assert record.adding == [] and record.deleting == [] and len(phases) == 1
    record.run = new_run("next", phases)
    backend.published.clear()
    walk(record, backend)
    assert record.run["ok"] and "adding-hosts" not in backend.published["web-1"]
    assert "deleting-hosts" not in backend.published["web-1"] and clear_abandoned(record) == []


def test_a_value_that_does_not_encode_as_utf8_is_a_problem_naming_the_item() -> None:
    config = parse_config(load_package(SAMPLE).config)
    found = resolve_values(config, {"env.greeting": "\ud800x"})
    assert [(p.where, p.rule) for p in found.problems] == [("env.greeting", UTF8_RULE)]
    assert not check_package(load_package(SAMPLE), {"env.greeting": "\ud800x"}).ok
    assert scalar_text(True) == "true" and scalar_text(2.0) == "2" and scalar_text(2.5) == "2.5"

