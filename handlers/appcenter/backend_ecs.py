"""Custom::AppCluster's `ecs` node backend: every node an ECS instance, every service command a
Cloud Assistant invocation, through the official `alibabacloud-ecs20140526` SDK (imported on first
use), the `NodeBackend` Protocol of `backends`.

* Nothing to lose with the process: a node is found by its tags (DescribeInstances `Tag
  appcenter:cluster`, paged), an invocation by its tags (DescribeInvocations `Tag
  appcenter:invocation`), so a restarted executor, in another process, picks up where the last
  one was. What the backend remembers only saves calls (the agents it saw running, the metadata it
  wrote on an instance) or holds a tree for a stopped node until its next command.
* Nodes: RunInstances, one node a call, `Amount` 1, `ClientToken` = cluster id + node id (hashed
  past 64 characters), so a retried step creates nothing twice; tags `appcenter:cluster`,
  `appcenter:role`, `appcenter:node`, `appcenter:sid`; `InstanceName` `<cluster>-<role>-<sid>`.
  The image is the role's setting, else the node's `container.image` when it is an ECS image
  (`m-...`, or a public image name ending `.vhd`; AppCenter's `img-...` ids are QingCloud's), else
  the default setting; none is an error naming the settings. The instance type is the setting
  (for every role, or `role=type` pairs), else the smallest of `INSTANCE_TYPES` with at least the
  role's cpu and memory (instance_class and gpu are not mapped: name such a type in the
  setting). `volume_size` becomes `DataDisk.1` (at least 20 GiB). Zone, VSwitch and security group
  are settings (or the NodeSpec's `placement` keys ZoneId, VSwitchId, SecurityGroupId,
  ResourceGroupId): the resource's Zone is AppCenter's, for replace_policy, not an ECS zone.
* DeleteInstances with `Force` (a missing node is done); Start/StopInstances (`SuccessFirst`; a
  node already on its way there is left alone, one going the other way is waited out first);
  vertical scaling is ModifyInstanceSpec and an upgrade's new image ReplaceSystemDisk, which ECS
  allows on a pay-as-you-go instance only while it is Stopped (the executor stops the nodes around
  `resize_nodes`); a larger `volume_size` is ResizeDisk of the node's data disk (DescribeDisks;
  `online` on a Running instance, `offline` on a Stopped one), a smaller one is refused (ECS disks
  never shrink), and so is a volume for a node created without one.
* Health (spec §3.4): `watch`/`unwatch` keep the plan in the health book beside the cluster store
  (`health_store`), `health` reads what the deployed provider's time trigger saw
  (`health_ecs.ecs_health_round`: the checks through Cloud Assistant); nothing runs between two
  timer invocations.
* Commands: RunCommand (RunShellScript, `Timeout`, `ClientToken` and tags from the cluster and the
  invocation, at most 100 instances a call) after DescribeCloudAssistantStatus reads "true" for
  every node; results from DescribeInvocationResults (Base64 output, decoded; `ExitCode`;
  `Timeout` read as timed out).
* Metadata (spec §8): `publish_metadata` writes, by a command, `<node dir>/metadata.json` (the
  node's `/self` tree) and `<node dir>/env.sh` (`export` lines of `metadata.environment`: the
  `APPCENTER_HOST_*`, `APPCENTER_CLUSTER_*`, `APPCENTER_ENV_*` variables the local backend gives
  too); every service command sources env.sh first and finds the file in `METADATA_FILE` and the
  folder in `APPCENTER_NODE_DIR`. The node dir is relative to the command's working directory
  (Cloud Assistant's default, `/root`; the local endpoint's, the instance's sandbox) unless absolute.
  Files past one command (16 KiB) go in Base64 chunks; `publish_metadata_many` writes several
  nodes side by side. A node not Running gets its tree before its next command.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import os
import re
import secrets
import shlex
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

from crhelper.cloud.credentials import Credentials, missing_hint, resolve
from crhelper.cloud.ecs import EcsSettings, sdk_client, sdk_error
from crhelper.cloud.poll import Done, Finished, OffPath, PollFailed, Waiting, is_throttling_or_server_error, poll
from crhelper.config import ConfigError, env_float
from crhelper.errors import Failure

from . import metadata
from .backends import MISSING, RUNNING, STARTING, STOPPED, STOPPING, BackendError, CommandResult, NodeInfo, NodeSpec

ENV_IMAGE = "CRHELPER_APPCENTER_ECS_IMAGE"
ENV_INSTANCE_TYPE = "CRHELPER_APPCENTER_ECS_INSTANCE_TYPE"
ENV_ZONE = "CRHELPER_APPCENTER_ECS_ZONE"
ENV_VSWITCH = "CRHELPER_APPCENTER_ECS_VSWITCH"
ENV_SECURITY_GROUP = "CRHELPER_APPCENTER_ECS_SECURITY_GROUP"
ENV_DISK_CATEGORY = "CRHELPER_APPCENTER_ECS_DISK_CATEGORY"
ENV_NODE_DIR = "CRHELPER_APPCENTER_ECS_NODE_DIR"
ENV_AGENT_TIMEOUT = "CRHELPER_APPCENTER_ECS_AGENT_TIMEOUT"

TAG_CLUSTER, TAG_ROLE, TAG_NODE, TAG_SID = "appcenter:cluster", "appcenter:role", "appcenter:node", "appcenter:sid"
TAG_INVOCATION, TAG_VOLUME = "appcenter:invocation", "appcenter:volume_size"
#: Where a node's command finds its folder (the local backend's name too); the metadata file's
#: path is in `metadata.ENV_FILE`.
NODE_DIR_VARIABLE = metadata.ENV_NODE_DIR

#: (instance type, vCPUs, memory MiB): the 1-vCPU shared s6 sizes and the c7 (2 GiB/vCPU), g7 (4)
#: and r7 (8) families from 2 to 64 vCPUs, the sizes AppCenter's cpu values (§2.5) come in.
_SIZES = (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("3xlarge", 12), ("4xlarge", 16), ("6xlarge", 24),
          ("8xlarge", 32), ("16xlarge", 64))
#: Sorted by vCPUs, then memory: the first that fits is the smallest.
INSTANCE_TYPES: tuple[tuple[str, int, int], ...] = tuple(sorted((
    ("ecs.s6-c1m1.small", 1, 1024), ("ecs.s6-c1m2.small", 1, 2048), ("ecs.s6-c1m4.small", 1, 4096),
    *((f"ecs.{family}.{size}", cpus, cpus * ratio * 1024)
      for family, ratio in (("c7", 2), ("g7", 4), ("r7", 8)) for size, cpus in _SIZES),
), key=lambda entry: (entry[1], entry[2])))
#: Cloud Assistant takes at most 18 KB of command; chunks of a published file stay below.
MAX_SCRIPT = 16 * 1024
#: Instances one RunCommand / Start / Stop / Delete / DescribeInstances call takes.
MAX_IDS = 100
#: Instances one DescribeCloudAssistantStatus call takes.
MAX_AGENT_IDS = 50
#: How much of a command's output a CommandResult keeps (its tail).
OUTPUT_TAIL = 4096
MIN_DATA_DISK = 20
ACTIVE_INVOCATION = ("Pending", "Running", "Stopping", "Scheduled")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INVOCATION = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


# --- settings ------------------------------------------------------------------------------------


def _per_role(env: Mapping[str, str], name: str) -> tuple[str, dict[str, str]]:
    """A setting that is one value for every role, or `role=value` pairs separated by commas
    (`*=value` for the others): (the default, {role: value})."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return "", {}
    if "=" not in raw:
        return raw, {}
    default, roles = "", {}
    for part in raw.split(","):
        role, sep, value = (piece.strip() for piece in part.partition("="))
        if not sep or not role or not value:
            raise ConfigError(f"{name}: one value, or role=value pairs separated by commas, got {raw!r}")
        if role == "*":
            default = value
        else:
            roles[role] = value
    return default, roles


