"""What the lifecycle executor asks of a node backend (local processes, ECS): one Protocol, no
implementation here. Each backend lives in its own module (`backend_local`, `backend_ecs`) and
satisfies it; `backend_for(name)` is the one place that picks one.

Everything is keyed by the cluster id and the executor's stable node ids (`cln-...`, the spec's
`node_id`), so every call is idempotent and a restarted executor can repeat the call it was in
the middle of: creating a node that exists returns it, deleting a missing one is done, starting a
command under an invocation id that already exists returns that invocation instead of running the
command twice. Service commands are asynchronous (start, then poll), because a lifecycle runs in
`InProgress` steps across processes: the command keeps running in its node (the supervisor daemon
locally, Cloud Assistant on ECS) while the worker that started it is gone.

A node sees its metadata (spec §8) as the tree the executor publishes: `publish_metadata` gives
the whole `/self` tree of one node (nested dicts of strings), the backend exposes it the way the
metadata service does (environment, a JSON file, an HTTP endpoint answering `/self/...`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, Sequence

# Node power states as the executor reads them (ECS names map onto these).
RUNNING, STOPPED, STARTING, STOPPING, MISSING = "Running", "Stopped", "Starting", "Stopping", "Missing"
BACKENDS = ("local", "ecs")


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """One node to create or resize: its stable id, its role and the sizes of the rendered cluster."""

    node_id: str
    role: str
    sid: int
    image: str = ""
    cpu: int | None = None
    memory: int | None = None
    volume_size: int | None = None
    instance_class: int | None = None
    #: Zone, ResourceGroup and whatever else a cloud backend needs (a VSwitch id, a security group).
    placement: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["placement"] = dict(self.placement)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NodeSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        values["placement"] = dict(values.get("placement") or {})
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What the backend made of a node: the instance behind it (`instance_id` may change after a
    stop and start on a cloud), its address and its power state."""

    node_id: str
    instance_id: str
    ip: str
    state: str = RUNNING

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "NodeInfo":
        return cls(node_id=str(data["node_id"]), instance_id=str(data["instance_id"]), ip=str(data["ip"]),
                   state=str(data.get("state", RUNNING)))


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """How one service command ended on one node. `exit_code` is negative for a signal; a timed
    out command is stopped and reads `timed_out` (its exit code then says how it was stopped).
    `output` is the tail of stdout and stderr together (a backend keeps at most a few KiB)."""

    exit_code: int
    output: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CommandResult":
        return cls(exit_code=int(data["exit_code"]), output=str(data.get("output", "")),
                   timed_out=bool(data.get("timed_out", False)))


class BackendError(RuntimeError):
    """A backend call that cannot be done (the message names the node and the call); the executor
    fails the step with it."""


class NodeBackend(Protocol):
    """The calls a cluster lifecycle makes. Each may raise (BackendError or the SDK's own error);
    the executor turns an exception into a failed step naming the node and the call."""

    #: "local" or "ecs", as in the resource's Backend property.
    name: str

    def create_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> dict[str, NodeInfo]:
        """Create the nodes that do not exist yet (by node id) and return all of them, running.
        Returning at once with some not yet Running is fine: the executor polls `describe_nodes`."""
        ...

    def describe_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> dict[str, NodeInfo]:
        """The nodes' instances and states from as few calls as the backend allows; a node that
        does not exist is present with state MISSING (instance_id and ip empty)."""
        ...

    def delete_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        """Release the nodes (their processes, instances, working directories); missing ones are done."""
        ...

    def start_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        """Power the nodes on (a running node is left alone)."""
        ...

    def stop_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        """Power the nodes off (their long-running service processes end; a stopped node is left alone)."""
        ...

    def resize_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> None:
        """Give the nodes the new sizes of `nodes` (cpu, memory, volume_size, instance_class); the
        executor stops and starts them around this call where the policy says so."""
        ...

    def publish_metadata(self, cluster_id: str, node_id: str, tree: Mapping[str, Any]) -> None:
        """Make `tree` (the node's whole `/self` tree of §8: nested dicts, string leaves) what the
        node's metadata service answers from now on; the previous tree is replaced."""
        ...

    def start_command(self, cluster_id: str, invocation: str, node_ids: Sequence[str], cmd: str, *,
                      timeout: float, env: Mapping[str, str]) -> None:
        """Run the shell command `cmd` on each node, each within `timeout` seconds, with the node's
        metadata environment plus `env`. `invocation` names this run (unique in the cluster; at
        most 64 letters, digits, `.`, `_` and `-`): starting it again does nothing, so a restarted
        executor never runs a command twice."""
        ...

    def command_results(self, cluster_id: str, invocation: str) -> dict[str, CommandResult | None]:
        """Per node of the invocation: its result, or None while the command still runs. A command
        past its timeout is stopped here (or by the backend's agent) and reported timed out.
        Raises BackendError for an invocation that was never started."""
        ...

    def close(self) -> None:
        """Release what the backend holds in this process (connections, clients)."""
        ...


class HealthWatch(Protocol):
    """Optional calls (a backend offers them or not; the provider looks them up with getattr): the
    cluster's health checks and monitor commands run by the backend while the cluster lives."""

    def watch(self, cluster_id: str, checks: Sequence[Mapping[str, Any]], owner: str) -> None:
        """Run `checks` (`health.NodeChecks` as JSON, one per node) from now on, replacing any
        before; `owner` labels what runs them (the stack resource's supervisor owner locally)."""
        ...

    def unwatch(self, cluster_id: str) -> None:
        """Stop running the cluster's checks (a lifecycle operation is about to run, or it is deleted)."""
        ...

    def health(self, cluster_id: str) -> Mapping[str, Any] | None:
        """What the checks saw last: {"updated": time, "nodes": {node_id: health.NodeHealth as JSON}}."""
        ...


class BatchPublish(Protocol):
    """An optional call (looked up with getattr; without it the executor calls `publish_metadata`
    once per node): every node's new `/self` tree in one call, so a backend that pays per call (a
    Cloud Assistant RunCommand, a supervisor round trip) pays once for the cluster."""

    def publish_metadata_many(self, cluster_id: str, trees: Mapping[str, Mapping[str, Any]]) -> None:
        """As `NodeBackend.publish_metadata` for each node id -> tree of `trees`, together."""
        ...
