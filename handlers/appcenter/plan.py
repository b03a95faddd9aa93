"""The lifecycle orders of spec §7 as data: which steps run, on which nodes, in what order.

A `Plan` is a list of `Stage`s run one after another; the `Step`s of a stage run together (the
services of one ``order`` across roles, "ties in parallel"). A step is either a service command
of a role on some of its nodes (``init`` on ``etcd_node-1``) or a platform action
(``create-resources``, ``register-adding-hosts``...). A *blocking* step aborts the operation on a
non-zero exit (``pre_check``, the destroy gate); ``allow_force`` says whether ``Force`` may pass a
failing ``destroy``; `Plan.on_abort` is what runs when a blocking step stops the operation.

Where the spec leaves room, the choices are: ``pre_check`` runs on the nodes that stay, right after
the scale-in's ``/deleting-hosts`` is registered (before any ``destroy``), and first of all in a
scale-out (§7 "pre_check first": before ``create-resources``, so a blocked scale-out boots
nothing; the old nodes' metadata is published just before it, so they check what the Update
changed); ``scale_out``/``scale_in`` run on the old/remaining nodes of every role that defines
them; the leaving nodes of a scale-in are the role's last ones (highest ``sid``); an aborted
scale-out releases what it made. Nothing runs on a stopped cluster's nodes: its plans (`running`
False) only create, resize, re-image, register and release. Node names are ``<role>-<sid>``
unless the caller gives the topology (the real node ids) itself.

Pure: nothing here runs a command; an executor walks the stages (and later the resource stores
where it is, so a restarted process resumes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from .cluster import REPLICA_SUFFIX, Cluster, Node, Service

CREATE, DELETE, SCALE_OUT, SCALE_IN = "create", "delete", "scale-out", "scale-in"
START, STOP, RESTART, UPGRADE, VERTICAL, CUSTOM, BACKUP, RESTORE = (
    "start", "stop", "restart", "upgrade", "vertical-scaling", "custom", "backup", "restore")
OPERATIONS = (CREATE, SCALE_OUT, SCALE_IN, DELETE, START, STOP, RESTART, UPGRADE, VERTICAL, CUSTOM, BACKUP, RESTORE)

# Platform actions (no service command).
CREATE_RESOURCES = "create-resources"
REGISTER_METADATA = "register-metadata"
START_CONFD = "start-confd"
REGISTER_ADDING_HOSTS = "register-adding-hosts"
CLEAR_ADDING_HOSTS = "clear-adding-hosts"
REGISTER_DELETING_HOSTS = "register-deleting-hosts"
CLEAR_DELETING_HOSTS = "clear-deleting-hosts"
DELETE_RESOURCES = "delete-resources"
DEREGISTER_METADATA = "deregister-metadata"
START_NODES, STOP_NODES = "start-nodes", "stop-nodes"
BOOT_NEW_IMAGE, COPY_DATA = "boot-new-image", "copy-data"
REGISTER_VERTICAL, RESIZE, CLEAR_VERTICAL = "register-vertical-scaling-roles", "resize", "clear-vertical-scaling-roles"
CUSTOM_METADATA = "custom_metadata"

Topology = Mapping[str, Sequence[str]]


class PlanError(ValueError):
    """The operation cannot be planned for this cluster (the message says why)."""


class CountError(PlanError):
    """The caller asked to remove more nodes than the role has (a usage error, not the package's)."""


@dataclass(frozen=True)
class Step:
    kind: Literal["service", "action"]
    #: The service (``init``, a custom key) or the action (``create-resources``).
    name: str
    role: str | None
    nodes: tuple[str, ...]
    order: int = 0
    timeout: int | None = None
    cmd: str | None = None
    #: This step runs the service's ``pre_check`` command, not its ``cmd``.
    pre_check: bool = False
    #: A non-zero exit stops the operation (then `Plan.on_abort` runs).
    blocking: bool = False
    #: destroy: whether ``Force`` may pass a non-zero exit (None: not a destroy).
    allow_force: bool | None = None
    service_params: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"Kind": self.kind, "Name": self.name, "Role": self.role, "Nodes": list(self.nodes)}
        if self.kind == "service":
            doc.update(Order=self.order, Timeout=self.timeout, Cmd=self.cmd)
        for key, value in (("PreCheck", self.pre_check), ("Blocking", self.blocking)):
            if value:
                doc[key] = True
        if self.allow_force is not None:
            doc["AllowForce"] = self.allow_force
        if self.service_params is not None:
            doc["ServiceParams"] = dict(self.service_params)
        return doc