@dataclasses.dataclass(frozen=True)
class EcsNodeSettings:
    """What the nodes are made of and where commands keep their files. `images`/`instance_types`
    map roles to values over the `image`/`instance_type` defaults; `zone`, `vswitch` and
    `security_group` are RunInstances' ZoneId, VSwitchId and SecurityGroupId (a NodeSpec's
    `placement` with those keys wins); `agent_timeout` is how long a node's Cloud Assistant may take
    to read "true"; `metadata_timeout` bounds the command that writes a node's metadata."""

    image: str = ""
    images: Mapping[str, str] = dataclasses.field(default_factory=dict)
    instance_type: str = ""
    instance_types: Mapping[str, str] = dataclasses.field(default_factory=dict)
    zone: str = ""
    vswitch: str = ""
    security_group: str = ""
    disk_category: str = "cloud_essd"
    node_dir: str = "appcenter"
    agent_timeout: float = 120.0
    metadata_timeout: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "EcsNodeSettings":
        """A bad value raises ConfigError naming the variable and the rule."""
        env = os.environ if env is None else env
        image, images = _per_role(env, ENV_IMAGE)
        instance_type, instance_types = _per_role(env, ENV_INSTANCE_TYPE)
        return cls(image=image, images=images, instance_type=instance_type, instance_types=instance_types,
                   zone=env.get(ENV_ZONE, ""), vswitch=env.get(ENV_VSWITCH, ""),
                   security_group=env.get(ENV_SECURITY_GROUP, ""),
                   disk_category=env.get(ENV_DISK_CATEGORY) or cls.disk_category,
                   node_dir=env.get(ENV_NODE_DIR) or cls.node_dir,
                   agent_timeout=env_float(env, ENV_AGENT_TIMEOUT, cls.agent_timeout, minimum=0.0, maximum=3600.0))


# --- pure pieces ---------------------------------------------------------------------------------


def instance_type_for(spec: NodeSpec, settings: EcsNodeSettings) -> str:
    """The role's setting, else the smallest INSTANCE_TYPES entry with the role's cpu and memory."""
    given = settings.instance_types.get(spec.role) or settings.instance_type
    if given:
        return given
    cpu, memory = spec.cpu or 1, spec.memory or 1024
    for name, cpus, mib in INSTANCE_TYPES:
        if cpus >= cpu and mib >= memory:
            return name
    raise BackendError(f"node {spec.node_id} (role {spec.role}): no instance type of the ecs backend has {cpu} vCPUs "
                       f"and {memory} MiB; set {ENV_INSTANCE_TYPE} (a type, or role=type pairs)")


def is_ecs_image(image: str) -> bool:
    """An ECS image id (`m-...`) or public image name (`ubuntu_22_04_x64_20G_alibase_20240101.vhd`)."""
    return image.startswith("m-") or image.endswith(".vhd")


def image_for(spec: NodeSpec, settings: EcsNodeSettings) -> str:
    found = settings.images.get(spec.role) or (spec.image if is_ecs_image(spec.image) else "") or settings.image
    if not found:
        raise BackendError(f"node {spec.node_id} (role {spec.role}): no ECS image: container.image "
                           f"{spec.image or '(none)'!r} is not one (m-... or *.vhd); set {ENV_IMAGE} "
                           "(an image, or role=image pairs)")
    return found


