"""The state of a local Apache CloudStack: VMs, instance groups and the async job engine.

Pure logic on an injectable clock (no I/O): the HTTP side (`cloudstack_api`) calls in, the server
(`cloudstack_server`) runs `advance` from a ticker and acts on the power events it drains (a VM's
guest process starts when it reaches Running and is killed as it starts Stopping). Transitions
follow `cloud-apis.md` §3.5: Stopped -> Starting -> Running, Running -> Stopping -> Stopped, and a
reboot Running -> Stopping -> Starting -> Running, each step after a configurable delay. Every
state change sets the VM's `lastupdated` (what boot groups anchor an already-running VM's initial
delay to). `queryAsyncJobResult` answers `jobstatus` 0 for the first `pending_polls` polls of a
job whatever its progress, so clients' polling loops are exercised. Besides the VMs' own jobs, the
engine runs `run_job` jobs: a callable in a thread of its own (the only thread started here),
which extensions' async commands (boot groups) answer with.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

from crhelper.config import env_float, env_int
from crhelper.logs import get_logger

STOPPED, STARTING, RUNNING, STOPPING = "Stopped", "Starting", "Running", "Stopping"
#: Every VM state CloudStack reports (`VirtualMachine.State`); the local VMs use the first four.
VM_STATES = (STOPPED, STARTING, RUNNING, STOPPING, "Destroyed", "Expunging", "Migrating", "Error",
             "Unknown", "Shutdown")
TRANSITIONAL = frozenset({STARTING, STOPPING, "Expunging", "Migrating"})
HYPERVISORS = ("KVM", "XenServer", "VMware", "Simulator")

#: jobstatus values (`queryAsyncJobResult`).
JOB_PENDING, JOB_SUCCEEDED, JOB_FAILED = 0, 1, 2

#: HTTP status = `errorcode` (`ApiErrorCode`) and the `cserrorcode`s of the exceptions we raise.
PARAM_ERROR, UNSUPPORTED_ACTION, INTERNAL_ERROR = 431, 432, 530
CS_INVALID_PARAMETER, CS_CLOUD_RUNTIME, CS_SERVER_API = 4350, 4250, 9999
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
#: Loopback addresses handed to VMs: 127.0.0.2 ... 127.0.0.254 (127.0.0.1 is the endpoint's).
FIRST_HOST, LAST_HOST = 2, 254


def cs_date(moment: float) -> str:
    """CloudStack's date form (`2024-01-01T00:10:00+0000`), in UTC."""
    return datetime.fromtimestamp(moment, timezone.utc).strftime(DATE_FORMAT)


class ApiError(Exception):
    """A CloudStack error answer: `errorcode` (also the HTTP status), `cserrorcode`, `errortext`."""

    def __init__(self, errorcode: int, errortext: str, cserrorcode: int = CS_SERVER_API) -> None:
        super().__init__(f"{errorcode}: {errortext}")
        self.errorcode = errorcode
        self.errortext = errortext
        self.cserrorcode = cserrorcode

    def body(self) -> dict[str, Any]:
        return {"uuidList": [], "errorcode": self.errorcode, "cserrorcode": self.cserrorcode,
                "errortext": self.errortext}


def invalid_parameter(text: str) -> ApiError:
    return ApiError(PARAM_ERROR, text, CS_INVALID_PARAMETER)


def unknown_entity(command: str, parameter: str, value: str) -> ApiError:
    """CloudStack's 431 for an id that names nothing (`Invalid parameter id value=...`)."""
    return invalid_parameter(
        f"Unable to execute API command {command.lower()} due to invalid value. Invalid parameter "
        f"{parameter} value={value} due to incorrect long value format, or entity does not exist or "
        "due to incorrect parameter annotation for the field in api cmd class.")


