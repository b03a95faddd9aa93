"""Lifecycle plans (spec §7; the orders of test cases 9 and 10), walked with a scripted executor."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from appcenter_support import NAMES, checked, cluster_of, config_of
from handlers.appcenter import plan as plans
from handlers.appcenter.cluster import Cluster, parse_cluster
from handlers.appcenter.plan import Plan, PlanError, Step, walk


def _edited_cluster(name: str, change: Callable[[Any], None], inputs: dict[str, Any] | None = None) -> Cluster:
    data = copy.deepcopy(checked(name, inputs).rendered)
    change(data)
    cluster, _ = parse_cluster(data, config_of(name))
    return cluster


def _outline(plan: Plan) -> list[tuple[str, ...]]:
    """Each stage as its steps' "role:name@nodes" (actions: "name@nodes")."""
    return [tuple(sorted(f"{str(s.role) + ':' if s.kind == 'service' else ''}{s.name}{'?' if s.pre_check else ''}"
                         f"@{','.join(s.nodes)}" for s in stage.steps)) for stage in plan.stages]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("operation", [plans.plan_create, plans.plan_delete, plans.plan_start, plans.plan_stop,
                                       plans.plan_restart, plans.plan_upgrade])
def test_every_shared_package_plans_with_its_defaults(name: str, operation: Callable[[Cluster], Plan]) -> None:
    made = operation(cluster_of(name))
    assert made.stages
    json.dumps(made.to_json())


def test_case_9_create_follows_order_with_post_start_init_last() -> None:
    etcd = cluster_of("etcd", {"cluster.etcd_proxy.count": "1"})
    nodes = "etcd_node-1,etcd_node-2,etcd_node-3"
    all_nodes = f"{nodes},etcd_proxy-1"
    assert _outline(plans.plan_create(etcd)) == [
        (f"create-resources@{all_nodes}",), ("register-metadata@",), (f"start-confd@{all_nodes}",),
        ("etcd_proxy:init@etcd_proxy-1",),                       # init before start (no post_start_service)
        (f"etcd_node:start@{nodes}",),                           # start, order 1
        ("etcd_proxy:start@etcd_proxy-1",),                      # start, order 2
        ("etcd_node:init@etcd_node-1",),                         # post_start_service, nodes_to_execute_on 1
    ]


def test_case_9_equal_orders_run_in_parallel_and_custom_metadata_sits_between() -> None:
    def change(data: Any) -> None:
        data["nodes"][1]["custom_metadata"] = {"cmd": "print-token"}
    tomcat = _edited_cluster("tomcat", change)
    stages = plans.plan_create(tomcat).stages
    labels = [stage.label for stage in stages]
    assert labels[3:] == ["init, order 0", "custom_metadata", "start, order 0"]
    assert {step.role for step in stages[3].steps} == {"tomcat_nodes", "log_node"}
    assert stages[3].to_json()["Parallel"] is True
    assert stages[4].steps[0].cmd == "print-token" and stages[4].steps[0].nodes == ("log_node-1",)


def test_case_9_delete_runs_destroy_before_stop_and_stop_ascending() -> None:
    etcd = cluster_of("etcd", {"cluster.etcd_proxy.count": "1"})
    made = plans.plan_delete(etcd)
    outline = _outline(made)
    assert outline[:3] == [("etcd_node:destroy@etcd_node-1,etcd_node-2,etcd_node-3",),
                           ("etcd_proxy:stop@etcd_proxy-1",),                             # order 1 first
                           ("etcd_node:stop@etcd_node-1,etcd_node-2,etcd_node-3",)]       # then order 2
    destroy = made.stages[0].steps[0]
    assert destroy.blocking and destroy.allow_force is False and destroy.timeout == 100
    assert outline[3:] == [("delete-resources@etcd_node-1,etcd_node-2,etcd_node-3,etcd_proxy-1",),
                           ("deregister-metadata@",)]


def test_case_9_post_stop_service_moves_destroy_after_stop_and_no_destroy_means_stop_only() -> None:
    def post_stop(data: Any) -> None:
        data["nodes"][0]["services"]["destroy"]["post_stop_service"] = True
    names = [stage.label for stage in plans.plan_delete(_edited_cluster("zookeeper", post_stop)).stages]
    assert names == ["stop, order 0", "destroy (post_stop_service), order 0", "delete-resources", "deregister-metadata"]
    names = [stage.label for stage in plans.plan_delete(cluster_of("tomcat")).stages]
    assert names == ["stop, order 0", "delete-resources", "deregister-metadata"]


def _scripted(codes: dict[str, int], seen: list[str] | None = None) -> Callable[[Step], int]:
    def run(step: Step) -> int:
        key = f"{step.name}{'?' if step.pre_check else ''}"
        if seen is not None:
            seen.append(key)
        return codes.get(key, 0)
    return run


