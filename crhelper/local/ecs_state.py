"""The local ECS endpoint's world, as pure logic: instances and their state machine, Cloud Assistant
invocations and their statuses (`cloud-apis.md` §2). No sockets, no processes, no threads of its own.

Time comes from an injectable clock, and every transition waits a delay from `EcsTimings`, so tests
run a lifecycle in milliseconds or step a fake clock. Each change is recorded as a `Transition`;
whoever drives the fleet (`ecs_api`) drains them in order and makes them happen for real (boots the
instance's UserData, kills it on stop: `ecs_guest`).
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

PENDING, STARTING, RUNNING, STOPPING, STOPPED = "Pending", "Starting", "Running", "Stopping", "Stopped"
#: Not an ECS status: what a Transition says when an instance is released.
DELETED = "Deleted"
STATUSES = (PENDING, STARTING, RUNNING, STOPPING, STOPPED)
STOPPED_MODES = ("KeepCharging", "StopCharging", "Not-applicable")

# Per-instance invocation statuses (DescribeInvocationResults `InvocationStatus`).
INV_PENDING, INV_RUNNING, INV_SUCCESS, INV_FAILED = "Pending", "Running", "Success", "Failed"
INV_TIMEOUT, INV_ABORTED, INV_TERMINATED, INV_STOPPED = "Timeout", "Aborted", "Terminated", "Stopped"
INV_ACTIVE = (INV_PENDING, INV_RUNNING)
#: Terminal statuses that count as a failure in the aggregate.
INV_FAILURES = (INV_FAILED, INV_TIMEOUT, INV_ABORTED, INV_TERMINATED, "Error", "Invalid", "Cancelled")
PARTIAL_FAILED = "PartialFailed"

#: The actions that change a Stopped instance, and the field each sets.
STOPPED_CHANGES = {"ModifyInstanceSpec": "instance_type", "ReplaceSystemDisk": "image_id"}

#: Cloud Assistant keeps 24 KB of a command's output; `Dropped` counts the rest.
MAX_OUTPUT_BYTES = 24 * 1024

SYSTEM_DISK, DATA_DISK = "system", "data"
DISK_CATEGORIES = ("cloud", "cloud_efficiency", "cloud_ssd", "cloud_essd", "cloud_auto", "cloud_essd_entry")
#: (smallest, largest) GiB of a disk by type; a basic `cloud` data disk stops at 2000 GiB.
DISK_SIZES = {SYSTEM_DISK: (20, 2048), DATA_DISK: (20, 32768)}
BASIC_DATA_DISK_MAX = 2000


class EcsError(Exception):
    """An ECS API error: HTTP status, `Code` and `Message` as the real endpoint answers them."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def not_found(instance_id: str) -> EcsError:
    return EcsError(404, "InvalidInstanceId.NotFound",
                    f"The specified InstanceId does not exist: {instance_id[:64]!r}.")


def incorrect_status(instance: "Instance", action: str, allowed: str) -> EcsError:
    return EcsError(403, "IncorrectInstanceStatus",
                    f"The current status of the resource does not support this operation: {action} needs "
                    f"instance {instance.instance_id} {allowed}, it is {instance.status}.")


@dataclass(frozen=True)
class EcsTimings:
    """How long each transitory status lasts, in seconds (real ECS: seconds to a minute)."""

    pending: float = 1.0
    starting: float = 1.0
    stopping: float = 1.0
    #: Stopping under ForceStop / ForceReboot (the guest is cut off, not shut down).
    forced_stopping: float = 0.2

    @classmethod
    def uniform(cls, delay: float) -> "EcsTimings":
        return cls(delay, delay, delay, min(delay, cls.forced_stopping))


@dataclass
class Disk:
    """A cloud disk attached to an instance (DescribeDisks' Disk): released with it."""

    disk_id: str
    instance_id: str
    disk_type: str  #: SYSTEM_DISK | DATA_DISK
    size: int  #: GiB
    category: str = "cloud_essd"
    device: str = "/dev/xvda"
    created: float = 0.0