@dataclass(frozen=True)
class Stage:
    """Steps that run together; `label` says why they are here (``start, order 1``). `node` marks
    the stages of a one-node-at-a-time block (a sequential upgrade), which ``get_nodes_order``'s
    output may reorder (`follow_nodes_order`)."""

    label: str
    steps: tuple[Step, ...]
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"Label": self.label, "Parallel": len(self.steps) > 1,
                               "Steps": [step.to_json() for step in self.steps]}
        if self.node is not None:
            doc["Node"] = self.node
        return doc


@dataclass(frozen=True)
class Plan:
    operation: str
    stages: tuple[Stage, ...]
    #: What runs when a blocking step fails (e.g. clear ``/deleting-hosts``).
    on_abort: tuple[Stage, ...] = ()
    before: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    after: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def steps(self) -> list[Step]:
        return [step for stage in self.stages for step in stage.steps]

    def to_json(self) -> dict[str, Any]:
        return {"Operation": self.operation, "Stages": [stage.to_json() for stage in self.stages],
                "OnAbort": [stage.to_json() for stage in self.on_abort],
                "NodesBefore": {role: list(nodes) for role, nodes in self.before.items()},
                "NodesAfter": {role: list(nodes) for role, nodes in self.after.items()}}


def topology_of(cluster: Cluster) -> dict[str, tuple[str, ...]]:
    """Role -> node names from the rendered counts (``etcd_node-1``...; replicas under
    ``<role>-replica`` as ``<role>-replica-<sid>``)."""
    found: dict[str, tuple[str, ...]] = {}
    for node in cluster.nodes:
        found[node.name] = tuple(f"{node.name}-{sid}" for sid in range(1, node.count + 1))
        if node.replica:
            replica = node.name + REPLICA_SUFFIX
            found[replica] = tuple(f"{replica}-{sid}" for sid in range(1, node.count * node.replica + 1))
    return found


def _with_replicas(nodes: Topology, role: str) -> tuple[str, ...]:
    return tuple(nodes.get(role, ())) + tuple(nodes.get(role + REPLICA_SUFFIX, ()))


def _all_nodes(nodes: Topology) -> tuple[str, ...]:
    return tuple(name for members in nodes.values() for name in members)


def _action(name: str, nodes: Iterable[str], label: str | None = None, role: str | None = None) -> Stage:
    return Stage(label or name, (Step("action", name, role, tuple(nodes)),))


def _service_step(node: Node, name: str, service: Service, members: Sequence[str], pre_check: bool = False,
                  blocking: bool = False) -> Step:
    chosen = tuple(members[: service.nodes_to_execute_on] if service.nodes_to_execute_on else members)
    return Step("service", name, node.name, chosen, order=service.order, timeout=service.timeout,
                cmd=service.pre_check if pre_check else service.cmd, pre_check=pre_check, blocking=blocking,
                allow_force=service.allow_force if name == "destroy" else None,
                service_params=service.service_params if service.custom or name in (BACKUP, RESTORE) else None)


def by_order(cluster: Cluster, name: str, nodes: Topology, label: str | None = None,
             keep: Callable[[Node, Service], bool] = lambda node, service: True, *, pre_check: bool = False,
             blocking: bool = False, with_replicas: bool = True) -> list[Stage]:
    """The `name` service of every role that has it (and nodes in `nodes`), by ascending
    ``order``, equal orders in one stage."""
    groups: dict[int, list[Step]] = {}
    for node in cluster.nodes:
        service = node.services.get(name)
        members = _with_replicas(nodes, node.name) if with_replicas else tuple(nodes.get(node.name, ()))
        if service is None or not members or not keep(node, service):
            continue
        if (service.pre_check if pre_check else service.cmd) is None:
            continue
        groups.setdefault(service.order, []).append(_service_step(node, name, service, members, pre_check, blocking))
    title = label or (f"{name} pre_check" if pre_check else name)
    return [Stage(f"{title}, order {order}", tuple(groups[order])) for order in sorted(groups)]


def _post_start(node: Node, service: Service) -> bool:
    return service.post_start_service


def _pre_start(node: Node, service: Service) -> bool:
    return not service.post_start_service