def client_token(*parts: str) -> str:
    """ECS's idempotency token (at most 64 ASCII characters) for these parts: them joined with `:`,
    or a hash of them when that is too long or not ASCII."""
    joined = ":".join(parts)
    if len(joined) <= 64 and joined.isascii():
        return joined
    return "ac-" + hashlib.sha256(joined.encode("utf-8")).hexdigest()[:61]


def host_name(role: str, sid: int) -> str:
    """`<role>-<sid>`, each run of what a Linux host name may not hold (or of hyphens) one `-`."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", f"{role}-{sid}").strip("-")
    return (name or f"node-{sid}")[:64]


def _exports(variables: Mapping[str, str]) -> str:
    for name in variables:
        if not _NAME.match(name):
            raise BackendError(f"environment variable name {name[:64]!r}: letters, digits and _ only, not first a digit")
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in variables.items())


def _node_dir(settings: EcsNodeSettings) -> str:
    """The node dir as the shell sees it: absolute as given, else below the working directory."""
    quoted = shlex.quote(settings.node_dir)
    return quoted if settings.node_dir.startswith("/") else f'"$PWD"/{quoted}'


def command_script(cmd: str, env: Mapping[str, str], settings: EcsNodeSettings) -> str:
    """`cmd` after the node's metadata environment (env.sh, when published) and `env`, in the
    same shell, so its exit status is the script's."""
    return (f"{NODE_DIR_VARIABLE}={_node_dir(settings)}; export {NODE_DIR_VARIABLE}\n"
            f'if [ -f "${NODE_DIR_VARIABLE}/env.sh" ]; then . "${NODE_DIR_VARIABLE}/env.sh"; fi\n'
            f'export {metadata.ENV_FILE}="${NODE_DIR_VARIABLE}/metadata.json"\n'
            f"{_exports(env)}{cmd}\n")


def file_scripts(files: Mapping[str, bytes], settings: EcsNodeSettings, limit: int = MAX_SCRIPT) -> list[str]:
    """Scripts that, run in order, replace each file of the node dir with its content at once:
    Base64 appended in chunks to `<name>.b64`, decoded to `<name>.tmp` and moved into place."""
    head = f'set -e\n{NODE_DIR_VARIABLE}={_node_dir(settings)}\nmkdir -p "${NODE_DIR_VARIABLE}"\n'
    room = limit - len(head) - 200

    def at(name: str) -> str:
        return f'"${NODE_DIR_VARIABLE}"/{shlex.quote(name)}'

    scripts: list[str] = []
    body = ""
    for name, content in files.items():
        encoded = base64.b64encode(content).decode("ascii")
        staged = at(name + ".b64")
        lines = [f": > {staged}\n"]
        lines += [f"printf '%s' '{encoded[start:start + room]}' >> {staged}\n" for start in range(0, len(encoded), room)]
        lines.append(f"base64 -d {staged} > {at(name + '.tmp')}\nmv {at(name + '.tmp')} {at(name)}\nrm -f {staged}\n")
        for line in lines:
            if body and len(body) + len(line) > room:
                scripts.append(head + body)
                body = ""
            body += line
    if body:
        scripts.append(head + body)
    return scripts


def command_result(row: Any) -> CommandResult | None:
    """A DescribeInvocationResults row as a CommandResult (None while it runs). A command that did
    not run to its own exit (Aborted, Error, a refused working directory) reads exit 1 or its own
    non-zero code, with Cloud Assistant's ErrorCode and ErrorInfo ahead of the output."""
    status = row.invocation_status or "Pending"
    if status in ACTIVE_INVOCATION:
        return None
    output = base64.b64decode(row.output or "").decode("utf-8", "replace")
    if row.dropped:
        output += f"\n[{row.dropped} more bytes dropped by Cloud Assistant]"
    output = output[-OUTPUT_TAIL:]
    code = int(row.exit_code or 0)
    if status == "Timeout":
        return CommandResult(exit_code=code, output=output, timed_out=True)
    if status == "Success":
        return CommandResult(exit_code=code, output=output)
    if row.error_code == "ExitCodeNonzero" and code:
        return CommandResult(exit_code=code, output=output)
    note = f"[Cloud Assistant: {status} {row.error_code or ''}: {row.error_info or ''}]".replace(" :", ":")
    return CommandResult(exit_code=code or 1, output=(note + "\n" + output)[-OUTPUT_TAIL:])


def _node_state(status: str | None) -> str:
    if status == "Pending":
        return STARTING
    return status if status in (RUNNING, STOPPED, STARTING, STOPPING) else MISSING


def _chunks(items: Sequence[str], size: int) -> list[list[str]]:
    return [list(items[at:at + size]) for at in range(0, len(items), size)]


def _items(body: Any, wrapper: str, field: str) -> list[Any]:
    return list(getattr(getattr(body, wrapper, None), field, None) or [])


def _tags(instance: Any) -> dict[str, str]:
    return {row.tag_key: row.tag_value or "" for row in _items(instance, "tags", "tag") if row.tag_key}


def _address(instance: Any) -> str:
    found = getattr(getattr(getattr(instance, "vpc_attributes", None), "private_ip_address", None), "ip_address", None)
    return (found or [""])[0]


# --- the backend ---------------------------------------------------------------------------------


@dataclasses.dataclass
class _Node:
    info: NodeInfo
    instance_type: str
    image_id: str
    tags: dict[str, str]