@dataclass
class Instance:
    """One instance as DescribeInstances shows it, plus where its state machine is headed."""

    instance_id: str
    region_id: str
    zone_id: str
    private_ip: str
    instance_name: str
    host_name: str
    instance_type: str = "ecs.local.small"
    image_id: str = "local_linux_x64"
    description: str = ""
    user_data: str = ""  #: base64, as RunInstances takes it
    tags: tuple[tuple[str, str], ...] = ()
    status: str = STOPPED
    stopped_mode: str = "Not-applicable"
    cloud_assistant: bool = True
    created: float = 0.0
    #: When the last power change (start, stop, reboot) was asked for.
    last_change: float = 0.0
    #: The status the instance moves to at `due`, and after that (a reboot: Starting then Running).
    path: tuple[str, ...] = ()
    due: float | None = None
    forced: bool = False
    #: The system disk first, then the data disks in RunInstances' DataDisk.N order.
    disks: list[Disk] = field(default_factory=list)

    def tag_value(self, key: str) -> str | None:
        return next((value for k, value in self.tags if k == key), None)


@dataclass(frozen=True)
class Transition:
    """`instance` went from `old` to `new` (DELETED when released) at `at`; `forced` for a hard stop."""

    instance: Instance
    old: str
    new: str
    at: float
    forced: bool = False


@dataclass
class InvocationTarget:
    """One instance's part of an invocation (DescribeInvocationResults' row)."""

    instance_id: str
    script: str = ""
    status: str = INV_PENDING
    exit_code: int | None = None
    output: bytes = b""
    dropped: int = 0
    error_code: str = ""
    error_info: str = ""
    start_time: float | None = None
    finish_time: float | None = None


@dataclass
class Invocation:
    """A RunCommand: what to run and, per instance, how it went."""

    invoke_id: str
    command_id: str
    command_type: str
    content: str
    name: str
    timeout: int
    working_dir: str
    username: str
    repeat_mode: str
    created: float
    parameters: dict[str, str]
    targets: dict[str, InvocationTarget] = field(default_factory=dict)
    #: RunCommand's `Tag.N.*`, which DescribeInvocations and DescribeInvocationResults filter on.
    tags: tuple[tuple[str, str], ...] = ()

    def tagged(self, wanted: Iterable[Mapping[str, str]]) -> bool:
        """Whether every wanted `{Key, Value}` is among the tags (a tag without Value: any value)."""
        mine = dict(self.tags)
        return all(tag.get("Key", "") in mine and ("Value" not in tag or mine[tag.get("Key", "")] == tag["Value"])
                   for tag in wanted)

    @property
    def status(self) -> str:
        return aggregate_status(target.status for target in self.targets.values())


def aggregate_status(statuses: Iterable[str]) -> str:
    """The invocation's `InvocationStatus` from its instances' (ECS's documented rule)."""
    found = list(statuses)
    for active in (INV_RUNNING, "Stopping", INV_PENDING):
        if active in found:
            return active
    successes = sum(status == INV_SUCCESS for status in found)
    failures = sum(status in INV_FAILURES for status in found)
    if successes and not failures:
        return INV_SUCCESS
    if failures and not successes:
        return INV_FAILED
    if successes and failures:
        return PARTIAL_FAILED
    return INV_STOPPED


def invoke_record_status(status: str) -> str:
    """The older per-instance vocabulary (`InvokeRecordStatus`, `InstanceInvokeStatus`)."""
    if status in INV_ACTIVE:
        return "Running"
    if status == INV_SUCCESS:
        return "Finished"
    if status == INV_STOPPED:
        return "Stopped"
    return "Failed"


def invoke_status(status: str) -> str:
    """The older aggregate vocabulary (`InvokeStatus`)."""
    return {INV_SUCCESS: "Finished", PARTIAL_FAILED: "PartialFinished", INV_PENDING: "Running"}.get(status, status)


