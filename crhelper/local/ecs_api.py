"""The ECS API (2014-05-26) of the local endpoint as a function of one request: no sockets here.

Order of work: signature (ACS3-HMAC-SHA256, or RPC HMAC-SHA1), action and version, a queued fault,
parameters, then the fleet under its lock. Answers and errors have the shapes the SDK parses
(`cloud-apis.md` §1.5, §1.6). Transitions the fleet records go to `effects` in order (the guest
processes), and RunCommand's runnable targets to `launch`.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from crhelper.cloud.credentials import Credentials
from crhelper.cloud.signing import acs3, rpc
from crhelper.cloud.signing.core import SignatureRejected, WireRequest
from crhelper.cloud.signing.replay import ReplayCache
from crhelper.local.ecs_params import Params, invalid, missing, page
from crhelper.servers import ApiResponse
from crhelper.local.ecs_state import (
    DATA_DISK, DISK_CATEGORIES, DISK_SIZES, STATUSES, STOPPED_MODES, SYSTEM_DISK, Disk, EcsError, Fleet, Instance,
    InstanceSpec, Invocation, InvocationTarget, Transition,
    fill, invoke_record_status, invoke_status, new_invoke_ids, placeholders,
)

API_VERSION = "2014-05-26"
#: Parameters of the RPC signature itself, not of the call.
_SIGNING_PARAMETERS = ("Signature", "SignatureMethod", "SignatureVersion", "SignatureNonce", "SignatureType",
                       "Timestamp", "AccessKeyId", "Format", "Version", "Action")
_REDACTED_PARAMETERS = ("Password",)
MAX_USER_DATA = 32 * 1024
MAX_COMMAND_CONTENT = 18 * 1024
COMMAND_TYPES = ("RunShellScript", "RunBatScript", "RunPowerShellScript")
BATCH_MODES = ("AllTogether", "SuccessFirst")
#: Actions whose API has no RegionId (the instance id says where it is).
REGIONLESS_ACTIONS = ("ModifyInstanceSpec", "ReplaceSystemDisk", "ResizeDisk")
#: Tag keys only Alibaba's own services set (`acs:autoscaling:scalingGroupId`); a caller's are refused.
RESERVED_TAG_PREFIXES = ("aliyun", "acs:")

Effects = Callable[[Transition], None]
Launch = Callable[[Invocation, "list[InvocationTarget]"], None]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the endpoint understood it, for tests' assertions (Password never kept)."""

    request_id: str
    action: str
    parameters: dict[str, str]
    access_key_id: str
    signature_method: str
    status: int
    code: str
    at: float


@dataclass
class Fault:
    """A queued error for the next `times` calls of `action` (`*`: any action)."""

    action: str
    status: int
    code: str
    message: str
    times: int = 1
    retry_after: int | None = None


@dataclass
class _Call:
    request_id: str
    action: str = ""
    access_key_id: str = ""
    signature_method: str = ""
    parameters: dict[str, str] = field(default_factory=dict)