@dataclass(frozen=True)
class CloudStackSettings:
    """Delays of the local CloudStack, in seconds (0: the step happens at the next tick)."""

    start_seconds: float = 1.0
    stop_seconds: float = 1.0
    #: `queryAsyncJobResult` answers jobstatus 0 this many times before it tells a job's outcome.
    pending_polls: int = 0
    #: Grace a guest process gets between SIGTERM and SIGKILL when its VM stops.
    guest_stop_grace: float = 2.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "CloudStackSettings":
        """`CRHELPER_CLOUDSTACK_START_SECONDS`, `_STOP_SECONDS`, `_PENDING_POLLS`, `_GUEST_STOP_GRACE`."""
        return cls(env_float(env, "CRHELPER_CLOUDSTACK_START_SECONDS", cls.start_seconds),
                   env_float(env, "CRHELPER_CLOUDSTACK_STOP_SECONDS", cls.stop_seconds),
                   env_int(env, "CRHELPER_CLOUDSTACK_PENDING_POLLS", cls.pending_polls, minimum=0),
                   env_float(env, "CRHELPER_CLOUDSTACK_GUEST_STOP_GRACE", cls.guest_stop_grace))


@dataclass
class InstanceGroup:
    id: str
    name: str
    created: float


@dataclass
class VirtualMachine:
    """One VM; `guest` (an argv list, or a shell string) runs while it is Running."""

    id: str
    name: str
    displayname: str
    number: int
    ip: str
    hypervisor: str
    state: str
    created: float
    lastupdated: float
    group_id: str | None = None
    guest: Sequence[str] | str | None = None
    #: `templatetype` (`Storage.TemplateType`): `USER` for an ordinary VM, `VNF` for a VNF appliance
    #: (CloudStack 4.19+, which then also lists its `vnfnics`).
    template_type: str = "USER"
    #: `vmtype` (`UserVm.getUserVmType`, CloudStack 4.20+): `cksnode` for a CKS cluster node,
    #: `sharedfsvm` for a Shared FileSystem VM; None (not listed) for an ordinary VM.
    vm_type: str | None = None
    #: The AutoScale VM group the VM belongs to (`autoscalevmgroupid`/`name`, CloudStack 4.18+).
    autoscale_group_id: str | None = None
    autoscale_group_name: str | None = None


#: `templatetype` values (`Storage.TemplateType`) a local VM may have.
TEMPLATE_TYPES = ("USER", "BUILTIN", "SYSTEM", "PERHOST", "ROUTING", "VNF")
#: `vmtype` values CloudStack sets on special user VMs (`UserVmManager.CKS_NODE`, `SHAREDFSVM`).
CKS_NODE, SHARED_FS_VM = "cksnode", "sharedfsvm"


@dataclass(frozen=True)
class PowerEvent:
    """A VM's guest came up (`running`) or must go down; the server acts on these in order."""

    vm_id: str
    running: bool


@dataclass
class _Step:
    due: float
    state: str


@dataclass
class AsyncJob:
    """One async job: a VM action's timed steps, or (`background`) a callable run in a thread of
    its own (`run_job`) whose outcome is set when it returns."""

    id: str
    cmd: str
    command: str
    #: What the job acts on (`jobinstancetype`/`jobinstanceid`): a VM, or what `run_job` names.
    instance_id: str
    created: float
    steps: list[_Step]
    #: (errorcode, errortext) when the job is to fail once its steps are done.
    failure: tuple[int, str] | None = None
    status: int = JOB_PENDING
    completed: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    polls: int = 0
    instance_type: str = "VirtualMachine"
    background: bool = False


@dataclass
class _Fault:
    times: int
    errorcode: int
    errortext: str
    cserrorcode: int


_CMD_CLASSES = {
    "startVirtualMachine": "org.apache.cloudstack.api.command.user.vm.StartVMCmd",
    "stopVirtualMachine": "org.apache.cloudstack.api.command.user.vm.StopVMCmd",
    "rebootVirtualMachine": "org.apache.cloudstack.api.command.user.vm.RebootVMCmd",
}

_log = get_logger("local.cloudstack")