def _bring_up(cluster: Cluster, nodes: Topology, *, start: bool = True) -> list[Stage]:
    """init (unless post_start_service), custom_metadata, start, then the post-start inits (§7);
    without `start`, only what comes before it."""
    stages = by_order(cluster, "init", nodes, keep=_pre_start)
    metadata = [Step("service", CUSTOM_METADATA, node.name, _with_replicas(nodes, node.name), cmd=node.custom_metadata.cmd)
                for node in cluster.nodes if node.custom_metadata is not None and _with_replicas(nodes, node.name)]
    if metadata:
        stages.append(Stage(CUSTOM_METADATA, tuple(metadata)))
    if not start:
        return stages
    stages += by_order(cluster, "start", nodes)
    stages += by_order(cluster, "init", nodes, "init (post_start_service)", keep=_post_start)
    return stages


def _tear_down(cluster: Cluster, nodes: Topology) -> list[Stage]:
    """The destroy gate before stop (default), stop by ascending order, destroy after stop where
    post_stop_service is set."""
    stages = by_order(cluster, "destroy", nodes, keep=lambda node, service: not service.post_stop_service, blocking=True)
    stages += by_order(cluster, "stop", nodes)
    stages += by_order(cluster, "destroy", nodes, "destroy (post_stop_service)",
                       keep=lambda node, service: service.post_stop_service, blocking=True)
    return stages


def _topology(cluster: Cluster, topology: Topology | None) -> dict[str, tuple[str, ...]]:
    return {role: tuple(members) for role, members in (topology or topology_of(cluster)).items()}


def plan_create(cluster: Cluster, topology: Topology | None = None) -> Plan:
    nodes = _topology(cluster, topology)
    stages = [_action(CREATE_RESOURCES, _all_nodes(nodes)), _action(REGISTER_METADATA, ()),
              _action(START_CONFD, _all_nodes(nodes)), *_bring_up(cluster, nodes)]
    return Plan(CREATE, tuple(stages), before={}, after=nodes)


def plan_delete(cluster: Cluster, topology: Topology | None = None, *, running: bool = True) -> Plan:
    """Tear down (the destroy gate, stop by order), then release the nodes and deregister. A
    stopped cluster (`running` False) runs no service: nothing runs on stopped nodes (§7 orders
    the services of an active cluster; the spec says nothing of a stopped one), so its nodes are
    released without ``destroy`` or ``stop``, and Force and ``allow_force`` do not apply."""
    nodes = _topology(cluster, topology)
    stages = [*(_tear_down(cluster, nodes) if running else ()), _action(DELETE_RESOURCES, _all_nodes(nodes)),
              _action(DEREGISTER_METADATA, ())]
    return Plan(DELETE, tuple(stages), before=nodes, after={})


def _scalable(cluster: Cluster, role: str, count: int) -> Node:
    if role not in cluster.roles:
        raise PlanError(f"no role {role}; roles: {', '.join(cluster.roles)}")
    if count < 1:
        raise PlanError("the node count to add or remove must be at least 1")
    if not cluster.has_advanced_action("scale_horizontal", role):
        raise PlanError(f"role {role} cannot scale horizontally: scale_horizontal is not in its advanced_actions")
    return cluster.node(role)


def plan_scale_out(cluster: Cluster, role: str, count: int, topology: Topology | None = None, *,
                   running: bool = True) -> Plan:
    """Add `count` nodes to `role` (§7 "Add nodes"). The old nodes' ``pre_check`` runs first, so a
    blocked scale-out boots nothing. A stopped cluster (`running` False) runs nothing on its
    stopped nodes (no pre_check, no scale_out): the new nodes are created, registered and get their
    ``init`` and ``custom_metadata``, then are stopped like the others (``start`` runs at the
    cluster's next start)."""
    node = _scalable(cluster, role, count)
    old = _topology(cluster, topology)
    existing = old.get(role, ())
    new = {role: tuple(f"{role}-{sid}" for sid in range(len(existing) + 1, len(existing) + count + 1))}
    if node.replica:
        replica = role + REPLICA_SUFFIX
        have = len(old.get(replica, ()))
        new[replica] = tuple(f"{replica}-{sid}" for sid in range(have + 1, have + count * node.replica + 1))
    added = _all_nodes(new)
    made = [_action(CREATE_RESOURCES, added), _action(REGISTER_ADDING_HOSTS, added, "register /hosts and /adding-hosts"),
            _action(START_CONFD, added)]
    if running:
        gate = by_order(cluster, "scale_out", old, pre_check=True, blocking=True)
        if gate:  # the old nodes check what the Update changed (their metadata, published first)
            gate.insert(0, _action(REGISTER_METADATA, (), "register-metadata (for pre_check)"))
        stages = [*gate, *made, *_bring_up(cluster, new), *by_order(cluster, "scale_out", old),
                  _action(CLEAR_ADDING_HOSTS, (), "clear /adding-hosts")]
    else:
        stages = [*made, *_bring_up(cluster, new, start=False), _action(STOP_NODES, added),
                  _action(CLEAR_ADDING_HOSTS, (), "clear /adding-hosts")]
    after = {name: old.get(name, ()) + new.get(name, ()) for name in {**old, **new}}
    abort = (_action(DELETE_RESOURCES, added), _action(DEREGISTER_METADATA, added),
             _action(CLEAR_ADDING_HOSTS, (), "clear /adding-hosts"))
    return Plan(SCALE_OUT, tuple(stages), on_abort=abort, before=old, after=after)