def capped(output: bytes, limit: int = MAX_OUTPUT_BYTES) -> tuple[bytes, int]:
    """(the first `limit` bytes, how many were dropped)."""
    return output[:limit], max(0, len(output) - limit)


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_\-:]+)\s*\}\}")


def placeholders(content: str) -> list[str]:
    """The `{{name}}` names in a command, in order of first use (built-in `ACS::` names included)."""
    seen: list[str] = []
    for name in _PLACEHOLDER.findall(content):
        if name not in seen:
            seen.append(name)
    return seen


def fill(content: str, values: dict[str, str]) -> str:
    """Replace every `{{name}}` with its value (all must be known: see `placeholders`)."""
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], content)


def loopback_address(n: int) -> str:
    """The n-th address of 127/8 (n=2 is 127.0.0.2), skipping .0 and .255 in the last octet."""
    per_block = 254
    block, index = divmod(n - 1, per_block)
    return f"127.{(block >> 8) & 255}.{block & 255}.{index + 1}"


def _new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(10)


@dataclass(frozen=True)
class InstanceSpec:
    """What RunInstances (or a test) asks for; names get a suffix per instance when `unique_suffix`."""

    instance_name: str = ""
    host_name: str = ""
    unique_suffix: bool = False
    instance_type: str = "ecs.local.small"
    image_id: str = "local_linux_x64"
    zone_id: str = ""
    description: str = ""
    user_data: str = ""
    tags: tuple[tuple[str, str], ...] = ()
    cloud_assistant: bool = True
    system_disk: tuple[int, str] = (40, "cloud_essd")
    #: (size GiB, category) of each data disk.
    data_disks: tuple[tuple[int, str], ...] = ()


