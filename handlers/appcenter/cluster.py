"""The rendered cluster definition (spec §3) as typed pydantic models, with its bounds and defaults.

`parse_cluster` validates the rendered JSON and then what a schema cannot say (node roles against
the form's roles, the node total, disks, which service needs a ``cmd``), and reports every
problem at once, each naming its place (``cluster.json.mustache nodes[0].services.start.timeout``).
Unknown keys are kept (``multi_zone_policy``, a ``selector`` in ``backup``, a ``change_vxnet``
service holding only ``pre_check``). Where the spec's bound is contradicted by a real package (more
than 50 monitor items, a container type other than kvm/docker) it is a warning.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Mapping, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .config import Config
from .problems import InvalidPackage, Problem, WARNING

TEMPLATE = "cluster.json.mustache"

SYSTEM_SERVICES = ("init", "start", "stop", "scale_out", "scale_in", "restart", "destroy", "upgrade",
                   "rollback", "get_nodes_order", "backup", "restore", "delete_snapshot")
CUSTOM = "custom"
#: Service attributes and the services they apply to (§3.3); elsewhere they are ignored (a warning).
APPLIES_TO = {
    "post_start_service": ("init", "upgrade"),
    "post_stop_service": ("destroy",),
    "pre_check": ("scale_in", "scale_out", "change_vxnet"),
    "allow_force": ("destroy",),
    "event": ("get_nodes_order",),
    "with_replica": ("backup", "restore"),
}
DEFAULT_TIMEOUT, MAX_TIMEOUT = 600, 86400
MAX_MONITOR_ITEMS, MAX_GROUP_ITEMS, MAX_TABS = 50, 5, 5
CONTAINER_TYPES = ("kvm", "docker")
#: Per-disk volume size caps by volume class (§2.5): performance 1000 GiB, capacity 5000 GiB.
DISK_CAPS = {0: 1000, 2: 5000, 6: 5000}
REPLICA_SUFFIX = "-replica"
_PORT_RANGE = re.compile(r"\d{1,5}-\d{1,5}", re.ASCII)


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class HealthCheck(_Model):
    enable: bool = False
    interval_sec: int = Field(60, ge=60)
    timeout_sec: int = Field(10, ge=3)
    action_timeout_sec: int = Field(30, ge=3)
    healthy_threshold: int = Field(3, ge=2)
    unhealthy_threshold: int = Field(3, ge=2)
    check_cmd: str | None = None
    action_cmd: str | None = None

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> "HealthCheck":
        if self.timeout_sec > self.interval_sec:
            raise ValueError("timeout_sec must not exceed interval_sec")
        return self


INT_STATISTICS = ("min", "max", "avg", "delta", "rate", "mode", "median", "latest")
STR_STATISTICS = ("mode", "latest")


class MonitorItem(_Model):
    unit: str = ""
    value_type: Literal["int", "str"] = "int"
    #: None until `Monitor` fills the value type's default (avg for int, latest for str).
    statistics_type: Literal["min", "max", "avg", "delta", "rate", "mode", "median", "latest"] | None = None
    enums: list[str] | None = None
    scale_factor_when_display: float = 1


class Monitor(_Model):
    enable: bool = False
    cmd: str | None = None
    items: dict[str, MonitorItem] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    display: list[str] = Field(default_factory=list)
    alarm: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> "Monitor":
        """Item defaults and rules by value type, and what groups, display and alarm name (one
        pass here rather than a validator per item: redis-standalone has 158 items)."""
        broken = []
        for name, item in self.items.items():
            if item.value_type == "str":
                if item.statistics_type is None:
                    item.statistics_type = "latest"
                elif item.statistics_type not in STR_STATISTICS:
                    broken.append(f"items.{name}: statistics_type of a str item must be one of {', '.join(STR_STATISTICS)}")
            else:
                if item.statistics_type is None:
                    item.statistics_type = "avg"
                if item.enums is not None:
                    broken.append(f"items.{name}: enums apply to str items only")
        broken += [f"groups.{name} must hold 1 to {MAX_GROUP_ITEMS} items" for name, members in self.groups.items()
                  if not 1 <= len(members) <= MAX_GROUP_ITEMS]
        broken += [f"groups.{name}: no item {member}" for name, members in self.groups.items()
                   for member in members if member not in self.items]
        broken += [f"display: {name} is neither a group nor an item" for name in self.display
                   if name not in self.groups and name not in self.items]
        broken += [f"alarm: no item {name}" for name in self.alarm if name not in self.items]
        if broken:
            raise ValueError("; ".join(broken))
        return self


class DisplayTab(_Model):
    cmd: str
    roles_to_execute_on: list[str] | None = None
    description: str = ""
    timeout: int = Field(10, ge=1, le=10)


class Service(_Model):
    type: str | None = None
    cmd: str | None = None
    order: int = Field(0, ge=0)
    nodes_to_execute_on: int | None = Field(None, ge=1)
    timeout: int = Field(DEFAULT_TIMEOUT, ge=1, le=MAX_TIMEOUT)
    post_start_service: bool = False
    post_stop_service: bool = False
    pre_check: str | None = None
    allow_force: bool = True
    event: list[Literal["upgrade", "rollback", "scale_vertical"]] | None = None
    service_params: dict[str, Any] | None = None
    with_replica: bool = False

    @property
    def custom(self) -> bool:
        return self.type == CUSTOM


class Container(_Model):
    type: str
    image: str
    zone: str | None = None


class Volume(_Model):
    size: int | None = Field(None, ge=0)
    mount_point: Union[str, list[str]] = "/data"
    mount_options: str | None = None
    filesystem: Literal["ext4", "xfs", "ntfs"] = "ext4"
    volume_class: int | None = Field(None, alias="class")

    @property
    def mount_points(self) -> list[str]:
        return [self.mount_point] if isinstance(self.mount_point, str) else list(self.mount_point)

    @model_validator(mode="after")
    def _mounts(self) -> "Volume":
        if not 1 <= len(self.mount_points) <= 3:
            raise ValueError("mount_point is a string or a list of 1 to 3")
        return self


class ReservedIp(_Model):
    value: str = ""


class CustomMetadata(_Model):
    cmd: str


#: The advanced actions and hidden node columns the spec lists (§3.1). Real packages name others
#: (QKE: ``attach_keypairs``, ``instance_class``); those are kept, with a warning.
ADVANCED_ACTIONS = ("change_vxnet", "scale_horizontal", "associate_eip")
EXCLUDE_NODE_COLUMNS = ("private_ip",)


class Node(_Model):
    role: str | None = None
    #: Set by `parse_cluster` when the template's one node omits ``role`` (the role is then filled
    #: in from config.json): its hosts sit directly under /hosts in the metadata (spec §8).
    role_omitted: bool = False
    container: Container
    count: int = Field(ge=0)
    cpu: int | None = None
    cpu_model: str | None = None
    memory: int | None = None
    instance_class: int | None = None
    gpu: int | None = None
    gpu_class: int | None = None
    volume: Volume | None = None
    replica: int = Field(0, ge=0)
    loadbalancer: list[Any] | None = None
    extra_quota: dict[str, Any] | None = None
    reserved_ips: dict[str, ReservedIp] | None = None
    passphraseless: Literal["ssh-dsa", "ssh-rsa"] | None = None
    vertical_scaling_policy: Literal["parallel", "sequential"] = "parallel"
    user_access: bool = False
    eip_class: Literal["base"] | None = None
    server_id_upper_bound: int | None = Field(None, ge=1)
    services: dict[str, Service] = Field(default_factory=dict)
    env: dict[str, Any] = Field(default_factory=dict)
    agent_installed: bool = True
    custom_metadata: CustomMetadata | None = None
    health_check: dict[str, Any] | None = None
    monitor: Monitor | None = None
    advanced_actions: list[str] | None = None

    @property
    def name(self) -> str:
        """The role (filled in by `parse_cluster` for a single-role package that omits it)."""
        return self.role or ""

    def custom_services(self) -> dict[str, Service]:
        return {name: service for name, service in self.services.items() if service.custom}


class Endpoint(_Model):
    #: A port number, or bound to env: ``env.<key>`` or ``<role>.env.<key>``.
    port: Union[int, str, None] = None
    protocol: str | None = None


class Cluster(_Model):
    name: str
    description: str
    vxnet: str
    need_tag: bool = False
    links: dict[str, Any] = Field(default_factory=dict)
    exclude_node_columns: list[str] = Field(default_factory=list)
    need_intranet_api_server: bool = False
    backup_policy: Literal["device", "custom"] | None = None
    incremental_backup_supported: bool = False
    upgrade_policy: list[str] = Field(default_factory=list)
    upgrading_policy: Literal["parallel", "sequential", "in-place-parallel", "in-place-sequential"] = "parallel"
    nodes: list[Node] = Field(min_length=1)
    env: dict[str, Any] = Field(default_factory=dict)
    advanced_actions: list[str] = Field(default_factory=list)
    endpoints: dict[str, Endpoint] = Field(default_factory=dict)
    reserved_ips: dict[str, ReservedIp] = Field(default_factory=dict)
    metadata_root_access: bool = False
    health_check: HealthCheck | None = None
    monitor: Monitor | None = None
    display_tabs: dict[str, DisplayTab] = Field(default_factory=dict, max_length=MAX_TABS)

    @model_validator(mode="before")
    @classmethod
    def _split_endpoints(cls, data: Any) -> Any:
        """``endpoints.reserved_ips`` is not an endpoint: it moves to `reserved_ips`."""
        if isinstance(data, dict) and isinstance(data.get("endpoints"), dict) and "reserved_ips" in data["endpoints"]:
            endpoints = dict(data["endpoints"])
            data = {**data, "endpoints": endpoints, "reserved_ips": endpoints.pop("reserved_ips")}
        return data

    @property
    def roles(self) -> dict[str, Node]:
        return {node.name: node for node in self.nodes}

    @property
    def hosts_by_role(self) -> bool:
        """Whether the metadata lists hosts by role (/hosts/<role>/<id>): not for a package whose
        one node omits ``role`` (/hosts/<id>, as its confd templates read ``/hosts/*/ip``)."""
        return not (len(self.nodes) == 1 and self.nodes[0].role_omitted)

    def node(self, role: str) -> Node:
        return self.roles[role]

    def health_check_for(self, role: str) -> HealthCheck | None:
        """The node's own fields over the cluster's (§3.4); None when neither defines one."""
        own = self.node(role).health_check
        if own is None:
            return self.health_check
        base = self.health_check.model_dump(exclude_unset=True) if self.health_check else {}
        return HealthCheck.model_validate({**base, **own})

    def monitor_for(self, role: str) -> Monitor | None:
        node = self.node(role)
        return node.monitor if node.monitor is not None else self.monitor

    def has_advanced_action(self, action: str, role: str | None = None) -> bool:
        own = self.node(role).advanced_actions if role is not None else None
        return action in (own if own is not None else self.advanced_actions)

    def endpoint_port(self, name: str) -> int | None:
        """An endpoint's port, following an env binding (``env.port``, ``node.env.port``)."""
        port = self.endpoints[name].port
        if port is None or isinstance(port, int):
            return port
        role, _, key = port.partition(".env.")
        env = self.node(role).env if key and role in self.roles else self.env
        found = env.get(key if key else port[len("env."):])
        if isinstance(found, str) and found.strip().isdigit():  # a string-typed env port ("8080")
            found = int(found.strip())
        if isinstance(found, int) and not isinstance(found, bool) and 0 < found <= 65535:
            return found
        return None  # unset, a range ("30000-32767"), or not a port


def _where(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return f"{TEMPLATE} {text}" if text else TEMPLATE


def _validation_problems(exc: ValidationError) -> list[Problem]:
    found = []
    for error in exc.errors(include_url=False):
        loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        message = error["msg"].removeprefix("Value error, ")
        found.append(Problem(_where(loc), message))
    return found


def _health_check_problems(cluster: Cluster) -> list[Problem]:
    """A node's health_check is checked merged over the cluster's (its own fields win)."""
    found = []
    for index, node in enumerate(cluster.nodes):
        if node.health_check is None:
            continue
        try:
            cluster.health_check_for(node.name)
        except ValidationError as exc:
            for problem in _validation_problems(exc):
                field = problem.where[len(TEMPLATE) + 1:]
                found.append(Problem(f"{TEMPLATE} nodes[{index}].health_check" + (f".{field}" if field else ""),
                                     problem.rule))
    return found


def _role_problems(cluster: Cluster, config: Config | None) -> list[Problem]:
    found: list[Problem] = []
    declared = config.cluster_roles if config is not None else ()
    seen: set[str] = set()
    for index, node in enumerate(cluster.nodes):
        where = f"{TEMPLATE} nodes[{index}].role"
        if node.role is None:
            if len(cluster.nodes) == 1 and len(declared) <= 1:
                node.role = declared[0] if declared else "node"  # one role may go unnamed (§3.2)
                node.role_omitted = True
            else:
                found.append(Problem(where, "role is required when there is more than one role"
                                     + (f" ({', '.join(declared)})" if declared else "")))
            continue
        if node.role.endswith(REPLICA_SUFFIX):
            found.append(Problem(where, "the suffix -replica is reserved for replica roles"))
        if declared and node.role not in declared:
            found.append(Problem(where, f"must equal a role of config.json's cluster section ({', '.join(declared)})"))
        if node.role in seen:
            found.append(Problem(where, f"role {node.role} appears twice"))
        seen.add(node.role)
    return found


def _unlisted(where: str, values: list[str] | None, listed: tuple[str, ...]) -> list[Problem]:
    """A warning per value the spec does not list (the platform evidently accepts more)."""
    return [Problem(f"{where}[{index}]", f"{value} is not one the spec lists ({', '.join(listed)}); kept", WARNING)
            for index, value in enumerate(values or ()) if value not in listed]


def _node_problems(cluster: Cluster) -> list[Problem]:
    found: list[Problem] = _unlisted(f"{TEMPLATE} exclude_node_columns", cluster.exclude_node_columns,
                                     EXCLUDE_NODE_COLUMNS)
    found += _unlisted(f"{TEMPLATE} advanced_actions", cluster.advanced_actions, ADVANCED_ACTIONS)
    if sum(node.count for node in cluster.nodes) <= 0:
        found.append(Problem(f"{TEMPLATE} nodes", "the cluster needs at least one node (the counts add up to 0)"))
    for index, node in enumerate(cluster.nodes):
        at = f"{TEMPLATE} nodes[{index}]"
        found += _unlisted(f"{at}.advanced_actions", node.advanced_actions, ADVANCED_ACTIONS)
        if node.container.type not in CONTAINER_TYPES:
            found.append(Problem(f"{at}.container.type", f"{node.container.type} is neither kvm nor docker", WARNING))
        if node.container.type == "docker" and node.container.zone:
            found.append(Problem(f"{at}.container.zone", "a docker container takes no zone", WARNING))
        volume = node.volume
        if volume is not None and volume.size:
            disks = len(volume.mount_points)
            if volume.size % (10 * disks):
                found.append(Problem(f"{at}.volume.size", f"split over {disks} disk(s), each must be a multiple of 10 GiB"))
            cap = DISK_CAPS.get(volume.volume_class) if volume.volume_class is not None else None
            if cap is not None and volume.size / disks > cap:
                found.append(Problem(f"{at}.volume.size", f"at most {cap} GiB per disk of class {volume.volume_class}"))
        for name, service in node.services.items():
            where = f"{at}.services.{name}"
            system = name in SYSTEM_SERVICES
            if not system and not service.custom and service.type is None and service.cmd is None:
                pass  # a holder of pre_check (change_vxnet) or another platform hook: kept as is
            elif service.type not in (None, CUSTOM):
                found.append(Problem(f"{where}.type", 'the only service type is "custom"'))
            elif service.cmd is None and not (name in ("backup", "restore", "delete_snapshot")
                                              and cluster.backup_policy != "custom"):
                found.append(Problem(f"{where}.cmd", "cmd is required"))
            given = service.model_fields_set
            for attribute, services in APPLIES_TO.items():
                if attribute in given and name not in services:
                    found.append(Problem(f"{where}.{attribute}", f"applies to {', '.join(services)} only; ignored",
                                         WARNING))
            if "service_params" in given and not (service.custom or name in (
                    "backup", "restore", "delete_snapshot")):
                found.append(Problem(f"{where}.service_params", "applies to custom, backup, restore and "
                                     "delete_snapshot services only; ignored", WARNING))
    for index, node in enumerate(cluster.nodes):
        if node.monitor is not None and len(node.monitor.items) > MAX_MONITOR_ITEMS:
            found.append(Problem(f"{TEMPLATE} nodes[{index}].monitor.items",
                                 f"{len(node.monitor.items)} items, more than the {MAX_MONITOR_ITEMS} the spec allows",
                                 WARNING))
    if cluster.monitor is not None and len(cluster.monitor.items) > MAX_MONITOR_ITEMS:
        found.append(Problem(f"{TEMPLATE} monitor.items", f"{len(cluster.monitor.items)} items, more than the "
                             f"{MAX_MONITOR_ITEMS} the spec allows", WARNING))
    roles = set(cluster.roles)
    for name, tab in cluster.display_tabs.items():
        missing = [role for role in tab.roles_to_execute_on or () if role not in roles]
        if missing:
            found.append(Problem(f"{TEMPLATE} display_tabs.{name}.roles_to_execute_on",
                                 f"no node role {', '.join(missing)}"))
    for name, endpoint in cluster.endpoints.items():
        port = endpoint.port
        if isinstance(port, int) and not 0 <= port <= 65535:
            found.append(Problem(f"{TEMPLATE} endpoints.{name}.port", "must be a port number (0-65535)"))
        elif isinstance(port, str) and _PORT_RANGE.fullmatch(port) \
                and all(int(end) <= 65535 for end in port.split("-")):  # QKE's NodePort range: kept as is
            found.append(Problem(f"{TEMPLATE} endpoints.{name}.port", f"{port} is a port range, which the spec does "
                                 "not list (a number or an env binding); kept, with no single port", WARNING))
        elif isinstance(port, str):
            role, _, key = port.partition(".env.")
            bound = (role in roles and key in cluster.node(role).env) if key else (
                port.startswith("env.") and port[4:] in cluster.env)
            if not bound:
                found.append(Problem(f"{TEMPLATE} endpoints.{name}.port",
                                     'must be a number, "env.<key>" or "<role>.env.<key>" naming an env entry'))
    return found


def parse_cluster(data: Any, config: Config | None = None) -> tuple[Cluster, list[Problem]]:
    """Rendered JSON -> (`Cluster`, warnings); raises `InvalidPackage` listing every problem."""
    try:
        cluster = Cluster.model_validate(data)
    except ValidationError as exc:
        raise InvalidPackage(_validation_problems(exc)) from None
    problems = _role_problems(cluster, config) + _health_check_problems(cluster) + _node_problems(cluster)
    if any(problem.severity != WARNING for problem in problems):
        raise InvalidPackage(problems)
    return cluster, problems


def role_counts(cluster: Cluster) -> Mapping[str, int]:
    """Role -> node count, replicas as ``<role>-replica`` (count x replica)."""
    counts: dict[str, int] = {}
    for node in cluster.nodes:
        counts[node.name] = node.count
        if node.replica:
            counts[node.name + REPLICA_SUFFIX] = node.count * node.replica
    return counts


__all__ = ["Cluster", "Node", "Service", "HealthCheck", "Monitor", "MonitorItem", "DisplayTab",
           "Endpoint", "Volume", "parse_cluster", "role_counts", "SYSTEM_SERVICES"]