def plan_scale_in(cluster: Cluster, role: str, count: int, topology: Topology | None = None, *,
                  running: bool = True) -> Plan:
    """Remove the last `count` nodes of `role` (§7 "Delete nodes"). On a stopped cluster (`running`
    False) nothing runs on the stopped nodes (as for deleting a stopped cluster): the leaving nodes
    are registered under ``/deleting-hosts`` and released."""
    node = _scalable(cluster, role, count)
    old = _topology(cluster, topology)
    existing = old.get(role, ())
    if count > len(existing):
        raise CountError(f"role {role} has {len(existing)} node(s); cannot remove {count}")
    leaving = {role: tuple(existing[len(existing) - count:])}
    if node.replica:
        replica = role + REPLICA_SUFFIX
        members = old.get(replica, ())
        leaving[replica] = tuple(members[len(members) - count * node.replica:])
    remaining = {name: tuple(member for member in members if member not in leaving.get(name, ()))
                 for name, members in old.items()}
    gone = _all_nodes(leaving)
    destroy = node.services.get("destroy")
    scale_in = by_order(cluster, "scale_in", remaining)
    stop = by_order(cluster, "stop", leaving)
    destroy_stages = by_order(cluster, "destroy", leaving, blocking=True)
    if destroy is None or destroy.cmd is None:
        middle = scale_in + stop
    elif destroy.post_stop_service:
        middle = scale_in + stop + destroy_stages
    else:
        middle = destroy_stages + scale_in + stop
    if not running:
        middle = []
    gate = by_order(cluster, "scale_in", remaining, pre_check=True, blocking=True) if running else []
    stages = [_action(REGISTER_DELETING_HOSTS, gone, "register /deleting-hosts"), *gate, *middle,
              _action(DELETE_RESOURCES, gone), _action(DEREGISTER_METADATA, gone),
              _action(CLEAR_DELETING_HOSTS, (), "clear /deleting-hosts")]
    abort = (_action(CLEAR_DELETING_HOSTS, (), "clear /deleting-hosts"),)
    return Plan(SCALE_IN, tuple(stages), on_abort=abort, before=old, after=remaining)


def plan_start(cluster: Cluster, topology: Topology | None = None, *, upgrade: bool = False) -> Plan:
    """Power the nodes on, then ``start`` by order; with `upgrade` (an upgrade made while the
    cluster was stopped), the new version's ``upgrade`` services around ``start`` as a parallel
    upgrade runs them (§7)."""
    nodes = _topology(cluster, topology)
    stages = [_action(START_NODES, _all_nodes(nodes)), _action(START_CONFD, _all_nodes(nodes))]
    if upgrade:
        stages += [*by_order(cluster, "upgrade", nodes, "upgrade", keep=_pre_start), *by_order(cluster, "start", nodes),
                   *by_order(cluster, "upgrade", nodes, "upgrade (post_start_service)", keep=_post_start)]
    else:
        stages += by_order(cluster, "start", nodes)
    return Plan(START, tuple(stages), before=nodes, after=nodes)


def plan_stop(cluster: Cluster, topology: Topology | None = None) -> Plan:
    nodes = _topology(cluster, topology)
    return Plan(STOP, tuple([*by_order(cluster, "stop", nodes), _action(STOP_NODES, _all_nodes(nodes))]),
                before=nodes, after=nodes)


def plan_restart(cluster: Cluster, topology: Topology | None = None) -> Plan:
    """``restart`` where a role has it; stop then start for the roles that do not."""
    nodes = _topology(cluster, topology)
    restartable = {node.name for node in cluster.nodes if "restart" in node.services}
    without = {role: members for role, members in nodes.items() if role.removesuffix(REPLICA_SUFFIX) not in restartable}
    stages = [*by_order(cluster, "restart", nodes), *by_order(cluster, "stop", without), *by_order(cluster, "start", without)]
    return Plan(RESTART, tuple(stages), before=nodes, after=nodes)


