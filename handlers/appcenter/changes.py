"""What an Update of `Custom::AppCluster` does, as phases of a run (pure: no I/O).

Compared with what is deployed, in this order: a new package version upgrades when its
``upgrade_policy`` lists the deployed version (stopping the cluster first under the ``parallel``
upgrading_policy); changed node sizes scale vertically; changed counts scale each role out or in;
a changed env reaches the nodes (their metadata, then the roles' ``reload`` hook); DesiredState stops or starts; a changed RunService Token runs that
service once. Each phase is planned on the topology the phases before it leave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from . import plan as plans
from .cluster import Cluster
from .executor import RELOAD, phase_of

RUNNING, STOPPED = "Running", "Stopped"
SIZE_FIELDS = ("cpu", "memory", "instance_class")
ENV = "env"


@dataclass
class Changes:
    """The phases to run and what they are for (`notes`, one line each)."""

    phases: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    upgrade_audit: dict[str, str] | None = None


def _sizes(cluster: Cluster, role: str) -> tuple[Any, ...]:
    node = cluster.node(role)
    return tuple(getattr(node, name) for name in SIZE_FIELDS) + (node.volume.size if node.volume else None,)


def _env_changed(old: Cluster, new: Cluster) -> bool:
    if old.env != new.env:
        return True
    return any(old.node(role).env != node.env for role, node in new.roles.items() if role in old.roles)


def env_plan(cluster: Cluster, topology: plans.Topology) -> plans.Plan:
    """Publish the new env to every node, then run the roles' reload hook by order."""
    nodes = {role: tuple(members) for role, members in topology.items()}
    stages = [plans.Stage(plans.REGISTER_METADATA, (plans.Step("action", plans.REGISTER_METADATA, None, ()),)),
              *plans.by_order(cluster, RELOAD, nodes)]
    return plans.Plan(ENV, tuple(stages), before=nodes, after=nodes)


def plan_update(old: Cluster, new: Cluster, topology: plans.Topology, *, upgrade: tuple[str, str] | None,
                desired: tuple[str, str], run_service: Mapping[str, Any] | None, force: bool) -> Changes:
    """The phases of an Update (see the module doc). `upgrade` is (from version, to version) when
    the package changes; `desired` (deployed, wanted); `run_service` {Name, Role, Params} when its
    Token changed. Raises PlanError naming what cannot be done."""
    found = Changes()
    current: dict[str, tuple[str, ...]] = {role: tuple(members) for role, members in topology.items()}
    missing = sorted(set(new.roles) ^ set(old.roles))
    if missing:
        raise plans.PlanError(f"the roles cannot change on a deployed cluster (role(s) {', '.join(missing)}); "
                              "create another cluster instead")

    def add(plan: plans.Plan, note: str) -> None:
        nonlocal current
        found.phases.append(phase_of(plan, force, note))
        found.notes.append(note)
        current = {role: tuple(members) for role, members in plan.after.items()} or current

    if upgrade is not None:
        source, target = upgrade
        if source not in new.upgrade_policy:  # the versions that may upgrade to this one: none when absent
            allowed = (f"its upgrade_policy allows {', '.join(new.upgrade_policy)}" if new.upgrade_policy
                       else "it has no upgrade_policy (cluster.json.mustache upgrade_policy lists the versions "
                            "that may upgrade to it)")
            raise plans.PlanError(f"version {target} cannot upgrade from {source}: {allowed}")
        found.upgrade_audit = {"from_app_version": source, "to_app_version": target}
        if new.upgrading_policy == "parallel" and desired[0] == RUNNING:
            add(plans.plan_stop(new, current), "stop before a parallel upgrade")
        add(plans.plan_upgrade(new, current), f"upgrade {source} -> {target} ({new.upgrading_policy})")
    resized = [role for role in new.roles if _sizes(old, role) != _sizes(new, role)]
    if resized:
        disk_only = all(_sizes(old, role)[:3] == _sizes(new, role)[:3] for role in resized)
        add(plans.plan_vertical_scaling(new, resized, disk_only, current),
            f"vertical scaling of {', '.join(resized)}" + (" (disks only)" if disk_only else ""))
    for role, node in new.roles.items():
        have = len(current.get(role, ()))
        if node.count > have:
            add(plans.plan_scale_out(new, role, node.count - have, current), f"scale {role} out to {node.count}")
        elif node.count < have:
            add(plans.plan_scale_in(new, role, have - node.count, current), f"scale {role} in to {node.count}")
    if _env_changed(old, new):
        add(env_plan(new, current), "env change")
    if desired[0] != desired[1]:
        add(plans.plan_stop(new, current) if desired[1] == STOPPED else plans.plan_start(new, current),
            f"DesiredState {desired[1]}")
    if run_service is not None:
        add(plans.plan_service(new, str(run_service["Name"]), run_service.get("Role"), run_service.get("Params"),
                               current), f"service {run_service['Name']}")
    return found


def node_counts(topology: Mapping[str, Sequence[str]]) -> dict[str, int]:
    return {role: len(members) for role, members in topology.items()}