def test_case_9_a_failing_destroy_aborts_and_force_is_refused_when_allow_force_is_false() -> None:
    made = plans.plan_delete(cluster_of("zookeeper"))
    seen: list[str] = []
    outcome = walk(made, _scripted({"destroy": 3}, seen), force=True)
    assert not outcome.completed and outcome.failed is not None and outcome.failed.name == "destroy"
    assert outcome.exit_code == 3 and seen == ["destroy"]  # stop never ran, nothing released

    def allow(data: Any) -> None:
        data["nodes"][0]["services"]["destroy"]["allow_force"] = True
    forceable = plans.plan_delete(_edited_cluster("zookeeper", allow))
    assert not walk(forceable, _scripted({"destroy": 3})).completed
    forced = walk(forceable, _scripted({"destroy": 3}), force=True)
    assert forced.completed and [step.name for step in forced.forced] == ["destroy"]


def _redis(count: int, change: Callable[[Any], None] = lambda data: None) -> Cluster:
    return _edited_cluster("redis-standalone", change, {"cluster.node.count": str(count)})


def test_case_10_scale_out_order_adding_hosts_and_nodes_to_execute_on() -> None:
    def scale_out_hooks(data: Any) -> None:
        data["nodes"][0]["services"]["scale_out"].update(pre_check="appctl preScaleOut", nodes_to_execute_on=1)
    made = plans.plan_scale_out(_redis(3, scale_out_hooks), "node", 2)
    assert _outline(made) == [
        ("register-metadata@",),                # what the Update changed, published for the pre_check
        ("node:scale_out?@node-1",),            # pre_check first, on the old nodes (nodes_to_execute_on 1): a
                                                # blocked scale-out boots nothing
        ("create-resources@node-4,node-5",), ("register-adding-hosts@node-4,node-5",), ("start-confd@node-4,node-5",),
        ("node:start@node-4,node-5",),
        ("node:scale_out@node-1",),
        ("clear-adding-hosts@",)]
    assert made.after["node"] == ("node-1", "node-2", "node-3", "node-4", "node-5")
    adding: list[bool] = []
    state = {"adding": False}

    def run(step: Step) -> int:
        if step.name == plans.REGISTER_ADDING_HOSTS:
            state["adding"] = True
        elif step.name == plans.CLEAR_ADDING_HOSTS:
            state["adding"] = False
        elif step.name == "scale_out" and not step.pre_check:
            adding.append(state["adding"])
        return 0
    assert walk(made, run).completed and adding == [True] and state["adding"] is False


def test_case_10_a_failing_pre_check_blocks_the_scale_out() -> None:
    def scale_out_hooks(data: Any) -> None:
        data["nodes"][0]["services"]["scale_out"]["pre_check"] = "appctl preScaleOut"
    seen: list[str] = []
    outcome = walk(plans.plan_scale_out(_redis(1, scale_out_hooks), "node", 2), _scripted({"scale_out?": 1}, seen))
    assert outcome.aborted and outcome.failed is not None and outcome.failed.pre_check
    assert "scale_out" not in seen
    assert seen[-3:] == [plans.DELETE_RESOURCES, plans.DEREGISTER_METADATA, plans.CLEAR_ADDING_HOSTS]


def test_case_10_scale_in_gates_then_destroys_the_leaving_nodes() -> None:
    made = plans.plan_scale_in(_redis(3), "node", 2)
    assert _outline(made) == [
        ("register-deleting-hosts@node-2,node-3",),
        ("node:scale_in?@node-1",),             # pre_check on the node that stays
        ("node:destroy@node-2,node-3",),        # destroy first (default), on the leaving nodes
        ("node:scale_in@node-1",),
        ("node:stop@node-2,node-3",),
        ("delete-resources@node-2,node-3",), ("deregister-metadata@node-2,node-3",), ("clear-deleting-hosts@",)]
    assert made.after == {"node": ("node-1",)}
    seen: list[str] = []
    outcome = walk(made, _scripted({"scale_in?": 210}, seen))
    assert outcome.aborted and outcome.exit_code == 210
    assert seen == [plans.REGISTER_DELETING_HOSTS, "scale_in?", plans.CLEAR_DELETING_HOSTS]


def test_scale_in_without_destroy_and_with_post_stop_service() -> None:
    def no_destroy(data: Any) -> None:
        del data["nodes"][0]["services"]["destroy"]
    labels = [s.label for s in plans.plan_scale_in(_redis(3, no_destroy), "node", 1).stages]
    assert labels[2:4] == ["scale_in, order 0", "stop, order 0"]

    def post_stop(data: Any) -> None:
        data["nodes"][0]["services"]["destroy"]["post_stop_service"] = True
    labels = [s.label for s in plans.plan_scale_in(_redis(3, post_stop), "node", 1).stages]
    assert labels[2:5] == ["scale_in, order 0", "stop, order 0", "destroy, order 0"]