def plan_service(cluster: Cluster, name: str, role: str | None = None, params: Mapping[str, Any] | None = None,
                 topology: Topology | None = None) -> Plan:
    """A custom service (or backup, restore, another system service) on the roles that define it,
    by order; `params` overlay the rendered ``service_params``."""
    nodes = _topology(cluster, topology)
    if role is not None:
        if role not in cluster.roles:
            raise PlanError(f"no role {role}; roles: {', '.join(cluster.roles)}")
        nodes = {name_: members for name_, members in nodes.items() if name_.removesuffix(REPLICA_SUFFIX) == role}
    if name == RESTORE:
        return _plan_restore(cluster, nodes)
    defined = [node.name for node in cluster.nodes if name in node.services and (role is None or node.name == role)]
    if not defined:
        raise PlanError(f"no role defines the service {name!r}")
    with_replicas = name != BACKUP or any(cluster.node(r).services[name].with_replica for r in defined)
    stages = by_order(cluster, name, nodes, with_replicas=with_replicas)
    if params:
        stages = [Stage(stage.label, tuple(replace(step, service_params={**(step.service_params or {}), **params})
                                           for step in stage.steps)) for stage in stages]
    return Plan(BACKUP if name == BACKUP else CUSTOM, tuple(stages), before=nodes, after=nodes)


def _plan_restore(cluster: Cluster, nodes: Topology) -> Plan:
    """``restore`` on the roles that define it, ``start`` on the others (§7)."""
    stages = by_order(cluster, "restore", nodes)
    stages += by_order(cluster, "start", nodes, "start (no restore)", keep=lambda node, service: "restore" not in node.services)
    shown = {role: tuple(members) for role, members in nodes.items()}
    return Plan(RESTORE, tuple(stages), before=shown, after=shown)


def plan_upgrade(cluster: Cluster, topology: Topology | None = None, *, running: bool = True) -> Plan:
    """The new version's services under its ``upgrading_policy`` (§7 "Upgrade"). The sequential
    policies go one node at a time, each node's stages marked with it, in topology order until
    ``get_nodes_order`` (the roles whose one has the ``upgrade`` event) prints the order to follow.
    A stopped cluster (`running` False) is not started: it gets the new image (or, in place, the
    new files) now, and the ``upgrade`` services run at its next start (`plan_start(upgrade=True)`)."""
    nodes = _topology(cluster, topology)
    policy = cluster.upgrading_policy
    if not running:
        swap = COPY_DATA if policy.startswith("in-place") else BOOT_NEW_IMAGE
        return Plan(UPGRADE, (_action(swap, _all_nodes(nodes)),), before=nodes, after=nodes)
    ordering = by_order(cluster, "get_nodes_order", nodes,
                        keep=lambda node, service: "upgrade" in (service.event or ()))
    pre = by_order(cluster, "upgrade", nodes, "upgrade", keep=_pre_start)
    post = by_order(cluster, "upgrade", nodes, "upgrade (post_start_service)", keep=_post_start)
    if policy == "parallel":
        stages = [_action(BOOT_NEW_IMAGE, _all_nodes(nodes)), _action(START_CONFD, _all_nodes(nodes)),
                  *pre, *by_order(cluster, "start", nodes), *post]
    elif policy == "in-place-parallel":
        stages = [_action(COPY_DATA, _all_nodes(nodes)), *by_order(cluster, "upgrade", nodes)]
    else:
        stages = list(ordering)
        for role, members in nodes.items():
            for member in members:
                one = {role: (member,)}
                if policy == "sequential":
                    block = [*by_order(cluster, "stop", one), _action(BOOT_NEW_IMAGE, (member,), role=role),
                             _action(START_CONFD, (member,), role=role),
                             *by_order(cluster, "upgrade", one, "upgrade", keep=_pre_start),
                             *by_order(cluster, "start", one),
                             *by_order(cluster, "upgrade", one, "upgrade (post_start_service)", keep=_post_start)]
                else:
                    block = by_order(cluster, "upgrade", one)
                stages += [replace(stage, node=member) for stage in block]
    return Plan(UPGRADE, tuple(stages), before=nodes, after=nodes)