class Fleet:
    """Every instance and invocation of one local ECS account, guarded by one lock.

    Mutators check first and change nothing on error; each change appends Transitions that
    `drain` hands out once, in order. Call `advance` (under `lock`) before reading statuses."""

    def __init__(self, *, region_id: str = "cn-hangzhou", zone_id: str = "", timings: EcsTimings = EcsTimings(),
                 clock: Callable[[], float] = time.time, capacity: int = 10_000) -> None:
        self.region_id = region_id
        self.zone_id = zone_id or f"{region_id}-local"
        self.timings = timings
        self.clock = clock
        self.capacity = capacity
        self.lock = threading.RLock()
        self._instances: dict[str, Instance] = {}
        self._next_address = 2
        self._client_tokens: dict[str, tuple[tuple[object, ...], list[str]]] = {}
        #: RunCommand ClientToken -> (the request's fingerprint, its InvokeId)
        self._command_tokens: dict[str, tuple[tuple[object, ...], str]] = {}
        self._events: list[Transition] = []
        self.invocations: dict[str, Invocation] = {}

    # ------------------------------------------------------------------ reading
    def get(self, instance_id: str) -> Instance:
        instance = self._instances.get(instance_id)
        if instance is None:
            raise not_found(instance_id)
        return instance

    def find(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id)

    def instances(self) -> list[Instance]:
        """In creation order."""
        return list(self._instances.values())

    def drain(self) -> list[Transition]:
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ time
    def advance(self) -> None:
        """Apply every transition that is due, each at its own due time (a late call catches up)."""
        now = self.clock()
        for instance in self._instances.values():
            while instance.due is not None and instance.due <= now:
                at, new = instance.due, instance.path[0]
                instance.path = instance.path[1:]
                self._move(instance, new, at, instance.forced)
                instance.due = at + self._delay(new, instance.forced) if instance.path else None
                if not instance.path:
                    instance.forced = False

    def next_due(self) -> float | None:
        """The earliest pending transition, to sleep until."""
        return min((i.due for i in self._instances.values() if i.due is not None), default=None)

    def _delay(self, status: str, forced: bool) -> float:
        if status == PENDING:
            return self.timings.pending
        if status == STARTING:
            return self.timings.starting
        return self.timings.forced_stopping if forced else self.timings.stopping

    def _move(self, instance: Instance, new: str, at: float, forced: bool = False) -> None:
        old, instance.status = instance.status, new
        self._events.append(Transition(replace(instance), old, new, at, forced))

    def _begin(self, instance: Instance, path: Sequence[str], forced: bool = False) -> None:
        now = self.clock()
        instance.last_change = now
        instance.forced = forced
        self._move(instance, path[0], now, forced)
        instance.path = tuple(path[1:])
        instance.due = now + self._delay(path[0], forced) if instance.path else None

    # ------------------------------------------------------------------ creating
    def add(self, spec: InstanceSpec, status: str = STOPPED, instance_id: str | None = None) -> Instance:
        """A test's instance, already in a stable `status` (Running boots it), or Pending like RunInstances."""
        if status not in (STOPPED, RUNNING, PENDING):
            raise ValueError(f"status: an added instance starts Stopped, Running or Pending, not {status!r}")
        if instance_id is not None and instance_id in self._instances:
            raise ValueError(f"instance_id: {instance_id!r} exists already")
        if len(self._instances) >= self.capacity:
            raise EcsError(403, "OperationDenied.NoStock", f"The local endpoint holds at most {self.capacity} instances.")
        now = self.clock()
        address = loopback_address(self._next_address)
        self._next_address += 1
        instance_id = instance_id or _new_id("i-")
        instance = Instance(instance_id=instance_id, region_id=self.region_id, zone_id=spec.zone_id or self.zone_id,
                            private_ip=address, instance_name=spec.instance_name or instance_id,
                            host_name=spec.host_name or f"iZ{instance_id[2:]}Z", instance_type=spec.instance_type,
                            image_id=spec.image_id, description=spec.description, user_data=spec.user_data,
                            tags=spec.tags, status=STOPPED, cloud_assistant=spec.cloud_assistant,
                            created=now, last_change=now)
        for index, (size, category) in enumerate((spec.system_disk, *spec.data_disks)):
            instance.disks.append(Disk(_new_id("d-"), instance_id, DATA_DISK if index else SYSTEM_DISK, size, category,
                                       f"/dev/xvd{chr(ord('a') + index)}", now))
        self._instances[instance_id] = instance
        if status == RUNNING:
            self._move(instance, RUNNING, now)
        elif status == PENDING:
            self._begin(instance, (PENDING, STARTING, RUNNING))
        return instance

    def run_instances(self, spec: InstanceSpec, amount: int, min_amount: int, client_token: str,
                      fingerprint: tuple[object, ...]) -> list[str]:
        """RunInstances: `amount` new instances (at least `min_amount` or none), Pending → Running.

        The same ClientToken with the same request returns the first call's ids and creates nothing;
        with a different request it is refused."""
        if client_token and client_token in self._client_tokens:
            first, earlier = self._client_tokens[client_token]
            if first != fingerprint:
                raise EcsError(400, "IdempotentParameterMismatch",
                               f"ClientToken {client_token[:64]!r} was used before with other parameters.")
            return list(earlier)
        room = self.capacity - len(self._instances)
        count = min(amount, room)
        if count < min_amount:
            raise EcsError(403, "OperationDenied.NoStock",
                           f"Only {max(room, 0)} more instances fit (capacity {self.capacity}); "
                           f"MinAmount is {min_amount}.")
        ids: list[str] = []
        for index in range(1, count + 1):
            suffix = f"{index:03d}" if spec.unique_suffix and count > 1 else ""
            named = replace(spec, instance_name=spec.instance_name + suffix if spec.instance_name else "",
                            host_name=spec.host_name + suffix if spec.host_name else "")
            ids.append(self.add(named, PENDING).instance_id)
        if client_token:
            self._client_tokens[client_token] = (fingerprint, list(ids))
        return ids

    # ------------------------------------------------------------------ power
    def _in_status(self, instance_id: str, needed: str, action: str) -> Instance:
        instance = self.get(instance_id)
        if instance.status != needed:
            raise incorrect_status(instance, action, needed)
        return instance

    def check_start(self, instance_id: str) -> Instance:
        return self._in_status(instance_id, STOPPED, "StartInstances")

    def start(self, instance_id: str) -> Instance:
        instance = self.check_start(instance_id)
        self._begin(instance, (STARTING, RUNNING))
        return instance

    def check_stop(self, instance_id: str) -> Instance:
        return self._in_status(instance_id, RUNNING, "StopInstances")

    def stop(self, instance_id: str, forced: bool = False, stopped_mode: str = "") -> Instance:
        instance = self.check_stop(instance_id)
        instance.stopped_mode = stopped_mode or "KeepCharging"
        self._begin(instance, (STOPPING, STOPPED), forced)
        return instance

    def check_reboot(self, instance_id: str) -> Instance:
        return self._in_status(instance_id, RUNNING, "RebootInstances")

    def reboot(self, instance_id: str, forced: bool = False) -> Instance:
        instance = self.check_reboot(instance_id)
        self._begin(instance, (STOPPING, STARTING, RUNNING), forced)
        return instance

    def check_delete(self, instance_id: str, force: bool) -> Instance:
        instance = self.get(instance_id)
        if not force and instance.status != STOPPED:
            raise incorrect_status(instance, "DeleteInstances without Force=true", "Stopped")
        return instance

    def delete(self, instance_id: str, force: bool, force_stop: bool = True) -> None:
        instance = self.check_delete(instance_id, force)
        del self._instances[instance_id]
        self._events.append(Transition(replace(instance), instance.status, DELETED, self.clock(), force_stop))

    def check_stopped_change(self, instance_id: str, action: str) -> Instance:
        """The instance, when `action` (one of STOPPED_CHANGES) may change it: only while it is Stopped."""
        return self._in_status(instance_id, STOPPED, action)

    def change_stopped(self, instance_id: str, action: str, value: str) -> Instance:
        """ModifyInstanceSpec: a pay-as-you-go instance's new type; ReplaceSystemDisk: its new image
        (the sandbox, the local "disks", is kept)."""
        instance = self.check_stopped_change(instance_id, action)
        setattr(instance, STOPPED_CHANGES[action], value)
        return instance

    # ------------------------------------------------------------------ disks
    def disks(self) -> list[Disk]:
        """Every disk, by instance in creation order."""
        return [disk for instance in self._instances.values() for disk in instance.disks]

    def disk(self, disk_id: str) -> Disk:
        found = next((disk for disk in self.disks() if disk.disk_id == disk_id), None)
        if found is None:
            raise EcsError(404, "InvalidDiskId.NotFound", f"The specified disk does not exist: {disk_id[:64]!r}.")
        return found

    def check_resize(self, disk_id: str, new_size: int, online: bool) -> Disk:
        """ResizeDisk's rules: only larger, within the type's bounds; `online` (no restart) only on a
        Running instance and not for a basic disk; offline on a Running or Stopped one (the new size
        counts once it restarts; here at once)."""
        disk = self.disk(disk_id)
        instance = self.get(disk.instance_id)
        low, high = DISK_SIZES[disk.disk_type]
        if disk.disk_type == DATA_DISK and disk.category == "cloud":
            high = BASIC_DATA_DISK_MAX
        if new_size <= disk.size:
            raise EcsError(403, "InvalidDiskSize.TooSmall",
                           f"NewSize {new_size} GiB must be larger than the disk's size, {disk.size} GiB "
                           f"(a disk cannot shrink).")
        if not low <= new_size <= high:
            raise EcsError(400, "InvalidDiskSize.ValueNotSupported",
                           f"NewSize of a {disk.category} {disk.disk_type} disk: {low} to {high} GiB, got {new_size}.")
        if online and disk.category == "cloud":
            raise EcsError(403, "InvalidDiskCategory.NotSupported",
                           "A basic disk (cloud) cannot be resized online; use Type offline.")
        allowed = (RUNNING,) if online else (RUNNING, STOPPED)
        if instance.status not in allowed:
            raise incorrect_status(instance, f"ResizeDisk ({'online' if online else 'offline'})",
                                   " or ".join(allowed))
        return disk

    def resize_disk(self, disk_id: str, new_size: int, online: bool) -> Disk:
        disk = self.check_resize(disk_id, new_size, online)
        disk.size = new_size
        return disk

    def set_cloud_assistant(self, instance_id: str, enabled: bool) -> None:
        self.get(instance_id).cloud_assistant = enabled

    def tag(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """Add or replace tags, as a managing service does (ACK's `ack.aliyun.com`; Auto Scaling's
        `acs:autoscaling:scalingGroupId`, a system tag no RunInstances caller may set)."""
        instance = self.get(instance_id)
        merged = dict(instance.tags)
        merged.update(tags)
        instance.tags = tuple(merged.items())

    def agent_running(self, instance: Instance) -> bool:
        """What DescribeCloudAssistantStatus says: the agent is installed and its instance runs."""
        return instance.cloud_assistant and instance.status == RUNNING

    # ------------------------------------------------------------------ Cloud Assistant
    def check_agents(self, instance_ids: Sequence[str]) -> None:
        """RunCommand refuses an instance without the agent (a stopped one is accepted, then Aborted)."""
        for instance_id in instance_ids:
            if not self.get(instance_id).cloud_assistant:
                raise EcsError(403, "InvalidInstance.UnInstallCloudAssistant",
                               f"The Cloud Assistant agent is not installed on instance {instance_id}.")

    def invocation_for_token(self, client_token: str, fingerprint: tuple[object, ...]) -> Invocation | None:
        """The invocation an earlier RunCommand with this ClientToken made (then nothing runs again);
        the same token with other parameters is refused."""
        earlier = self._command_tokens.get(client_token) if client_token else None
        if earlier is None:
            return None
        if earlier[0] != fingerprint:
            raise EcsError(400, "IdempotentParameterMismatch",
                           f"ClientToken {client_token[:64]!r} was used before with other parameters.")
        return self.invocations.get(earlier[1])

    def invoke(self, invocation: Invocation, scripts: dict[str, str], client_token: str = "",
               fingerprint: tuple[object, ...] = ()) -> list[InvocationTarget]:
        """Record an invocation; instances not Running are Aborted at once. The targets to run are returned."""
        now = self.clock()
        runnable: list[InvocationTarget] = []
        for instance_id, script in scripts.items():
            target = InvocationTarget(instance_id, script)
            if self.get(instance_id).status != RUNNING:
                target.status, target.finish_time = INV_ABORTED, now
                target.error_code, target.error_info = "InstanceNotRunning", "the instance is not Running"
            else:
                runnable.append(target)
            invocation.targets[instance_id] = target
        self.invocations[invocation.invoke_id] = invocation
        if client_token:
            self._command_tokens[client_token] = (fingerprint, invocation.invoke_id)
        return runnable

    def invocation(self, invoke_id: str) -> Invocation:
        found = self.invocations.get(invoke_id)
        if found is None:
            raise EcsError(404, "InvalidInvokeId.NotFound", f"The specified InvokeId does not exist: {invoke_id[:64]!r}.")
        return found

    def active_tasks(self, instance_id: str) -> tuple[int, int]:
        """(commands running now, invocations ever) on one instance."""
        active = total = 0
        for invocation in self.invocations.values():
            target = invocation.targets.get(instance_id)
            if target is not None:
                total += 1
                active += target.status in INV_ACTIVE
        return active, total


def new_invoke_ids() -> tuple[str, str]:
    """(InvokeId, CommandId) for a RunCommand."""
    return _new_id("t-"), _new_id("c-")