def _iso(epoch: float | None, minutes: bool = False) -> str:
    if epoch is None:
        return ""
    stamp = datetime.fromtimestamp(epoch, timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%MZ" if minutes else "%Y-%m-%dT%H:%M:%SZ")


def _json(status: int, body: Mapping[str, Any], request_id: str, extra: Mapping[str, str] | None = None) -> ApiResponse:
    headers = {"Content-Type": "application/json;charset=utf-8", "x-acs-request-id": request_id, **(extra or {})}
    return ApiResponse(status, headers, json.dumps(body, ensure_ascii=False).encode("utf-8"))


def error_body(error: EcsError, request_id: str, host: str) -> dict[str, Any]:
    return {"RequestId": request_id, "HostId": host, "Code": error.code, "Message": error.message,
            "Recommend": f"https://api.aliyun.com/troubleshoot?q={error.code}&product=Ecs"}


def instance_view(instance: Instance) -> dict[str, Any]:
    """DescribeInstances' Instance (the fields a caller reads; the model has ~70)."""
    return {
        "InstanceId": instance.instance_id, "InstanceName": instance.instance_name,
        "Description": instance.description, "Status": instance.status, "RegionId": instance.region_id,
        "ZoneId": instance.zone_id, "InstanceType": instance.instance_type, "ImageId": instance.image_id,
        "HostName": instance.host_name, "OSType": "linux", "OSName": "Local Linux (processes on this machine)",
        "Cpu": 1, "Memory": 1024, "CreationTime": _iso(instance.created, minutes=True),
        "StartTime": _iso(instance.last_change, minutes=True), "ExpiredTime": "2099-12-31T15:59Z",
        "InstanceChargeType": "PostPaid", "InternetChargeType": "PayByTraffic", "InstanceNetworkType": "vpc",
        "StoppedMode": instance.stopped_mode, "DeletionProtection": False, "Recyclable": False,
        "VpcAttributes": {"VpcId": "vpc-local", "VSwitchId": "vsw-local", "NatIpAddress": "",
                          "PrivateIpAddress": {"IpAddress": [instance.private_ip]}},
        "InnerIpAddress": {"IpAddress": []}, "PublicIpAddress": {"IpAddress": []},
        "EipAddress": {"AllocationId": "", "IpAddress": "", "InternetChargeType": ""},
        "SecurityGroupIds": {"SecurityGroupId": ["sg-local"]},
        "NetworkInterfaces": {"NetworkInterface": [{"NetworkInterfaceId": "eni-" + instance.instance_id[2:],
                                                    "PrimaryIpAddress": instance.private_ip, "Type": "Primary"}]},
        "Tags": {"Tag": [{"TagKey": key, "TagValue": value} for key, value in instance.tags]},
        "OperationLocks": {"LockReason": []},
    }


def _disk(params: Params, prefix: str, disk_type: str, default_size: int | None) -> tuple[int, str]:
    """(size GiB, category) of RunInstances' `SystemDisk.*` or one `DataDisk.N.*`."""
    low, high = DISK_SIZES[disk_type]
    if default_size is None and not params.has(prefix + "Size"):
        raise missing(prefix + "Size")
    size = params.integer(prefix + "Size", default_size or low, low, high)
    return size, params.choice(prefix + "Category", "cloud_essd", DISK_CATEGORIES)


def disk_view(disk: Disk, instance: Instance) -> dict[str, Any]:
    """DescribeDisks' Disk (the fields a caller reads)."""
    return {
        "DiskId": disk.disk_id, "DiskName": "", "Description": "", "Type": disk.disk_type, "Category": disk.category,
        "Size": disk.size, "Device": disk.device, "Status": "In_use", "InstanceId": disk.instance_id,
        "RegionId": instance.region_id, "ZoneId": instance.zone_id, "Portable": disk.disk_type == DATA_DISK,
        "DeleteWithInstance": True, "DeleteAutoSnapshot": True, "Encrypted": False,
        "ImageId": instance.image_id if disk.disk_type == SYSTEM_DISK else "",
        "CreationTime": _iso(disk.created, minutes=True), "AttachedTime": _iso(disk.created, minutes=True),
        "DiskChargeType": "PostPaid", "PerformanceLevel": "PL1" if disk.category == "cloud_essd" else "",
        "Tags": {"Tag": []}, "OperationLocks": {"OperationLock": []},
    }


def _output(target: InvocationTarget, encoding: str) -> str:
    if encoding == "PlainText":
        return target.output.decode("utf-8", "replace")
    return base64.b64encode(target.output).decode("ascii")


def result_view(invocation: Invocation, target: InvocationTarget, encoding: str) -> dict[str, Any]:
    """DescribeInvocationResults' InvocationResult."""
    return {
        "InstanceId": target.instance_id, "InvokeId": invocation.invoke_id, "CommandId": invocation.command_id,
        "InvocationStatus": target.status, "InvokeRecordStatus": invoke_record_status(target.status),
        "ExitCode": target.exit_code if target.exit_code is not None else 0,
        "Output": _output(target, encoding), "Dropped": target.dropped,
        "ErrorCode": target.error_code, "ErrorInfo": target.error_info,
        "StartTime": _iso(target.start_time), "FinishedTime": _iso(target.finish_time),
        "StopTime": "", "Repeats": 1, "Username": invocation.username or "root",
    }


def invocation_view(invocation: Invocation, include_output: bool, encoding: str) -> dict[str, Any]:
    """DescribeInvocations' Invocation, with its per-instance InvokeInstances."""
    rows = []
    for target in invocation.targets.values():
        rows.append({
            "InstanceId": target.instance_id, "InvocationStatus": target.status,
            "InstanceInvokeStatus": invoke_record_status(target.status),
            "ExitCode": target.exit_code if target.exit_code is not None else 0,
            "Output": _output(target, encoding) if include_output else "", "Dropped": target.dropped,
            "ErrorCode": target.error_code, "ErrorInfo": target.error_info,
            "StartTime": _iso(target.start_time), "FinishTime": _iso(target.finish_time),
            "CreationTime": _iso(invocation.created), "UpdateTime": _iso(target.finish_time or target.start_time),
            "Repeats": 1, "Timed": False,
        })
    status = invocation.status
    return {
        "InvokeId": invocation.invoke_id, "CommandId": invocation.command_id, "CommandName": invocation.name,
        "CommandType": invocation.command_type,
        "CommandContent": base64.b64encode(invocation.content.encode("utf-8")).decode("ascii"),
        "InvocationStatus": status, "InvokeStatus": invoke_status(status), "RepeatMode": invocation.repeat_mode,
        "Timeout": invocation.timeout, "CreationTime": _iso(invocation.created),
        "WorkingDir": invocation.working_dir, "Username": invocation.username,
        "Parameters": json.dumps(invocation.parameters), "Timed": False,
        "Tags": {"Tag": [{"TagKey": key, "TagValue": value} for key, value in invocation.tags]},
        "InvokeInstances": {"InvokeInstance": rows},
    }


class EcsApi:
    """Authenticates, routes and answers ECS calls against one Fleet."""

    def __init__(self, fleet: Fleet, keys: Mapping[str, Credentials], *, effects: Effects, launch: Launch,
                 nonces: ReplayCache | None, max_clock_skew: float = 900.0,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.fleet = fleet
        self._keys = keys
        self._effects = effects
        self._launch = launch
        self._nonces = nonces
        self._max_skew = max_clock_skew
        self._wall = wall_clock
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._records: list[RecordedRequest] = []
        self._actions: dict[str, Callable[[Params], dict[str, Any]]] = {
            "StartInstances": self._start_instances, "StopInstances": self._stop_instances,
            "RebootInstances": self._reboot_instances, "DescribeInstanceStatus": self._describe_instance_status,
            "DescribeInstances": self._describe_instances, "RunInstances": self._run_instances,
            "DeleteInstances": self._delete_instances, "ModifyInstanceSpec": self._modify_instance_spec,
            "ReplaceSystemDisk": self._replace_system_disk,
            "DescribeCloudAssistantStatus": self._describe_cloud_assistant_status,
            "RunCommand": self._run_command, "DescribeInvocationResults": self._describe_invocation_results,
            "DescribeInvocations": self._describe_invocations,
            "DescribeDisks": self._describe_disks, "ResizeDisk": self._resize_disk,
        }

    @property
    def actions(self) -> list[str]:
        return sorted(self._actions)

    # ------------------------------------------------------------------ harness
    def inject(self, fault: Fault) -> None:
        if fault.action != "*" and fault.action not in self._actions:
            raise ValueError(f"action: {fault.action!r} is not one of {', '.join(self.actions)} (or '*')")
        with self._lock:
            self._faults.append(fault)

    def records(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    def clear_records(self) -> None:
        with self._lock:
            self._records.clear()

    def sync(self) -> None:
        """Apply due transitions and hand every recorded one to `effects`, in order."""
        with self.fleet.lock:
            self.fleet.advance()
            for transition in self.fleet.drain():
                self._effects(transition)

    # ------------------------------------------------------------------ one request
    def handle(self, request: WireRequest) -> ApiResponse:
        call = _Call(request_id=str(uuid.uuid4()).upper())
        host = request.header("host") or "ecs.local"
        headers: dict[str, str] = {}
        error: EcsError | None = None
        try:
            body = self._handle(request, call)
        except SignatureRejected as rejected:
            error = EcsError(rejected.status, rejected.code, rejected.message)
        except _Injected as injected:
            error = injected.error
            if injected.retry_after is not None:
                headers["x-acs-retry-after"] = str(injected.retry_after)
        except EcsError as refused:
            error = refused
        status, code = (200, "") if error is None else (error.status, error.code)
        if error is not None:
            body = error_body(error, call.request_id, host)
        body.setdefault("RequestId", call.request_id)
        with self._lock:
            self._records.append(RecordedRequest(call.request_id, call.action, call.parameters, call.access_key_id,
                                                 call.signature_method, status, code, self._wall()))
        return _json(status, body, call.request_id, headers)

    def _authenticate(self, request: WireRequest, call: _Call) -> dict[str, str]:
        parameters = rpc.request_parameters(request)
        now = self._wall()
        if request.header("authorization") or "Signature" not in parameters:
            call.signature_method = acs3.ALGORITHM
            call.access_key_id = acs3.verify(request, self._keys, now=now, nonces=self._nonces, max_skew=self._max_skew)
        else:
            call.signature_method = rpc.SIGNATURE_METHOD
            call.access_key_id = rpc.verify(request, self._keys, now=now, nonces=self._nonces, max_skew=self._max_skew)
        return parameters

    def _handle(self, request: WireRequest, call: _Call) -> dict[str, Any]:
        call.action = request.header("x-acs-action") or rpc_parameter(request, "Action")
        parameters = self._authenticate(request, call)
        call.action = request.header("x-acs-action") or parameters.get("Action", "")
        call.parameters = {name: ("******" if name in _REDACTED_PARAMETERS else value)
                           for name, value in parameters.items() if name not in _SIGNING_PARAMETERS}
        if not call.action:
            raise missing("Action")
        version = request.header("x-acs-version") or parameters.get("Version", "")
        if not version:
            raise missing("Version")
        if version != API_VERSION:
            raise EcsError(400, "InvalidVersion", f"Specified parameter Version is not valid: ECS is {API_VERSION}, "
                                                  f"got {version[:32]!r}.")
        handler = self._actions.get(call.action)
        if handler is None:
            raise EcsError(404, "InvalidAction.NotFound",
                           f"Specified api is not found, please check your url and method: {call.action[:64]!r} "
                           f"(this endpoint serves {', '.join(self.actions)}).")
        self._take_fault(call.action)
        params = Params({name: value for name, value in parameters.items() if name not in _SIGNING_PARAMETERS})
        region = params.text("RegionId") if call.action in REGIONLESS_ACTIONS else params.required("RegionId")
        if region and region != self.fleet.region_id:
            raise EcsError(404, "InvalidRegionId.NotFound",
                           f"The specified RegionId does not exist: {region[:32]!r} (this endpoint is "
                           f"{self.fleet.region_id}).")
        self.sync()
        try:
            with self.fleet.lock:
                return handler(params)
        finally:
            self.sync()

    def _take_fault(self, action: str) -> None:
        with self._lock:
            for fault in self._faults:
                if fault.action in ("*", action) and fault.times > 0:
                    fault.times -= 1
                    self._faults = [f for f in self._faults if f.times > 0]
                    raise _Injected(EcsError(fault.status, fault.code, fault.message), fault.retry_after)

    # ------------------------------------------------------------------ power actions
    def _power(self, params: Params, check: Callable[[str], Instance], act: Callable[[str], Instance]) -> dict[str, Any]:
        ids = params.required_list("InstanceId", 100)
        mode = params.choice("BatchOptimization", "AllTogether", BATCH_MODES)
        dry_run = params.boolean("DryRun")
        if mode == "AllTogether" or dry_run:
            for instance_id in ids:
                check(instance_id)
            if dry_run:
                raise dry_run_passed()
        rows = []
        for instance_id in ids:
            before = self.fleet.find(instance_id)
            previous = before.status if before else ""
            try:
                after = act(instance_id)
            except EcsError as error:
                rows.append({"InstanceId": instance_id, "Code": error.code, "Message": error.message,
                             "PreviousStatus": previous, "CurrentStatus": previous})
            else:
                rows.append({"InstanceId": instance_id, "Code": "200", "Message": "success",
                             "PreviousStatus": previous, "CurrentStatus": after.status})
        return {"InstanceResponses": {"InstanceResponse": rows}}

    def _start_instances(self, params: Params) -> dict[str, Any]:
        return self._power(params, self.fleet.check_start, self.fleet.start)

    def _stop_instances(self, params: Params) -> dict[str, Any]:
        forced = params.boolean("ForceStop")
        mode = params.choice("StoppedMode", "", STOPPED_MODES)
        return self._power(params, self.fleet.check_stop, lambda i: self.fleet.stop(i, forced, mode))

    def _reboot_instances(self, params: Params) -> dict[str, Any]:
        forced = params.boolean("ForceReboot")
        return self._power(params, self.fleet.check_reboot, lambda i: self.fleet.reboot(i, forced))

    def _delete_instances(self, params: Params) -> dict[str, Any]:
        ids = params.required_list("InstanceId", 100)
        force, force_stop = params.boolean("Force"), params.boolean("ForceStop", True)
        params.text("ClientToken", max_length=64)
        for instance_id in ids:
            self.fleet.check_delete(instance_id, force)
        if params.boolean("DryRun"):
            raise dry_run_passed()
        for instance_id in ids:
            self.fleet.delete(instance_id, force, force_stop)
        return {}

    def _change_stopped(self, params: Params, action: str, name: str) -> str:
        """An InstanceId's new `name` value, while it is Stopped (checked first; DryRun stops there)."""
        instance_id = params.required("InstanceId")
        value = params.required(name, max_length=128)
        params.text("ClientToken", max_length=64)
        self.fleet.check_stopped_change(instance_id, action)
        if params.boolean("DryRun"):
            raise dry_run_passed()
        self.fleet.change_stopped(instance_id, action, value)
        return instance_id

    def _modify_instance_spec(self, params: Params) -> dict[str, Any]:
        """A pay-as-you-go instance's new InstanceType, while it is Stopped (bandwidth and disks are
        not modelled here)."""
        self._change_stopped(params, "ModifyInstanceSpec", "InstanceType")
        return {}

    def _replace_system_disk(self, params: Params) -> dict[str, Any]:
        """A Stopped instance's new image (what an upgrade boots)."""
        return {"DiskId": "d-" + self._change_stopped(params, "ReplaceSystemDisk", "ImageId")[2:]}

    def _resize_disk(self, params: Params) -> dict[str, Any]:
        """A disk's larger NewSize; Type `offline` (default) or `online` (see Fleet.check_resize)."""
        disk_id = params.required("DiskId", max_length=64)
        if not params.has("NewSize"):
            raise missing("NewSize")
        new_size = params.integer("NewSize", 0, 1, 65536)
        online = params.choice("Type", "offline", ("offline", "online")) == "online"
        params.text("ClientToken", max_length=64)
        self.fleet.check_resize(disk_id, new_size, online)
        if params.boolean("DryRun"):
            raise dry_run_passed()
        self.fleet.resize_disk(disk_id, new_size, online)
        return {}

    def _describe_disks(self, params: Params) -> dict[str, Any]:
        ids = params.json_strings("DiskIds", 100)
        instance_id, zone = params.text("InstanceId"), params.text("ZoneId")
        disk_type = params.choice("DiskType", "all", ("all", SYSTEM_DISK, DATA_DISK))
        category = params.text("Category", "all")
        if params.boolean("DryRun"):
            raise dry_run_passed()

        def wanted(disk: Disk) -> bool:
            owner = self.fleet.get(disk.instance_id)
            return ((ids is None or disk.disk_id in ids) and (not instance_id or disk.instance_id == instance_id)
                    and (not zone or owner.zone_id == zone) and disk_type in ("all", disk.disk_type)
                    and category in ("all", disk.category))

        found: list[object] = [disk for disk in self.fleet.disks() if wanted(disk)]
        chunk, paging = page(params, found, max_results=500, max_page_size=100)
        return {**paging, "Disks": {"Disk": [disk_view(disk, self.fleet.get(disk.instance_id))
                                            for disk in chunk if isinstance(disk, Disk)]}}

    # ------------------------------------------------------------------ describing
    def _describe_instance_status(self, params: Params) -> dict[str, Any]:
        wanted = params.listed("InstanceId", 100)
        zone = params.text("ZoneId")
        found = [i for i in self.fleet.instances()
                 if (not wanted or i.instance_id in wanted) and (not zone or i.zone_id == zone)]
        number = params.integer("PageNumber", 1, 1, 10**9)
        size = params.integer("PageSize", 10, 1, 50)
        chunk = found[(number - 1) * size:number * size]
        return {"TotalCount": len(found), "PageNumber": number, "PageSize": size,
                "InstanceStatuses": {"InstanceStatus": [{"InstanceId": i.instance_id, "Status": i.status}
                                                        for i in chunk]}}

    def _describe_instances(self, params: Params) -> dict[str, Any]:
        ids = params.json_strings("InstanceIds", 100)
        addresses = params.json_strings("PrivateIpAddresses", 100)
        status = params.choice("Status", "", STATUSES)
        name, zone = params.text("InstanceName"), params.text("ZoneId")
        tags = params.structs("Tag", 20)
        if params.boolean("DryRun"):
            raise dry_run_passed()

        def wanted(instance: Instance) -> bool:
            return ((ids is None or instance.instance_id in ids)
                    and (addresses is None or instance.private_ip in addresses)
                    and (not status or instance.status == status)
                    and (not name or _name_matches(name, instance.instance_name))
                    and (not zone or instance.zone_id == zone)
                    and all(_tag_matches(tag, instance) for tag in tags))

        found: list[object] = [i for i in self.fleet.instances() if wanted(i)]
        chunk, paging = page(params, found, max_results=100)
        return {**paging, "Instances": {"Instance": [instance_view(i) for i in chunk if isinstance(i, Instance)]}}

    def _describe_cloud_assistant_status(self, params: Params) -> dict[str, Any]:
        wanted = params.listed("InstanceId", 50)
        found: list[object] = [i for i in self.fleet.instances() if not wanted or i.instance_id in wanted]
        chunk, paging = page(params, found, max_results=50)
        rows = []
        for instance in chunk:
            assert isinstance(instance, Instance)
            active, total = self.fleet.active_tasks(instance.instance_id)
            running = self.fleet.agent_running(instance)
            rows.append({"InstanceId": instance.instance_id, "CloudAssistantStatus": "true" if running else "false",
                         "CloudAssistantVersion": "2.2.3.local" if instance.cloud_assistant else "",
                         "OSType": "Linux", "LastHeartbeatTime": _iso(self.fleet.clock()) if running else "",
                         "ActiveTaskCount": active, "InvocationCount": total, "SupportSessionManager": False})
        return {**paging, "InstanceCloudAssistantStatusSet": {"InstanceCloudAssistantStatus": rows}}

    # ------------------------------------------------------------------ creating
    def _run_instances(self, params: Params) -> dict[str, Any]:
        amount = params.integer("Amount", 1, 1, 100)
        min_amount = params.integer("MinAmount", amount, 1, amount)
        user_data = params.base64("UserData", max_length=MAX_USER_DATA)
        tags = caller_tags(params)
        spec = InstanceSpec(
            instance_name=params.text("InstanceName", max_length=128), host_name=params.text("HostName", max_length=64),
            unique_suffix=params.boolean("UniqueSuffix"),
            instance_type=params.text("InstanceType", "ecs.local.small", max_length=64),
            image_id=params.text("ImageId", "local_linux_x64", max_length=128), zone_id=params.text("ZoneId"),
            description=params.text("Description", max_length=256),
            user_data=params.values.get("UserData", "") if user_data is not None else "", tags=tags,
            system_disk=_disk(params, "SystemDisk.", SYSTEM_DISK, 40),
            data_disks=tuple(_disk(Params({f"DataDisk.{n}.{k}": v for k, v in fields.items()}), f"DataDisk.{n}.",
                                   DATA_DISK, None)
                             for n, fields in enumerate(params.structs("DataDisk", 16), 1)))
        token = params.text("ClientToken", max_length=64)
        if params.boolean("DryRun"):
            raise dry_run_passed()
        fingerprint = tuple(sorted((k, v) for k, v in params.values.items() if k not in ("ClientToken", "DryRun")))
        ids = self.fleet.run_instances(spec, amount, min_amount, token, fingerprint)
        return {"OrderId": "", "TradePrice": 0.0, "InstanceIdSets": {"InstanceIdSet": ids}}

    # ------------------------------------------------------------------ Cloud Assistant
    def _run_command(self, params: Params) -> dict[str, Any]:
        command_type = params.choice("Type", "", COMMAND_TYPES)
        if not command_type:
            raise missing("Type")
        if command_type != "RunShellScript":
            raise invalid("Type", f"the local instances are Linux: only RunShellScript runs, not {command_type}",
                          "InvalidCommandType.Unsupported")
        encoding = params.choice("ContentEncoding", "PlainText", ("PlainText", "Base64"))
        if encoding == "Base64":
            raw = params.base64("CommandContent", max_length=MAX_COMMAND_CONTENT)
            if raw is None:
                raise missing("CommandContent")
            try:
                content = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise invalid("CommandContent", "the decoded script must be UTF-8") from None
        else:
            content = params.required("CommandContent", max_length=MAX_COMMAND_CONTENT)
        ids = params.required_list("InstanceId", 100)
        timeout = params.integer("Timeout", 60, 1, 86_400)
        repeat = params.choice("RepeatMode", "Once", ("Once", "Period", "NextRebootOnly", "EveryReboot"))
        if repeat != "Once":
            raise invalid("RepeatMode", f"the local endpoint runs commands once, not {repeat}")
        enabled = params.boolean("EnableParameter")
        values = params.json_object("Parameters")
        names = placeholders(content) if enabled else []
        unknown = [n for n in names if not n.startswith("ACS::") and n not in values]
        if unknown:
            raise invalid("Parameters", f"CommandContent uses {{{{{unknown[0]}}}}}, which Parameters does not give",
                          "InvalidParameter.Parameters")
        tags = caller_tags(params)
        token = params.text("ClientToken", max_length=64)
        fingerprint = tuple(sorted((k, v) for k, v in params.values.items() if k != "ClientToken"))
        earlier = self.fleet.invocation_for_token(token, fingerprint)
        if earlier is not None:  # a retried RunCommand: the first one's ids, nothing runs again
            return {"InvokeId": earlier.invoke_id, "CommandId": earlier.command_id}
        for instance_id in ids:
            self.fleet.get(instance_id)
        self.fleet.check_agents(ids)
        invoke_id, command_id = new_invoke_ids()
        invocation = Invocation(invoke_id=invoke_id, command_id=command_id, command_type=command_type,
                                content=content, name=params.text("Name", max_length=128),
                                timeout=timeout, working_dir=params.text("WorkingDir", max_length=200),
                                username=params.text("Username", max_length=255), repeat_mode=repeat,
                                created=self.fleet.clock(), parameters=values, tags=tags)
        scripts = {}
        for instance_id in ids:
            instance = self.fleet.get(instance_id)
            builtins = {"ACS::InstanceId": instance_id, "ACS::InstanceName": instance.instance_name,
                        "ACS::RegionId": instance.region_id, "ACS::InvokeId": invoke_id, "ACS::CommandId": command_id}
            scripts[instance_id] = fill(content, {**builtins, **values}) if enabled else content
        self._launch(invocation, self.fleet.invoke(invocation, scripts, token, fingerprint))
        return {"InvokeId": invoke_id, "CommandId": command_id}

    def _invocations(self, params: Params) -> list[Invocation]:
        """By `InvokeId` (one or none), else all, in creation order; only those carrying every `Tag.N`."""
        invoke_id = params.text("InvokeId")
        tags = params.structs("Tag", 20)
        if invoke_id:
            found = self.fleet.invocations.get(invoke_id)
            candidates = [found] if found is not None else []
        else:
            candidates = list(self.fleet.invocations.values())
        return [invocation for invocation in candidates if invocation.tagged(tags)]

    def _describe_invocation_results(self, params: Params) -> dict[str, Any]:
        encoding = params.choice("ContentEncoding", "Base64", ("PlainText", "Base64"))
        instance_id = params.text("InstanceId")
        record_status = params.choice("InvokeRecordStatus", "", ("Running", "Finished", "Failed", "Stopped"))
        rows: list[object] = []
        for invocation in self._invocations(params):
            for target in invocation.targets.values():
                if instance_id and target.instance_id != instance_id:
                    continue
                if record_status and invoke_record_status(target.status) != record_status:
                    continue
                rows.append(result_view(invocation, target, encoding))
        chunk, paging = page(params, rows, max_results=50)
        return {"Invocation": {**paging, "InvocationResults": {"InvocationResult": chunk}}}

    def _describe_invocations(self, params: Params) -> dict[str, Any]:
        include_output = params.boolean("IncludeOutput")
        encoding = params.choice("ContentEncoding", "Base64", ("PlainText", "Base64"))
        instance_id = params.text("InstanceId")
        wanted_status = params.text("InvokeStatus")
        rows: list[object] = []
        for invocation in reversed(self._invocations(params)):  # newest first, as ECS lists them
            if instance_id and instance_id not in invocation.targets:
                continue
            if wanted_status and wanted_status not in (invocation.status, invoke_status(invocation.status)):
                continue
            rows.append(invocation_view(invocation, include_output, encoding))
        chunk, paging = page(params, rows, max_results=50)
        return {**paging, "Invocations": {"Invocation": chunk}}


class _Injected(Exception):
    def __init__(self, error: EcsError, retry_after: int | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.retry_after = retry_after


def dry_run_passed() -> EcsError:
    """What ECS answers a DryRun whose checks all pass."""
    return EcsError(400, "DryRunOperation", "Request validation has been passed with DryRun flag set.")


def rpc_parameter(request: WireRequest, name: str) -> str:
    """One parameter read before verification (to record the action of a refused request)."""
    try:
        return rpc.request_parameters(request).get(name, "")
    except SignatureRejected:
        return ""


def caller_tags(params: Params) -> tuple[tuple[str, str], ...]:
    """`Tag.N.Key`/`Tag.N.Value` of RunInstances or RunCommand (at most 20); system keys refused."""
    tags = []
    for index, tag in enumerate(params.structs("Tag", 20), start=1):
        key = tag.get("Key", "")
        if not key or len(key) > 128:
            raise invalid(f"Tag.{index}.Key", "must be 1 to 128 characters", "InvalidTagKey.Malformed")
        if key.lower().startswith(RESERVED_TAG_PREFIXES) or any(part in key for part in ("http://", "https://")):
            raise invalid(f"Tag.{index}.Key", "must not start with aliyun or acs: (system tags) nor contain "
                          "http:// or https://", "InvalidTagKey.Malformed")
        tags.append((key, tag.get("Value", "")))
    return tuple(tags)


def _name_matches(pattern: str, name: str) -> bool:
    """InstanceName filter: exact, or `*` as a wildcard (ECS's fuzzy match)."""
    if "*" not in pattern:
        return pattern == name
    return fnmatch.fnmatchcase(name, pattern)


def _tag_matches(tag: Mapping[str, str], instance: Instance) -> bool:
    value = instance.tag_value(tag.get("Key", ""))
    return value is not None and ("Value" not in tag or tag["Value"] == value)
