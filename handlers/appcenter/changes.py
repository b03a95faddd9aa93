"""What an Update of `Custom::AppCluster` does, as phases of a run (pure: no I/O).

Compared with what is deployed, in this order: a new package version upgrades when its
``upgrade_policy`` lists the deployed version and keeps the roles and their mount points
(stopping the cluster first under the ``parallel`` upgrading_policy); changed node sizes scale
vertically; changed counts scale each role out or in; a changed env reaches the nodes (their
metadata, then the roles' ``reload`` hook); DesiredState stops or starts; a changed RunService
Token runs that service once. Each phase is planned on the topology, and in the power state, the
phases before it leave.

A Stopped cluster stays stopped until DesiredState starts it: nothing runs on its stopped nodes.
An upgrade gives it the new image (or files) only, and the ``upgrade`` services run with its next
start (`Changes.pending_upgrade`); a scale-out's new nodes are stopped after their ``init``; an
env change republishes the metadata and runs no ``reload``; vertical scaling resizes in place.
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
    #: Whether the new version's ``upgrade`` services still wait for the cluster's next start
    #: after this Update (an upgrade made while Stopped).
    pending_upgrade: bool = False


def _sizes(cluster: Cluster, role: str) -> tuple[Any, ...]:
    node = cluster.node(role)
    return tuple(getattr(node, name) for name in SIZE_FIELDS) + (node.volume.size if node.volume else None,)


def _env_changed(old: Cluster, new: Cluster) -> bool:
    if old.env != new.env:
        return True
    return any(old.node(role).env != node.env for role, node in new.roles.items() if role in old.roles)


def env_plan(cluster: Cluster, topology: plans.Topology, *, running: bool = True) -> plans.Plan:
    """Publish the new env to every node, then run the roles' reload hook by order (not on a
    stopped cluster: its nodes read the new metadata when they start)."""
    nodes = {role: tuple(members) for role, members in topology.items()}
    stages = [plans.Stage(plans.REGISTER_METADATA, (plans.Step("action", plans.REGISTER_METADATA, None, ()),))]
    if running:
        stages += plans.by_order(cluster, RELOAD, nodes)
    return plans.Plan(ENV, tuple(stages), before=nodes, after=nodes)


def layout_changes(old: Cluster, new: Cluster) -> list[str]:
    """What an upgrade may not change (§3.1 upgrade_policy: "same roles, same mount points"), one
    phrase each; empty when the layouts match."""
    found = []
    missing = sorted(set(new.roles) ^ set(old.roles))
    if missing:
        found.append(f"the roles differ (role(s) {', '.join(missing)})")
    for role, node in new.roles.items():
        if role not in old.roles:
            continue
        before, after = old.node(role).volume, node.volume
        was = before.mount_points if before is not None else []
        now = after.mount_points if after is not None else []
        if was != now:
            found.append(f"role {role}'s mount points differ ({', '.join(was) or 'none'} -> {', '.join(now) or 'none'})")
    return found


def plan_update(old: Cluster, new: Cluster, topology: plans.Topology, *, upgrade: tuple[str, str] | None,
                desired: tuple[str, str], run_service: Mapping[str, Any] | None, force: bool,
                pending_upgrade: bool = False) -> Changes:
    """The phases of an Update (see the module doc). `upgrade` is (from version, to version) when
    the package changes; `desired` (deployed, wanted); `run_service` {Name, Role, Params} when its
    Token changed; `pending_upgrade` whether an upgrade made while Stopped still waits for the
    next start. Raises PlanError naming what cannot be done."""
    found = Changes(pending_upgrade=pending_upgrade)
    current: dict[str, tuple[str, ...]] = {role: tuple(members) for role, members in topology.items()}
    missing = sorted(set(new.roles) ^ set(old.roles))
    if missing and upgrade is None:
        raise plans.PlanError(f"the roles cannot change on a deployed cluster (role(s) {', '.join(missing)}); "
                              "create another cluster instead")
    state = desired[0]

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
        layout = layout_changes(old, new)
        if layout:
            raise plans.PlanError(f"version {target} cannot upgrade from {source}: an upgrade keeps the same roles "
                                  f"and the same mount points (upgrade_policy), but {'; '.join(layout)}; "
                                  "create another cluster instead")
        found.upgrade_audit = {"from_app_version": source, "to_app_version": target}
        if state == STOPPED:
            add(plans.plan_upgrade(new, current, running=False),
                f"upgrade {source} -> {target} ({new.upgrading_policy}) while Stopped: the upgrade services run "
                "at the next start")
            found.pending_upgrade = True
        else:
            if new.upgrading_policy == "parallel":
                add(plans.plan_stop(new, current), "stop before a parallel upgrade")
            add(plans.plan_upgrade(new, current), f"upgrade {source} -> {target} ({new.upgrading_policy})")
    running = state == RUNNING
    resized = [role for role in new.roles if _sizes(old, role) != _sizes(new, role)]
    if resized:
        disk_only = all(_sizes(old, role)[:3] == _sizes(new, role)[:3] for role in resized)
        add(plans.plan_vertical_scaling(new, resized, disk_only, current, running=running),
            f"vertical scaling of {', '.join(resized)}" + (" (disks only)" if disk_only else "")
            + ("" if running else " while Stopped"))
    stopped_note = "" if running else " while Stopped"
    for role, node in new.roles.items():
        have = len(current.get(role, ()))
        if node.count > have:
            add(plans.plan_scale_out(new, role, node.count - have, current, running=running),
                f"scale {role} out to {node.count}{stopped_note}")
        elif node.count < have:
            add(plans.plan_scale_in(new, role, have - node.count, current, running=running),
                f"scale {role} in to {node.count}{stopped_note}")
    if _env_changed(old, new):
        add(env_plan(new, current, running=running), f"env change{stopped_note}")
    service_first = run_service is not None and desired == (RUNNING, STOPPED)
    if service_first:  # the service runs while the nodes still run, then the cluster stops
        assert run_service is not None
        add(plans.plan_service(new, str(run_service["Name"]), run_service.get("Role"), run_service.get("Params"),
                               current), f"service {run_service['Name']} (before the stop)")
    if desired[0] != desired[1]:
        starting = desired[1] != STOPPED
        add(plans.plan_start(new, current, upgrade=found.pending_upgrade) if starting else plans.plan_stop(new, current),
            f"DesiredState {desired[1]}" + (" (with the upgrade services)" if starting and found.pending_upgrade else ""))
        if starting:
            found.pending_upgrade = False
    if run_service is not None and not service_first:
        if desired[1] == STOPPED:  # a service's commands run on running nodes only, as on the platform
            raise plans.PlanError(f"RunService {run_service['Name']}: the cluster is Stopped (DesiredState: Stopped) "
                                  "and services run on running nodes; set DesiredState: Running in the same "
                                  "Update, or leave RunService's Token unchanged")
        add(plans.plan_service(new, str(run_service["Name"]), run_service.get("Role"), run_service.get("Params"),
                               current), f"service {run_service['Name']}")
    return found


def node_counts(topology: Mapping[str, Sequence[str]]) -> dict[str, int]:
    return {role: len(members) for role, members in topology.items()}