class EcsNodeBackend:
    """A `NodeBackend` over one account and region of ECS (`crhelper.cloud.ecs.EcsSettings`, shared
    with the boot-group backend: region, endpoint, call timeout and poll schedule). Thread-safe."""

    name = "ecs"
    #: Seconds between looks at running commands within one handler call (a look is one DescribeInvocationResults call: mind the API rate limits).
    check_interval = 1.0

    def __init__(self, ecs: EcsSettings, credentials: Credentials, nodes: EcsNodeSettings = EcsNodeSettings(), *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.ecs = ecs
        self.nodes = nodes
        self._credentials = credentials
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._client: Any = None
        #: (cluster, invocation) -> its InvokeIds
        self._invocations: dict[tuple[str, str], list[str]] = {}
        #: (cluster, node) -> (instance, digest of the files) last written there
        self._written: dict[tuple[str, str], tuple[str, str]] = {}
        #: instance id -> the node it is (from every DescribeInstances; an instance is only ever one node)
        self._node_of: dict[str, str] = {}
        #: Instances whose Cloud Assistant agent read "true" (until this backend stops or starts them)
        self._agents: set[str] = set()
        #: (cluster, node) -> a tree published while the node could not take it
        self._pending: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._health: Any = None

    @classmethod
    def from_env(cls, settings: Any = None, env: Mapping[str, str] | None = None, *,
                 context: object | None = None, region: str | None = None) -> "EcsNodeBackend":
        """Region and endpoint as the boot-group backend reads them (CRHELPER_ECS_REGION,
        CRHELPER_ECS_ENDPOINT...), node settings from CRHELPER_APPCENTER_ECS_* (or `settings` when it
        is an EcsNodeSettings), credentials from the FC context, else the environment."""
        import importlib.util

        if importlib.util.find_spec("alibabacloud_ecs20140526") is None:
            raise BackendError("Backend: the ecs backend needs alibabacloud-ecs20140526, which is not installed "
                               "(pip install 'alibabacloud-ecs20140526>=7.11')")

        credentials = resolve(context, env)
        if credentials is None:
            raise BackendError(f"the ecs backend has no Alibaba Cloud credentials: {missing_hint()}")
        try:
            ecs = EcsSettings.from_env(env, region=region)
        except Failure as failure:
            raise BackendError(failure.reason) from None
        nodes = settings if isinstance(settings, EcsNodeSettings) else EcsNodeSettings.from_env(env)
        return cls(ecs, credentials, nodes)

    def close(self) -> None:
        with self._lock:
            self._client = None

    # ------------------------------------------------------------------ the SDK
    def _sdk(self) -> tuple[Any, Any]:
        from alibabacloud_ecs20140526 import models

        with self._lock:
            if self._client is None:
                self._client = sdk_client(self.ecs, self._credentials)
            return self._client, models

    def _call(self, action: str, subject: str, send: Callable[[Any, Any], Any],
              accept: Callable[[Exception], bool] = lambda exc: False) -> Any:
        """`send(client, models).body`, Throttling and 5xx retried on the poll schedule for at most
        the call timeout; an error `accept` takes gives None; any other is a BackendError naming the
        action, the subject, the code and the request id."""

        client, models = self._sdk()

        def once() -> Any:
            try:
                return Done(send(client, models).body)
            except Exception as exc:
                if is_throttling_or_server_error(exc) or not accept(exc):
                    raise
                return Done(None)

        try:
            outcome = poll(once, deadline=self._clock() + self.ecs.call_timeout, settings=self.ecs.poll,
                           transient=is_throttling_or_server_error, what=f"ECS {action} of {subject}",
                           clock=self._clock, sleep=self._sleep)
        except Exception as exc:
            raise BackendError(sdk_error(exc, action, subject, self.ecs.endpoint)) from None
        if not isinstance(outcome, Finished):
            raise BackendError(f"ECS {action} of {subject} did not succeed within {self.ecs.call_timeout:g} s "
                               f"({getattr(outcome, 'reason', '') or getattr(outcome, 'state', '')})")
        return outcome.value

    # ------------------------------------------------------------------ nodes
    def _cluster_nodes(self, cluster_id: str) -> dict[str, _Node]:
        """Every instance tagged with the cluster, by node id (DescribeInstances, paged)."""
        found: dict[str, _Node] = {}
        token: str | None = None
        while True:
            def send(client: Any, models: Any, token: str | None = token) -> Any:
                return client.describe_instances(models.DescribeInstancesRequest(
                    region_id=self.ecs.region, max_results=MAX_IDS, next_token=token,
                    tag=[models.DescribeInstancesRequestTag(key=TAG_CLUSTER, value=cluster_id)]))

            body = self._call("DescribeInstances", f"cluster {cluster_id}", send)
            for instance in _items(body, "instances", "instance"):
                tags = _tags(instance)
                node_id = tags.get(TAG_NODE)
                if node_id and node_id not in found:
                    info = NodeInfo(node_id, instance.instance_id, _address(instance), _node_state(instance.status))
                    found[node_id] = _Node(info, instance.instance_type or "", instance.image_id or "", tags)
                    with self._lock:
                        self._node_of[instance.instance_id] = node_id
            token = getattr(body, "next_token", None) or None
            if token is None:
                return found

    def describe_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> dict[str, NodeInfo]:
        known = self._cluster_nodes(cluster_id)
        return {node_id: known[node_id].info if node_id in known else NodeInfo(node_id, "", "", MISSING)
                for node_id in node_ids}

    def _existing(self, cluster_id: str, node_ids: Sequence[str], call: str) -> dict[str, _Node]:
        known = self._cluster_nodes(cluster_id)
        missing = [node_id for node_id in node_ids if node_id not in known]
        if missing:
            raise BackendError(f"{call} of cluster {cluster_id}: no instance for node(s) {', '.join(missing)}")
        return {node_id: known[node_id] for node_id in node_ids}

    def create_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> dict[str, NodeInfo]:
        known = self._cluster_nodes(cluster_id)
        for spec in nodes:
            if spec.node_id not in known:
                self._run_instance(cluster_id, spec)
        return self.describe_nodes(cluster_id, [spec.node_id for spec in nodes])

    def _run_instance(self, cluster_id: str, spec: NodeSpec) -> None:
        image, instance_type = image_for(spec, self.nodes), instance_type_for(spec, self.nodes)
        placement = spec.placement
        tags = {TAG_CLUSTER: cluster_id, TAG_ROLE: spec.role, TAG_NODE: spec.node_id, TAG_SID: str(spec.sid)}
        if spec.volume_size:
            tags[TAG_VOLUME] = str(spec.volume_size)

        def send(client: Any, models: Any) -> Any:
            disks = ([models.RunInstancesRequestDataDisk(size=max(MIN_DATA_DISK, spec.volume_size),
                                                         category=self.nodes.disk_category)]
                     if spec.volume_size else None)
            return client.run_instances(models.RunInstancesRequest(
                region_id=self.ecs.region, amount=1, client_token=client_token(cluster_id, spec.node_id),
                image_id=image, instance_type=instance_type, instance_name=f"{cluster_id}-{spec.role}-{spec.sid}"[:128],
                host_name=host_name(spec.role, spec.sid), instance_charge_type="PostPaid",
                zone_id=placement.get("ZoneId") or self.nodes.zone or None,
                v_switch_id=placement.get("VSwitchId") or self.nodes.vswitch or None,
                security_group_id=placement.get("SecurityGroupId") or self.nodes.security_group or None,
                resource_group_id=placement.get("ResourceGroupId") or None, data_disk=disks,
                tag=[models.RunInstancesRequestTag(key=key, value=value) for key, value in tags.items()]))

        self._call("RunInstances", f"node {spec.node_id} of cluster {cluster_id}", send)

    def delete_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        known = self._cluster_nodes(cluster_id)
        ids = [known[node_id].info.instance_id for node_id in node_ids if node_id in known]
        for chunk in _chunks(ids, MAX_IDS):
            def send(client: Any, models: Any, chunk: list[str] = chunk) -> Any:
                return client.delete_instances(models.DeleteInstancesRequest(
                    region_id=self.ecs.region, instance_id=chunk, force=True))

            self._call("DeleteInstances", f"cluster {cluster_id}", send,
                       accept=lambda exc: getattr(exc, "code", "") == "InvalidInstanceId.NotFound")

    def start_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        self._power(cluster_id, node_ids, "StartInstances", target=RUNNING, passing=STOPPING, needed=STOPPED)

    def stop_nodes(self, cluster_id: str, node_ids: Sequence[str]) -> None:
        self._power(cluster_id, node_ids, "StopInstances", target=STOPPED, passing=STARTING, needed=RUNNING)

    def _power(self, cluster_id: str, node_ids: Sequence[str], action: str, *, target: str, passing: str,
               needed: str) -> None:
        """Send `action` to the nodes in `needed`, after waiting out those going the other way
        (`passing`); nodes on their way to `target` or there are left alone."""
        on_the_way = (target, STARTING if target == RUNNING else STOPPING)
        deadline = self._clock() + self.ecs.call_timeout
        pending = list(node_ids)
        while pending:
            nodes = self._existing(cluster_id, pending, action)
            ready = [n.info.instance_id for n in nodes.values() if n.info.state == needed]
            waiting = [node_id for node_id, n in nodes.items() if n.info.state == passing]
            odd = [f"{node_id} ({n.info.state})" for node_id, n in nodes.items()
                   if n.info.state not in (*on_the_way, needed, passing)]
            if odd:
                raise BackendError(f"{action} of cluster {cluster_id}: node(s) {', '.join(odd)}")
            for chunk in _chunks(ready, MAX_IDS):
                self._send_power(action, cluster_id, chunk)
            pending = waiting
            if pending:
                if self._clock() >= deadline:
                    raise BackendError(f"{action} of cluster {cluster_id}: node(s) {', '.join(pending)} still "
                                       f"{passing} after {self.ecs.call_timeout:g} s")
                self._sleep(self.ecs.poll.initial)

    def _send_power(self, action: str, cluster_id: str, instance_ids: list[str]) -> None:
        with self._lock:
            self._agents.difference_update(instance_ids)

        def send(client: Any, models: Any) -> Any:
            if action == "StartInstances":
                return client.start_instances(models.StartInstancesRequest(
                    region_id=self.ecs.region, instance_id=instance_ids, batch_optimization="SuccessFirst"))
            return client.stop_instances(models.StopInstancesRequest(
                region_id=self.ecs.region, instance_id=instance_ids, batch_optimization="SuccessFirst"))

        body = self._call(action, f"cluster {cluster_id}", send)
        refused = [row for row in _items(body, "instance_responses", "instance_response") if row.code != "200"]
        for row in refused:  # a race with another caller: fine when the instance is on its way
            if action == "StartInstances" and row.current_status in ("Pending", STARTING, RUNNING):
                continue
            if action == "StopInstances" and row.current_status in (STOPPING, STOPPED):
                continue
            raise BackendError(f"ECS {action} of instance {row.instance_id} (cluster {cluster_id}) failed: "
                               f"{row.code}: {row.message}")

    def resize_nodes(self, cluster_id: str, nodes: Sequence[NodeSpec]) -> None:
        """ModifyInstanceSpec for a new instance type, ReplaceSystemDisk for a new image (an upgrade
        that boots one); both only while the instance is Stopped; a larger volume_size is ResizeDisk of
        its data disk. What already matches is left alone, so a repeated call changes nothing."""
        known = self._existing(cluster_id, [spec.node_id for spec in nodes], "resize_nodes")
        for spec in nodes:
            node = known[spec.node_id]
            subject = f"node {spec.node_id} (instance {node.info.instance_id}, cluster {cluster_id})"
            changes = [(action, value) for action, value, now in (
                ("ModifyInstanceSpec", instance_type_for(spec, self.nodes), node.instance_type),
                ("ReplaceSystemDisk", image_for(spec, self.nodes), node.image_id)) if value != now]
            if changes and node.info.state != STOPPED:
                raise BackendError(f"{changes[0][0]} of {subject}: ECS changes a pay-as-you-go instance's type and "
                                   f"image only while it is Stopped; it is {node.info.state}")
            if spec.volume_size:
                self._resize_data_disk(node, spec.volume_size, subject)
            for action, value in changes:
                def send(client: Any, models: Any, action: str = action, value: str = value,
                         instance_id: str = node.info.instance_id) -> Any:
                    if action == "ModifyInstanceSpec":
                        return client.modify_instance_spec(models.ModifyInstanceSpecRequest(
                            instance_id=instance_id, instance_type=value))
                    return client.replace_system_disk(models.ReplaceSystemDiskRequest(
                        instance_id=instance_id, image_id=value))

                self._call(action, subject, send)

    def _resize_data_disk(self, node: _Node, volume_size: int, subject: str) -> None:
        """The node's first data disk to `volume_size` GiB (at least MIN_DATA_DISK): ResizeDisk when
        it is smaller, nothing when it has that size (a repeated step), refused when it is larger."""
        instance_id = node.info.instance_id

        def describe(client: Any, models: Any) -> Any:
            return client.describe_disks(models.DescribeDisksRequest(
                region_id=self.ecs.region, instance_id=instance_id, disk_type="data", max_results=100))

        disks = sorted(_items(self._call("DescribeDisks", subject, describe), "disks", "disk"),
                       key=lambda disk: disk.device or "")
        if not disks:
            raise BackendError(f"{subject}: volume_size {volume_size} GiB, but the instance has no data disk (the ecs "
                               "backend adds none to a node created without a volume)")
        disk, wanted = disks[0], max(MIN_DATA_DISK, volume_size)
        if int(disk.size or 0) == wanted:
            return
        if int(disk.size or 0) > wanted:
            raise BackendError(f"{subject}: volume_size {volume_size} GiB is smaller than its data disk {disk.disk_id} "
                               f"({disk.size} GiB); ECS disks cannot shrink")
        online = node.info.state == RUNNING and disk.category != "cloud"

        def resize(client: Any, models: Any) -> Any:
            return client.resize_disk(models.ResizeDiskRequest(
                disk_id=disk.disk_id, new_size=wanted, type="online" if online else "offline",
                client_token=client_token(disk.disk_id, str(wanted))))

        self._call("ResizeDisk", f"data disk {disk.disk_id} of {subject}", resize)

    # ------------------------------------------------------------------ commands
    def _wait_for_agents(self, cluster_id: str, instance_ids: Sequence[str]) -> None:
        """Until DescribeCloudAssistantStatus reads "true" for each instance (agent_timeout); an
        instance whose agent this backend saw running, and has not stopped or started since, is not
        asked again."""
        with self._lock:
            unknown = [instance_id for instance_id in instance_ids if instance_id not in self._agents]

        def look() -> Any:
            silent: list[str] = []
            for chunk in _chunks(unknown, MAX_AGENT_IDS):
                def send(client: Any, models: Any, chunk: list[str] = chunk) -> Any:
                    return client.describe_cloud_assistant_status(models.DescribeCloudAssistantStatusRequest(
                        region_id=self.ecs.region, instance_id=chunk, max_results=MAX_AGENT_IDS))

                body = self._call("DescribeCloudAssistantStatus", f"cluster {cluster_id}", send)
                on = {row.instance_id for row in _items(body, "instance_cloud_assistant_status_set",
                                                        "instance_cloud_assistant_status")
                      if row.cloud_assistant_status == "true"}
                silent += [instance_id for instance_id in chunk if instance_id not in on]
                with self._lock:
                    self._agents.update(on)
            unknown[:] = silent
            return Done(None) if not silent else Waiting(", ".join(silent))

        if not unknown:
            return

        outcome = poll(look, deadline=self._clock() + self.nodes.agent_timeout, settings=self.ecs.poll,
                       what=f"the Cloud Assistant agents of cluster {cluster_id}", clock=self._clock, sleep=self._sleep)
        if not isinstance(outcome, Finished):
            raise BackendError(f"cluster {cluster_id}: the Cloud Assistant agent of instance(s) "
                               f"{getattr(outcome, 'state', '') or getattr(outcome, 'reason', '')} did not read "
                               f"running within {self.nodes.agent_timeout:g} s (DescribeCloudAssistantStatus)")

    def _run_command(self, cluster_id: str, invocation: str, part: int, instance_ids: list[str], script: str,
                     timeout: float) -> str:
        """One RunCommand; a retry (same ClientToken) returns the first one's InvokeId."""
        def send(client: Any, models: Any) -> Any:
            return client.run_command(models.RunCommandRequest(
                region_id=self.ecs.region, instance_id=instance_ids, type="RunShellScript",
                command_content=script, content_encoding="PlainText", name=invocation,
                timeout=max(1, min(86400, math.ceil(timeout))),
                client_token=client_token(cluster_id, invocation, str(part)),
                tag=[models.RunCommandRequestTag(key=TAG_CLUSTER, value=cluster_id),
                     models.RunCommandRequestTag(key=TAG_INVOCATION, value=invocation)]))

        body = self._call("RunCommand", f"{invocation} of cluster {cluster_id}", send)
        return str(body.invoke_id)

    def _invoke_ids(self, cluster_id: str, invocation: str) -> list[str]:
        """The invocation's InvokeIds: remembered, else from DescribeInvocations by its tags."""
        with self._lock:
            known = self._invocations.get((cluster_id, invocation))
        if known:
            return list(known)
        found: list[str] = []
        token: str | None = None
        while True:
            def send(client: Any, models: Any, token: str | None = token) -> Any:
                return client.describe_invocations(models.DescribeInvocationsRequest(
                    region_id=self.ecs.region, max_results=50, next_token=token,
                    tag=[models.DescribeInvocationsRequestTag(key=TAG_CLUSTER, value=cluster_id),
                         models.DescribeInvocationsRequestTag(key=TAG_INVOCATION, value=invocation)]))

            body = self._call("DescribeInvocations", f"{invocation} of cluster {cluster_id}", send)
            found += [row.invoke_id for row in _items(body, "invocations", "invocation")]
            token = getattr(body, "next_token", None) or None
            if token is None:
                break
        if found:
            with self._lock:
                self._invocations[(cluster_id, invocation)] = found
        return found

    def start_command(self, cluster_id: str, invocation: str, node_ids: Sequence[str], cmd: str, *,
                      timeout: float, env: Mapping[str, str]) -> None:
        if not _INVOCATION.match(invocation):
            raise BackendError(f"invocation {invocation[:80]!r}: 1 to 64 letters, digits, ., _ and -")
        if self._invoke_ids(cluster_id, invocation):
            return
        script = command_script(cmd, env, self.nodes)
        if len(script.encode("utf-8")) > MAX_SCRIPT:
            raise BackendError(f"{invocation} of cluster {cluster_id}: the command with its environment is "
                               f"{len(script.encode('utf-8'))} bytes; Cloud Assistant takes at most {MAX_SCRIPT}")
        nodes = self._existing(cluster_id, node_ids, f"RunCommand {invocation}")
        off = [f"{node_id} ({node.info.state})" for node_id, node in nodes.items()
               if node.info.state not in (RUNNING, STARTING)]
        if off:
            raise BackendError(f"RunCommand {invocation} of cluster {cluster_id}: Cloud Assistant runs commands on "
                               f"running instances only; node(s) {', '.join(off)}")
        instance_ids = [node.info.instance_id for node in nodes.values()]
        self._wait_for_agents(cluster_id, instance_ids)
        with self._lock:
            pending = {node_id: (node.info.instance_id, self._pending[(cluster_id, node_id)])
                       for node_id, node in nodes.items() if (cluster_id, node_id) in self._pending}
        self._write_metadata(cluster_id, pending)
        invoke_ids = [self._run_command(cluster_id, invocation, part, chunk, script, timeout)
                      for part, chunk in enumerate(_chunks(instance_ids, MAX_IDS))]
        with self._lock:
            self._invocations[(cluster_id, invocation)] = invoke_ids

    def _result_rows(self, cluster_id: str, invocation: str, invoke_id: str) -> Iterator[Any]:
        token: str | None = None
        while True:
            def send(client: Any, models: Any, token: str | None = token) -> Any:
                return client.describe_invocation_results(models.DescribeInvocationResultsRequest(
                    region_id=self.ecs.region, invoke_id=invoke_id, content_encoding="Base64",
                    max_results=50, next_token=token))

            body = getattr(self._call("DescribeInvocationResults", f"{invocation} of cluster {cluster_id}", send),
                           "invocation", None)
            yield from _items(body, "invocation_results", "invocation_result")
            token = getattr(body, "next_token", None) or None
            if token is None:
                return

    def command_results(self, cluster_id: str, invocation: str) -> dict[str, CommandResult | None]:
        """Per node with a row in the invocation's results (an instance this backend never listed
        and that no longer exists cannot be named, and is left out)."""
        invoke_ids = self._invoke_ids(cluster_id, invocation)
        if not invoke_ids:
            raise BackendError(f"cluster {cluster_id}: no invocation {invocation!r} was started")
        rows = [row for invoke_id in invoke_ids for row in self._result_rows(cluster_id, invocation, invoke_id)]
        with self._lock:
            unknown = any(row.instance_id not in self._node_of for row in rows)
        if unknown:  # an instance this backend has not listed yet (an instance id is never another node's)
            self._cluster_nodes(cluster_id)
        with self._lock:
            named = [(self._node_of.get(row.instance_id), row) for row in rows]
        return {node_id: command_result(row) for node_id, row in named if node_id is not None}

    def forget_invocations(self, cluster_id: str, invocations: Sequence[str]) -> None:
        """Drop what this backend remembers of finished invocations (a warm provider runs health
        checks for days: each round's invocations are read once)."""
        with self._lock:
            for invocation in invocations:
                self._invocations.pop((cluster_id, invocation), None)

    # ------------------------------------------------------------------ health
    def _health_book(self) -> Any:
        from .health_store import open_health_book

        with self._lock:
            if self._health is None:
                self._health = open_health_book()
            return self._health

    def watch(self, cluster_id: str, checks: Sequence[Mapping[str, Any]], owner: str) -> None:
        """Run `checks` (health.NodeChecks as JSON) on the time trigger from now on; the health of
        nodes no longer in them is dropped, that of the others kept."""
        plan = [dict(check) for check in checks]
        wanted = {str(check["node_id"]) for check in plan}

        def change(doc: dict[str, Any]) -> None:
            doc.update(plan=plan, watching=bool(plan), owner=owner)
            for key in ("nodes", "due"):
                doc[key] = {node: value for node, value in (doc.get(key) or {}).items() if node in wanted}

        self._health_book().update(cluster_id, change)

    def unwatch(self, cluster_id: str) -> None:
        """No checks (nor actions) until the next `watch`; what they saw last stays readable."""
        def change(doc: dict[str, Any]) -> bool:
            if not doc.get("watching"):
                return False
            doc["watching"] = False
            return True

        self._health_book().update(cluster_id, change)

    def health(self, cluster_id: str) -> dict[str, Any] | None:
        """What the time trigger's checks saw last ({"updated", "nodes"}), None before the first round."""
        from .health_store import status_of

        return status_of(self._health_book().get(cluster_id))

    # ------------------------------------------------------------------ metadata
    def publish_metadata(self, cluster_id: str, node_id: str, tree: Mapping[str, Any]) -> None:
        """Write metadata.json and env.sh into the node dir by commands, and wait for them. The tree
        this backend last wrote on the same instance is not written again; a node that is not Running
        (no agent to run the write) gets it before its next command from this backend."""
        self.publish_metadata_many(cluster_id, {node_id: tree})

    def publish_metadata_many(self, cluster_id: str, trees: Mapping[str, Mapping[str, Any]]) -> None:
        """`publish_metadata` of several nodes at once: one DescribeInstances, one agent check, and the
        nodes' writes side by side (each node's chunks in turn), so publishing to a cluster costs
        about what one node does."""
        nodes = self._existing(cluster_id, list(trees), "publish_metadata")
        ready: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for node_id, tree in trees.items():
            if nodes[node_id].info.state == RUNNING:
                ready[node_id] = (nodes[node_id].info.instance_id, tree)
            else:
                with self._lock:
                    self._pending[(cluster_id, node_id)] = tree
        self._write_metadata(cluster_id, ready)

    def _write_metadata(self, cluster_id: str, targets: Mapping[str, tuple[str, Mapping[str, Any]]]) -> None:
        """Write each node's tree on its instance ({node: (instance, tree)}), unless it is there already."""
        writes: dict[str, tuple[tuple[str, str], list[str]]] = {}
        for node_id, (instance_id, tree) in targets.items():
            files = {"metadata.json": json.dumps(tree, ensure_ascii=False, sort_keys=True).encode("utf-8"),
                     "env.sh": _exports(metadata.environment(tree)).encode("utf-8")}
            written = (instance_id, hashlib.sha256(b"\0".join(files.values())).hexdigest())
            with self._lock:
                self._pending.pop((cluster_id, node_id), None)
                if self._written.get((cluster_id, node_id)) == written:
                    continue
            writes[node_id] = (written, file_scripts(files, self.nodes))
        if not writes:
            return
        self._wait_for_agents(cluster_id, [written[0] for written, _ in writes.values()])
        publish = secrets.token_hex(6)  # each write runs anew (the same tree may come back after another)
        for part in range(max(len(scripts) for _, scripts in writes.values())):
            started: dict[str, tuple[str, str]] = {}
            for node_id, ((instance_id, _), scripts) in writes.items():
                if part < len(scripts):
                    label = f"metadata-{node_id}-{publish}-{part}"[-64:]
                    started[node_id] = (label, self._run_command(cluster_id, label, 0, [instance_id], scripts[part],
                                                                 self.nodes.metadata_timeout))
            for node_id, (label, invoke_id) in started.items():
                self._await(cluster_id, label, invoke_id, writes[node_id][0][0], node_id)
        with self._lock:
            for node_id, (written, _) in writes.items():
                self._written[(cluster_id, node_id)] = written

    def _await(self, cluster_id: str, label: str, invoke_id: str, instance_id: str, node_id: str) -> None:
        def look() -> Any:
            rows = [r for r in self._result_rows(cluster_id, label, invoke_id) if r.instance_id == instance_id]
            result = command_result(rows[0]) if rows else None
            if result is None:
                return Waiting(rows[0].invocation_status if rows else "no result yet")
            return Done(result) if result.ok else OffPath(result.output.strip()[-300:] or f"exit {result.exit_code}")

        outcome = poll(look, deadline=self._clock() + self.nodes.metadata_timeout, settings=self.ecs.poll,
                       what=f"writing the metadata of node {node_id}", clock=self._clock, sleep=self._sleep)
        if isinstance(outcome, PollFailed) and outcome.off_path:
            raise BackendError(f"writing the metadata of node {node_id} (cluster {cluster_id}) failed: {outcome.reason}")
        if not isinstance(outcome, Finished):
            raise BackendError(f"writing the metadata of node {node_id} (cluster {cluster_id}) did not finish "
                               f"within {self.nodes.metadata_timeout:g} s")


__all__ = ["EcsNodeBackend", "EcsNodeSettings", "INSTANCE_TYPES", "client_token", "command_result", "command_script",
           "file_scripts", "image_for", "instance_type_for"]