class CloudStackState:
    """All VMs, groups and jobs of one local CloudStack, guarded by one lock."""

    def __init__(self, settings: CloudStackSettings | None = None, clock: Callable[[], float] = time.time,
                 account: str = "admin") -> None:
        self.settings = settings or CloudStackSettings()
        self.clock = clock
        self.account = account
        self.account_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"crhelper-cloudstack-account:{account}"))
        self.domain_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "crhelper-cloudstack-domain:ROOT"))
        self.zone_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "crhelper-cloudstack-zone:local"))
        self.host_id = str(uuid.uuid5(uuid.NAMESPACE_URL, "crhelper-cloudstack-host:local"))
        self.vms: dict[str, VirtualMachine] = {}
        self.groups: dict[str, InstanceGroup] = {}
        self.jobs: dict[str, AsyncJob] = {}
        self._lock = threading.RLock()
        self._events: list[PowerEvent] = []
        self._faults: dict[str, _Fault] = {}
        self._job_faults: dict[str, _Fault] = {}

    # ----------------------------------------------------------------------------- set-up (tests)
    def add_group(self, name: str) -> InstanceGroup:
        with self._lock:
            if any(group.name == name for group in self.groups.values()):
                raise ValueError(f"instance group {name!r} exists already")
            group = InstanceGroup(str(uuid.uuid4()), name, self.clock())
            self.groups[group.id] = group
            return group

    def add_vm(self, name: str, *, state: str = STOPPED, hypervisor: str = "KVM", group: str | None = None,
               guest: Sequence[str] | str | None = None, displayname: str | None = None,
               template_type: str = "USER", vm_type: str | None = None,
               autoscale_group: str | None = None) -> VirtualMachine:
        """A VM Stopped or Running (a Running one starts its guest at the next tick); `group`
        is an instance group's name or id, made when new. `template_type` `VNF` makes a VNF
        appliance, `vm_type` `cksnode` a CKS cluster node, `autoscale_group` (a name) a member of
        that AutoScale VM group: what a boot group must refuse (boot-groups.md §5)."""
        if state not in (STOPPED, RUNNING):
            raise ValueError(f"state: a new VM is {STOPPED} or {RUNNING}, not {state!r}")
        if hypervisor not in HYPERVISORS:
            raise ValueError(f"hypervisor: one of {', '.join(HYPERVISORS)}, not {hypervisor!r}")
        if template_type not in TEMPLATE_TYPES:
            raise ValueError(f"template_type: one of {', '.join(TEMPLATE_TYPES)}, not {template_type!r}")
        if vm_type is not None and vm_type not in (CKS_NODE, SHARED_FS_VM):
            raise ValueError(f"vm_type: {CKS_NODE}, {SHARED_FS_VM} or None, not {vm_type!r}")
        with self._lock:
            number = FIRST_HOST + len(self.vms)
            if number > LAST_HOST:
                raise ValueError(f"at most {LAST_HOST - FIRST_HOST + 1} VMs (one loopback address each)")
            group_id = None
            if group is not None:
                found = self.groups.get(group) or next((g for g in self.groups.values() if g.name == group), None)
                group_id = (found or self.add_group(group)).id
            now = self.clock()
            autoscale_id = (None if autoscale_group is None else
                            str(uuid.uuid5(uuid.NAMESPACE_URL, f"crhelper-cloudstack-autoscale:{autoscale_group}")))
            vm = VirtualMachine(str(uuid.uuid4()), name, displayname or name, number, f"127.0.0.{number}",
                                hypervisor, state, now, now, group_id, guest, template_type, vm_type,
                                autoscale_id, autoscale_group)
            self.vms[vm.id] = vm
            if state == RUNNING:
                self._events.append(PowerEvent(vm.id, True))
            return vm

    def fail_next(self, command: str, times: int = 1, errorcode: int = INTERNAL_ERROR,
                  errortext: str = "injected failure", cserrorcode: int = CS_CLOUD_RUNTIME) -> None:
        """The next `times` calls of `command` are answered with this error (before any other check
        but the signature's)."""
        with self._lock:
            self._faults[command] = _Fault(times, errorcode, errortext, cserrorcode)

    def fail_jobs(self, command: str, times: int = 1, errorcode: int = INTERNAL_ERROR,
                  errortext: str = "injected job failure") -> None:
        """The next `times` jobs of `command` fail (jobstatus 2) after their delays: a start ends
        Stopped, a stop or reboot Running."""
        with self._lock:
            self._job_faults[command] = _Fault(times, errorcode, errortext, CS_CLOUD_RUNTIME)

    def take_fault(self, command: str) -> ApiError | None:
        with self._lock:
            fault = self._faults.get(command)
            if fault is None or fault.times <= 0:
                return None
            fault.times -= 1
            return ApiError(fault.errorcode, fault.errortext, fault.cserrorcode)

    def _take_job_fault(self, command: str) -> tuple[int, str] | None:
        fault = self._job_faults.get(command)
        if fault is None or fault.times <= 0:
            return None
        fault.times -= 1
        return fault.errorcode, fault.errortext

    # --------------------------------------------------------------------------------- lookups
    def vm(self, vm_id: str, command: str = "", parameter: str = "id") -> VirtualMachine:
        with self._lock:
            found = self.vms.get(vm_id)
        if found is None:
            raise invalid_parameter(
                f"Unable to execute API command {command.lower()} due to invalid value. Invalid parameter "
                f"{parameter} value={vm_id} due to incorrect long value format, or entity does not exist or "
                "due to incorrect parameter annotation for the field in api cmd class.")
        return found

    def snapshot(self, vm_id: str) -> VirtualMachine:
        """A copy of a VM as it is now (after due steps)."""
        with self._lock:
            self.advance()
            return replace(self.vm(vm_id))

    # ------------------------------------------------------------------------------- VM actions
    def start(self, vm_id: str) -> AsyncJob:
        return self._act("startVirtualMachine", vm_id, forced=False)

    def stop(self, vm_id: str, forced: bool = False) -> AsyncJob:
        return self._act("stopVirtualMachine", vm_id, forced=forced)

    def reboot(self, vm_id: str) -> AsyncJob:
        return self._act("rebootVirtualMachine", vm_id, forced=False)

    def _act(self, command: str, vm_id: str, forced: bool) -> AsyncJob:
        with self._lock:
            self.advance()
            vm = self.vm(vm_id, command)
            now = self.clock()
            if vm.state in TRANSITIONAL:
                raise ApiError(INTERNAL_ERROR, f"Unable to {command[:-len('VirtualMachine')]} VM {vm.id} ({vm.name}): "
                               f"it is {vm.state}; wait for its job to finish", CS_CLOUD_RUNTIME)
            start, stop = self.settings.start_seconds, 0.0 if forced else self.settings.stop_seconds
            steps: list[_Step] = []
            if command == "startVirtualMachine":
                if vm.state == RUNNING:
                    raise invalid_parameter(f"The virtual machine {vm.id} ({vm.displayname}) is already running")
                self._set_state(vm, STARTING, now)
                steps = [_Step(now + start, RUNNING)]
            elif command == "stopVirtualMachine":
                if vm.state == RUNNING:  # a Stopped VM's stop is a job that succeeds at once, as on CloudStack
                    self._set_state(vm, STOPPING, now)
                    steps = [_Step(now + stop, STOPPED)]
            else:
                if vm.state != RUNNING:
                    raise invalid_parameter(f"Unable to reboot VM {vm.id} ({vm.displayname}): it is {vm.state}, "
                                            f"not {RUNNING}")
                self._set_state(vm, STOPPING, now)
                steps = [_Step(now + stop, STARTING), _Step(now + stop + start, RUNNING)]
            failure = self._take_job_fault(command)
            if failure is not None and steps:  # a failed start ends Stopped; a failed stop or reboot Running
                steps[-1].state = STOPPED if command == "startVirtualMachine" else RUNNING
            job = AsyncJob(str(uuid.uuid4()), _CMD_CLASSES[command], command, vm.id, now, steps, failure)
            self.jobs[job.id] = job
            self.advance()
            return job

    def _set_state(self, vm: VirtualMachine, state: str, moment: float) -> None:
        if state == vm.state:
            return
        if state == STOPPING or (state == STOPPED and vm.state == RUNNING):
            self._events.append(PowerEvent(vm.id, False))
        elif state == RUNNING:
            self._events.append(PowerEvent(vm.id, True))
        vm.state, vm.lastupdated = state, moment

    # ------------------------------------------------------------------------------- the engine
    def advance(self) -> None:
        """Take every step that is due; finish the jobs whose steps are done."""
        with self._lock:
            now = self.clock()
            for job in self.jobs.values():
                if job.status != JOB_PENDING or job.background:
                    continue
                vm = self.vms[job.instance_id]
                while job.steps and job.steps[0].due <= now:
                    step = job.steps.pop(0)
                    self._set_state(vm, step.state, step.due)
                if job.steps:
                    continue
                job.completed = now
                if job.failure is None:
                    job.status = JOB_SUCCEEDED
                    job.result = {"virtualmachine": self.describe(vm)}
                else:
                    job.status = JOB_FAILED
                    job.result = {"errorcode": job.failure[0], "errortext": job.failure[1]}

    def next_due(self) -> float | None:
        """When the next step is due (None: nothing pending), for the ticker's sleep."""
        with self._lock:
            dues = [job.steps[0].due for job in self.jobs.values() if job.status == JOB_PENDING and job.steps]
            pending = any(job.status == JOB_PENDING and not job.steps and not job.background
                          for job in self.jobs.values())
            return self.clock() if pending else (min(dues) if dues else None)

    def run_job(self, command: str, cmd: str, instance_type: str, instance_id: str,
                work: Callable[[], dict[str, Any]]) -> AsyncJob:
        """A job that runs `work` in a thread of its own (how an extension's async command answers
        with a `jobid` at once): jobstatus 1 with the object `work` returns as `jobresult`
        (`{"instancebootgroup": {...}}`), or 2 when it raises: an ApiError's code and text, else
        530 and the exception's text (the traceback goes to the log, never to the caller)."""
        with self._lock:
            job = AsyncJob(str(uuid.uuid4()), cmd, command, instance_id, self.clock(), [],
                           instance_type=instance_type, background=True)
            self.jobs[job.id] = job

        def run() -> None:
            try:
                result, failure = work(), None
            except ApiError as error:
                result, failure = {}, (error.errorcode, error.errortext)
            except Exception as exc:  # noqa: BLE001 - a job's failure is its answer
                _log.error("cloudstack job %s (%s) failed", job.id, command, exc_info=True)
                result, failure = {}, (INTERNAL_ERROR, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            with self._lock:
                job.completed = self.clock()
                if failure is None:
                    job.status, job.result = JOB_SUCCEEDED, result
                else:
                    job.status, job.result = JOB_FAILED, {"errorcode": failure[0], "errortext": failure[1]}

        threading.Thread(target=run, name=f"cloudstack-job-{job.id[:8]}", daemon=True).start()
        return job

    def drain_events(self) -> list[PowerEvent]:
        with self._lock:
            events, self._events = self._events, []
            return events

    def query(self, job_id: str) -> dict[str, Any]:
        """`queryAsyncJobResult`'s answer (one poll counted)."""
        with self._lock:
            self.advance()
            job = self.jobs.get(job_id)
            if job is None:
                raise unknown_entity("queryAsyncJobResult", "jobid", job_id)
            job.polls += 1
            return self.describe_job(job, hide=job.polls <= self.settings.pending_polls)

    def describe_job(self, job: AsyncJob, hide: bool = False) -> dict[str, Any]:
        status = JOB_PENDING if hide else job.status
        answer: dict[str, Any] = {
            "accountid": self.account_id, "userid": self.account_id, "cmd": job.cmd, "jobid": job.id,
            "jobstatus": status, "jobprocstatus": 0, "jobresultcode": 0, "jobinstancetype": job.instance_type,
            "jobinstanceid": job.instance_id, "created": cs_date(job.created)}
        if status != JOB_PENDING:
            answer.update(jobresulttype="object", jobresult=job.result,
                          jobresultcode=0 if status == JOB_SUCCEEDED else job.result.get("errorcode", INTERNAL_ERROR))
            if job.completed is not None:
                answer["completed"] = cs_date(job.completed)
        return answer

    # -------------------------------------------------------------------------------- listings
    def list_vms(self, match: Callable[[VirtualMachine], bool]) -> list[dict[str, Any]]:
        """The VMs `match` accepts, as described, in creation order (after due steps)."""
        with self._lock:
            self.advance()
            return [self.describe(vm) for vm in self.vms.values() if match(vm)]

    def list_groups(self, match: Callable[[InstanceGroup], bool]) -> list[dict[str, Any]]:
        with self._lock:
            return [self.describe_group(group) for group in self.groups.values() if match(group)]

    def list_jobs(self) -> list[dict[str, Any]]:
        """Every job as `listAsyncJobs` shows it (no poll counted)."""
        with self._lock:
            self.advance()
            return [self.describe_job(job) for job in self.jobs.values()]

    # -------------------------------------------------------------------------------- responses
    def describe(self, vm: VirtualMachine) -> dict[str, Any]:
        """A VM as `listVirtualMachines` and a job's `jobresult.virtualmachine` show it."""
        group = self.groups.get(vm.group_id or "")
        answer: dict[str, Any] = {
            "id": vm.id, "name": vm.name, "displayname": vm.displayname, "account": self.account,
            "domainid": self.domain_id, "domain": "ROOT", "created": cs_date(vm.created),
            "lastupdated": cs_date(vm.lastupdated), "state": vm.state, "haenable": False,
            "zoneid": self.zone_id, "zonename": "local", "hypervisor": vm.hypervisor,
            "instancename": f"i-2-{vm.number}-VM", "cpunumber": 1, "memory": 512,
            "nic": [{"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"nic:{vm.id}")), "ipaddress": vm.ip,
                     "isdefault": True, "type": "Isolated", "traffictype": "Guest",
                     "macaddress": "02:00:00:00:00:%02x" % vm.number}],
        }
        if group is not None:
            answer.update(groupid=group.id, group=group.name)
        if vm.state in (RUNNING, STOPPING, STARTING):
            answer.update(hostid=self.host_id, hostname="localhost")
        answer.update(_template_fields(vm))
        if vm.vm_type is not None:
            answer["vmtype"] = vm.vm_type
        if vm.autoscale_group_id is not None:
            answer.update(autoscalevmgroupid=vm.autoscale_group_id, autoscalevmgroupname=vm.autoscale_group_name)
        return answer

    def describe_group(self, group: InstanceGroup) -> dict[str, Any]:
        return {"id": group.id, "name": group.name, "created": cs_date(group.created), "account": self.account,
                "domainid": self.domain_id, "domain": "ROOT"}


def _template_fields(vm: VirtualMachine) -> dict[str, Any]:
    """The template a VM was made from, as `UserVmResponse` lists it: `templateid`, `templatename`,
    `templatetype`; a VNF appliance also lists `vnfnics` (`VnfNicResponse`: its management NIC)."""
    kind = vm.template_type.lower()
    fields: dict[str, Any] = {
        "templateid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"crhelper-cloudstack-template:{kind}")),
        "templatename": f"local-{kind}", "templatetype": vm.template_type}
    if vm.template_type == "VNF":
        fields["vnfnics"] = [{"deviceid": 0, "name": "management", "required": True, "management": True,
                              "description": "the appliance's management NIC"}]
    return fields