def parse_nodes_order(output: str) -> list[str]:
    """The node ids ``get_nodes_order`` printed: its last non-empty line, comma-separated (spaces
    tolerated), each id once."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    found: list[str] = []
    for part in re.split(r"[,\s]+", lines[-1]) if lines else []:
        if part and part not in found:
            found.append(part)
    return found


def follow_nodes_order(stages: Sequence[Mapping[str, Any]], order: Sequence[str]) -> list[Mapping[str, Any]]:
    """`stages` (as JSON, each maybe with a ``node``) with the one-node blocks in `order`: the
    stages of no node keep their places; the places of the blocks take the blocks of the nodes
    `order` names, in that order, then the others' in their own order."""
    blocks: dict[str, list[Mapping[str, Any]]] = {}
    for stage in stages:
        if stage.get("node") is not None:
            blocks.setdefault(str(stage["node"]), []).append(stage)
    ranked = [node for node in order if node in blocks] + [node for node in blocks if node not in order]
    queue = iter([stage for node in ranked for stage in blocks[node]])
    return [next(queue) if stage.get("node") is not None else stage for stage in stages]


def plan_vertical_scaling(cluster: Cluster, roles: Sequence[str], disk_only: bool = False,
                          topology: Topology | None = None, *, running: bool = True) -> Plan:
    """Resize the nodes of `roles` (§7 "Vertical scaling"): disks alone online and in parallel;
    otherwise stop, resize, start, node by node where ``vertical_scaling_policy`` is sequential
    (in the order ``get_nodes_order`` prints where a role's has the ``scale_vertical`` event).
    A stopped cluster (`running` False) is resized as it is, not started."""
    nodes = _topology(cluster, topology)
    unknown = [role for role in roles if role not in cluster.roles]
    if unknown:
        raise PlanError(f"no role {', '.join(unknown)}; roles: {', '.join(cluster.roles)}")
    stages = [_action(REGISTER_VERTICAL, (), "register vertical-scaling-roles")]
    one_by_one = [role for role in roles if cluster.node(role).vertical_scaling_policy == "sequential"]
    if running and not disk_only and one_by_one:  # the order the package asks for (event scale_vertical)
        stages += by_order(cluster, "get_nodes_order", {role: _with_replicas(nodes, role) for role in one_by_one},
                           keep=lambda node, service: "scale_vertical" in (service.event or ()))
    for role in roles:
        members = _with_replicas(nodes, role)
        if disk_only or not running:
            stages.append(_action(RESIZE, members, role=role))
        elif role in one_by_one:
            for member in members:
                one = {role: (member,)}
                stages += [replace(stage, node=member) for stage in (
                    *by_order(cluster, "stop", one), _action(RESIZE, (member,), role=role), *by_order(cluster, "start", one))]
        else:
            one_role = {role: members}
            stages += [*by_order(cluster, "stop", one_role), _action(RESIZE, members, role=role),
                       *by_order(cluster, "start", one_role)]
    stages.append(_action(CLEAR_VERTICAL, (), "update the metadata, remove vertical-scaling-roles"))
    return Plan(VERTICAL, tuple(stages), on_abort=(_action(CLEAR_VERTICAL, (), "remove vertical-scaling-roles"),),
                before=nodes, after=nodes)


@dataclass
class Outcome:
    """How a walk over a plan ended: the steps run (in order), the one that failed, the forced ones."""

    completed: bool
    ran: list[Step] = field(default_factory=list)
    failed: Step | None = None
    exit_code: int | None = None
    forced: list[Step] = field(default_factory=list)
    aborted: bool = False


def walk(plan: Plan, run: Callable[[Step], int], *, force: bool = False) -> Outcome:
    """The reference semantics of a plan, one step at a time (an executor may run a stage's steps
    at once): `run` returns a step's exit status. A non-zero exit stops the operation, unless it is
    a destroy that `force` may pass (``allow_force``); when the failing step is blocking (a gate
    before anything is released) the plan's `on_abort` stages run too."""
    outcome = Outcome(completed=False)
    for stage in plan.stages:
        for step in stage.steps:
            outcome.ran.append(step)
            code = run(step)
            if code == 0:
                continue
            if force and step.allow_force:
                outcome.forced.append(step)
                continue
            outcome.failed, outcome.exit_code = step, code
            if step.blocking:
                outcome.aborted = True
                for cleanup in plan.on_abort:
                    for undo in cleanup.steps:
                        outcome.ran.append(undo)
                        run(undo)
            return outcome
    outcome.completed = True
    return outcome