def test_scaling_needs_scale_horizontal_a_known_role_and_enough_nodes() -> None:
    with pytest.raises(PlanError, match="scale_horizontal is not in its advanced_actions"):
        plans.plan_scale_out(cluster_of("postgresql-simplecluster"), "pg", 1)
    with pytest.raises(PlanError, match="scale_horizontal"):
        plans.plan_scale_out(cluster_of("tomcat"), "log_node", 1)
    assert plans.plan_scale_out(cluster_of("tomcat"), "tomcat_nodes", 1).after["tomcat_nodes"][-1] == "tomcat_nodes-3"
    with pytest.raises(PlanError, match="no role ghost"):
        plans.plan_scale_in(cluster_of("etcd"), "ghost", 1)
    with pytest.raises(PlanError, match="has 3 node"):
        plans.plan_scale_in(cluster_of("etcd"), "etcd_node", 4)


def test_replicas_are_nodes_of_their_own_role() -> None:
    def replicas(data: Any) -> None:
        data["nodes"][0]["replica"] = 1
    cluster = _redis(1, replicas)
    assert plans.topology_of(cluster) == {"node": ("node-1",), "node-replica": ("node-replica-1",)}
    assert plans.plan_create(cluster).stages[-1].steps[0].nodes == ("node-1", "node-replica-1")
    out = plans.plan_scale_out(cluster, "node", 2)
    assert out.after["node-replica"] == ("node-replica-1", "node-replica-2", "node-replica-3")


def test_custom_services_backup_and_restore() -> None:
    etcd = cluster_of("etcd")
    compact = plans.plan_service(etcd, "compact")
    assert _outline(compact) == [("etcd_node:compact@etcd_node-1",)] and compact.stages[0].steps[0].timeout == 86400
    repair = plans.plan_service(etcd, "repairMajorityNode", params={"node.ip": "10.0.0.2"})
    assert repair.stages[0].steps[0].service_params == {"node.ip": "10.0.0.2"}
    with pytest.raises(PlanError, match="no role defines the service 'nope'"):
        plans.plan_service(etcd, "nope")
    assert _outline(plans.plan_service(cluster_of("zookeeper"), "backup")) == [("zk_node:backup@zk_node-1",)]
    restore = plans.plan_service(cluster_of("tomcat"), "restore")
    assert [s.label for s in restore.stages] == ["start (no restore), order 0"]  # no restore: start


def test_upgrade_policies() -> None:
    sequential = plans.plan_upgrade(cluster_of("zookeeper"))
    assert [s.label for s in sequential.stages[:4]] == ["stop, order 0", "boot-new-image", "start-confd", "start, order 0"]
    assert sequential.stages[4].steps[0].nodes == ("zk_node-2",)  # one node after another

    def policy(value: str) -> Callable[[Any], None]:
        return lambda data: data.update(upgrading_policy=value)
    parallel = plans.plan_upgrade(_edited_cluster("etcd", policy("parallel")))
    assert [s.label for s in parallel.stages] == ["boot-new-image", "start-confd", "start, order 1",
                                                  "upgrade (post_start_service), order 0"]
    in_place = plans.plan_upgrade(_edited_cluster("redis-standalone", policy("in-place-parallel")))
    assert [s.label for s in in_place.stages] == ["copy-data", "upgrade, order 0"]
    ordered = plans.plan_upgrade(_edited_cluster("redis-standalone", policy("in-place-sequential"), {"cluster.node.count": "3"}))
    assert [s.steps[0].name for s in ordered.stages] == ["get_nodes_order", "upgrade", "upgrade", "upgrade"]


def test_vertical_scaling_and_restart() -> None:
    etcd = cluster_of("etcd")
    vertical = plans.plan_vertical_scaling(etcd, ["etcd_node"])
    assert [s.label for s in vertical.stages[:4]] == ["register vertical-scaling-roles", "stop, order 2", "resize", "start, order 1"]
    assert vertical.stages[1].steps[0].nodes == ("etcd_node-1",)  # sequential policy: node by node
    disks = plans.plan_vertical_scaling(etcd, ["etcd_node"], disk_only=True)
    assert [s.label for s in disks.stages] == ["register vertical-scaling-roles", "resize",
                                               "update the metadata, remove vertical-scaling-roles"]
    restart = plans.plan_restart(cluster_of("etcd", {"cluster.etcd_proxy.count": "1"}))
    assert [s.label for s in restart.stages] == ["stop, order 1", "stop, order 2", "start, order 1", "start, order 2"]
    assert [s.label for s in plans.plan_restart(cluster_of("zookeeper")).stages] == ["restart, order 0"]
