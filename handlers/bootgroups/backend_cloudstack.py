"""The boot-group backend for Apache CloudStack, through `cs` (imported when the first call is made).

    backend = CloudStackBackend(CloudStackConfig.resolve(settings))   # or CLOUDSTACK_* from the environment

Start and stop submit the VM's async job and watch `queryAsyncJobResult` for at most `job_wait`
seconds: a job that fails quickly (jobstatus 2) raises at once, with its `jobresultcode` and error
text; one still pending is left running, since the engine only needs "asked" and must not wait a
whole tier out on one job. The job is remembered, and the next `vm_state` of that VM looks at it
once more before reading `listVirtualMachines`, so a job that fails later raises there. (The memory
is this process's: after a restart, a job that failed unseen shows as a VM that stays Stopped until
the tier's deadline.) A reboot (reboot-on-retry, §4.2.4) is different: it returns only once its job
ended and the VM reads Running again, within `reboot_wait` seconds, so the next attempt's initial
delay counts from a booted VM and no attempt is spent on a VM still Stopping or Starting.

The Create/Update checks of §5 (`backends.Inventory`): `vm_states` reads many VMs with one
`listVirtualMachines ids=` per `ids_per_call` ids (an id the answer leaves out is Missing: it does
not exist, or another account owns it); `group_identity` is an instance group's uuid (a Name
resolved through `listInstanceGroups name=`); `ineligible` reads the VNF template type, the CKS node
`vmtype` and the AutoScale VM group from the same listing.

States map onto the engine's (`cloud-apis.md` §3.5): Migrating is Running (a live migration keeps
the guest up), Shutdown is Stopped, Destroyed/Expunging and an unknown id are Missing, Error and
Unknown are Error. `lastupdated` (`2024-01-01T00:10:00+0000`, whole seconds) is the last power change.

Checks run from where the provider runs, not from the Virtual Router as CloudStack's own checker
does (the VR is not reachable through the API): PortCheck is a TCP connect to the VM's default NIC
address; Ping is `probes.ping` (ICMP where permitted, else a TCP answer on port 7). So a VM is
checked the way a client in the provider's network would reach it. GuestAgentLiveness is Error on
a non-KVM VM; on KVM it is Ready when the VM is Running: qemu-guest-agent's `guest-ping` goes
through the host agent and no CloudStack API command exposes it, so Running on KVM is all that can
be confirmed from outside.

API errors become `CloudStackError`s naming the command, the VM, the HTTP status, `errorcode`,
`cserrorcode` and `errortext` (401 adds where the key pair comes from); never a URL, which carries
the signature. Throttling and 5xx answers other than CloudStack's permanent ones (account, limit,
capacity, allocation, in use, conflict) are retried with back-off (`crhelper.cloud.poll`) for up
to `retry_seconds`; connection errors only on reads (a submit may have been received).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from crhelper.cloud.poll import (
    Done, Finished, Observation, OffPath, PollFailed, PollSettings, Waiting, is_throttling_or_server_error, poll)
from crhelper.config import env_float, env_int
from crhelper.errors import Failure
from crhelper.logs import get_logger

from .backends import FAILED, MISSING, RUNNING, STARTING, STOPPED, STOPPING, CheckResult, NotFound, VmState
from .model import ERROR, GUEST_AGENT, NOT_READY, PING, PORT, PORT_CHECK, READY, GroupRef
from .probes import ping, tcp_probe

ENDPOINT_ENV, KEY_ENV, SECRET_ENV = "CLOUDSTACK_ENDPOINT", "CLOUDSTACK_KEY", "CLOUDSTACK_SECRET"
METHOD_ENV, TIMEOUT_ENV = "CLOUDSTACK_METHOD", "CLOUDSTACK_TIMEOUT"
JOB_WAIT_ENV = "CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT"
RETRY_ENV = "CRHELPER_BOOTGROUP_CLOUDSTACK_RETRY_SECONDS"
REBOOT_WAIT_ENV = "CRHELPER_BOOTGROUP_CLOUDSTACK_REBOOT_WAIT"

#: CloudStack VM states (`VirtualMachine.State`) as the engine reads them.
STATES = {
    "Running": RUNNING, "Migrating": RUNNING, "Starting": STARTING, "Stopping": STOPPING,
    "Stopped": STOPPED, "Shutdown": STOPPED, "Destroyed": MISSING, "Expunging": MISSING,
    "Error": FAILED, "Unknown": FAILED,
}
LASTUPDATED_FORMAT = "%Y-%m-%dT%H:%M:%S%z"
#: 5xx `errorcode`s that state a lasting condition (account, limit, capacity, allocation, in use,
#: conflict): retrying within seconds cannot help.
PERMANENT_ERRORS = frozenset({531, 532, 533, 535, 536, 537})
JOB_PENDING, JOB_SUCCEEDED = 0, 1
KVM = "KVM"
#: `templatetype` of a VNF appliance's template (CloudStack 4.19+) and `vmtype` of a CKS cluster
#: node (`UserVmManager.CKS_NODE`, listed from CloudStack 4.20).
VNF_TEMPLATE, CKS_NODE = "VNF", "cksnode"
#: `cs` signs `~` as itself, a Java CloudStack server as `%7E` (cloud-apis.md §3.2): refused.
UNSIGNABLE = "~"

_log = get_logger("bootgroups.cloudstack")
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] [^'\"()\]]+")


class CloudStackError(Failure):
    """A CloudStack call or job that failed; the message names the command and what it was about
    (`subject`: `VM '<id>'`, `instance group '<id>'`)."""

    def __init__(self, reason: str, *, command: str, subject: str, errorcode: int | None = None) -> None:
        super().__init__(reason)
        self.command, self.subject, self.errorcode = command, subject, errorcode


@dataclasses.dataclass(frozen=True)
class CloudStackConfig:
    """Where and how to call CloudStack. `secret` never shows in a repr."""

    endpoint: str
    key: str
    secret: str = dataclasses.field(repr=False)
    method: str = "get"
    #: Seconds per HTTP request (`cs` takes whole seconds).
    timeout: int = 10
    #: Seconds a start/stop/reboot watches its job before returning with the job still pending.
    job_wait: float = 2.0
    #: Seconds throttling and transient 5xx answers are retried.
    retry_seconds: float = 10.0
    poll: PollSettings = PollSettings(initial=0.2, cap=2.0)
    #: Seconds a reboot may take until its job ended and the VM reads Running again.
    reboot_wait: float = 300.0
    #: VM ids per `listVirtualMachines ids=` call (a GET URL stays well under a server's 8 KB).
    ids_per_call: int = 100

    @classmethod
    def resolve(cls, given: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> "CloudStackConfig":
        """From the resource's settings (`Endpoint`, `Key`, `Secret`, `Method`, `Timeout`), each
        defaulting to the variable `cs` reads (`CLOUDSTACK_ENDPOINT`, `_KEY`, `_SECRET`, `_METHOD`,
        `_TIMEOUT`); `CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT` (2 s), `_RETRY_SECONDS` (10 s) and
        `_REBOOT_WAIT` (300 s)."""
        env = os.environ if env is None else env
        given = given or {}

        def pick(name: str, variable: str) -> str:
            value = given.get(name)
            return str(value).strip() if value not in (None, "") else env.get(variable, "").strip()

        endpoint, key, secret = pick("Endpoint", ENDPOINT_ENV), pick("Key", KEY_ENV), pick("Secret", SECRET_ENV)
        missing = [f"{name} ({variable})" for name, variable, value in
                   (("Endpoint", ENDPOINT_ENV, endpoint), ("Key", KEY_ENV, key), ("Secret", SECRET_ENV, secret)) if not value]
        if missing:
            raise Failure(f"the cloudstack backend needs {', '.join(missing)}: give them in the resource's "
                          "CloudStack settings or set the environment variables")
        if not endpoint.startswith(("http://", "https://")):
            raise Failure(f"the cloudstack backend's Endpoint ({ENDPOINT_ENV}) must be an http(s) URL such as "
                          "https://cloud.example.com/client/api")
        method = pick("Method", METHOD_ENV).lower() or "get"
        if method not in ("get", "post"):
            raise Failure(f"the cloudstack backend's Method ({METHOD_ENV}) must be get or post")
        timeout = env_int({f"Timeout ({TIMEOUT_ENV})": pick("Timeout", TIMEOUT_ENV)}, f"Timeout ({TIMEOUT_ENV})", 10, minimum=1)
        return cls(endpoint, key, secret, method, timeout, job_wait=env_float(env, JOB_WAIT_ENV, 2.0),
                   retry_seconds=env_float(env, RETRY_ENV, 10.0), reboot_wait=env_float(env, REBOOT_WAIT_ENV, 300.0))


@dataclasses.dataclass(frozen=True)
class _Job:
    command: str
    id: str


class CloudStackBackend:
    """A `BootBackend` over one CloudStack account. Safe to call from the engine's threads: each
    thread gets its own `cs` client (a `requests.Session` is not shared across threads)."""

    def __init__(self, config: CloudStackConfig, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self._clock, self._sleep = clock, sleep
        self._local = threading.local()
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._failed: dict[str, CloudStackError] = {}
        self._seen: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"CloudStackBackend(endpoint={self.config.endpoint!r})"

    # --- BootBackend ------------------------------------------------------------------------------

    def vm_state(self, vm: str) -> VmState:
        """The state `listVirtualMachines` reports, after one look at a job still pending for the
        VM (a failed one raises its error here)."""
        with self._lock:
            failure = self._failed.pop(vm, None)
        if failure is not None:  # seen by vm_states, raised here: the instance's own error
            raise failure
        self._watch_job(vm, 0.0)
        return state_of(self._describe(vm))

    def start_vm(self, vm: str) -> None:
        """Submit the start unless the VM last read Running or Starting (CloudStack would refuse it)."""
        with self._lock:
            seen = self._seen.get(vm)
        if seen is not None and STATES.get(str(seen.get("state"))) in (RUNNING, STARTING):
            return
        try:
            self._submit("startVirtualMachine", vm)
        except CloudStackError as exc:
            if exc.errorcode is None or exc.command != "startVirtualMachine":
                raise
            described = self._describe(vm)  # refused as already Running or Starting: a no-op
            if described is None or STATES.get(str(described.get("state"))) not in (RUNNING, STARTING):
                raise

    def stop_vm(self, vm: str, forced: bool) -> None:
        self._submit("stopVirtualMachine", vm, forced=forced)

    def reboot_vm(self, vm: str) -> None:
        """Reboot and return once the job ended (a failed one raises with its jobresultcode and
        error text) and the VM reads Running again, within `reboot_wait` seconds (else raise,
        naming the VM, its last state and the bound)."""
        bound = self.config.reboot_wait
        deadline = self._clock() + bound
        job = self._submit("rebootVirtualMachine", vm, watch=0.0)
        seen: list[str] = []

        def probe() -> Observation[None]:
            pending = self._job_observation(vm)  # raises for a failed job
            if isinstance(pending, Waiting):
                return pending
            described = self._describe(vm)
            state = state_of(described).state
            seen[:] = [str(described.get("state")) if described else MISSING]
            if state == RUNNING:
                return Done(None)
            if state in (STOPPED, MISSING, FAILED):
                return OffPath(f"VM {vm!r} reads {seen[0]} after its reboot (job {job}), not Running")
            return Waiting(seen[0])

        result = poll(probe, deadline=deadline, settings=self.config.poll, what=f"the reboot of VM {vm!r}",
                      clock=self._clock, sleep=self._sleep)
        if isinstance(result, Finished):
            return
        if isinstance(result, PollFailed) and result.off_path:
            raise CloudStackError(result.reason, command="rebootVirtualMachine", subject=f"VM {vm!r}")
        with self._lock:
            still_pending = vm in self._jobs
        if not seen or still_pending:  # the job never ended: what state is the VM in now?
            described = self._describe(vm)
            seen[:] = [str(described.get("state")) if described else MISSING]
        pending_text = f"; its job {job} is still pending" if still_pending else ""
        raise CloudStackError(
            f"VM {vm!r} did not read Running within {bound:g} s of its reboot (last state: {seen[0]}{pending_text}; "
            f"the bound is {REBOOT_WAIT_ENV})", command="rebootVirtualMachine", subject=f"VM {vm!r}")

    def expand_group(self, group: GroupRef) -> list[str]:
        """An instance group's VMs now: by `Id` (`listVirtualMachines groupid=`), by its listed
        `Instances`, or by `Name` (the one instance group of that name)."""
        if group.instances is not None:
            return list(group.instances)
        try:
            group_id = self._group_uuid(group)
        except NotFound as exc:
            raise Failure(str(exc)) from None
        listed = self._call("listVirtualMachines", f"instance group {group_id!r}", read=True, groupid=group_id,
                            fetch_list=True)
        vms = [dict(vm) for vm in listed] if isinstance(listed, list) else []
        with self._lock:
            self._seen.update({str(vm["id"]): vm for vm in vms})
        return [str(vm["id"]) for vm in vms]

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        """PortCheck and Ping from here to the VM's default NIC address; GuestAgentLiveness from
        the hypervisor and the state (see the module docstring)."""
        with self._lock:
            described = self._seen.get(vm)
        if described is None:
            described = self._describe(vm)
        return check_described(rule_type, vm, described, details, timeout)

    # --- Inventory (backends.py): the Create/Update checks of §5 --------------------------------------

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        """The states of `vms` from one `listVirtualMachines ids=` per `ids_per_call` ids, each
        mapped as `vm_state` maps one; an id the answer leaves out is MISSING (it does not exist, or
        another account owns it: these keys do not list it). A job still pending for one of them is
        looked at first; a VM whose job failed is left out of the answer, and its next `vm_state`
        raises that job's error (so the failure is reported as that instance's)."""
        wanted = list(dict.fromkeys(vms))
        with self._lock:
            pending = [vm for vm in wanted if vm in self._jobs]
        failed = set()
        for vm in pending:
            try:
                self._watch_job(vm, 0.0)
            except CloudStackError as exc:
                with self._lock:
                    self._failed[vm] = exc
                failed.add(vm)
        described = self._describe_many([vm for vm in wanted if vm not in failed])
        return {vm: state_of(described.get(vm)) for vm in wanted if vm not in failed}

    def group_identity(self, group: GroupRef) -> str | None:
        """The instance group's uuid: its `Id` once `listInstanceGroups id=` shows it, else its
        `Name` resolved by `listInstanceGroups name=` (exactly one match). None for an `Instances`
        list without an Id: its Name is its identity. NotFound for an Id or Name these keys do not
        see; Failure for a Name several groups have (give the Id) or a Tag (an ECS selector)."""
        if group.instances is not None and group.id is None:
            return None
        return self._group_uuid(group)

    def ineligible(self, vms: Sequence[str]) -> dict[str, str]:
        """Why some of `vms` may not join a boot group (§5), read from one `listVirtualMachines
        ids=` per `ids_per_call` ids: a VNF appliance, a CKS cluster node, a member of an AutoScale
        VM group; VMs that are eligible or do not exist are absent."""
        described = self._describe_many(list(dict.fromkeys(vms)))
        found = {vm: ineligibility(seen) for vm, seen in described.items()}
        return {vm: reason for vm, reason in found.items() if reason}

    # --- for validation ---------------------------------------------------------------------------

    def has_guest_agent(self, vm: str) -> bool | None:
        """Whether GuestAgentLiveness may attach to `vm` (it is KVM); None when it does not exist."""
        described = self._describe(vm)
        return None if described is None else described.get("hypervisor") == KVM

    # --- calls ------------------------------------------------------------------------------------

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            import cs  # lazily: the provider's import stays light

            config = self.config
            client = cs.CloudStack(endpoint=config.endpoint, key=config.key, secret=config.secret,
                                   method=config.method, timeout=config.timeout)
            self._local.client = client
        return client

    def _call(self, command: str, subject: str, *, read: bool, **params: Any) -> Any:
        """One API call, retried on throttling and transient 5xx (and connection errors on reads)
        for up to `retry_seconds`; a failure raises CloudStackError naming `command` and `subject`.
        A value with `~` is refused before it is sent (see UNSIGNABLE)."""
        refused = unsignable(params)
        if refused:
            raise CloudStackError(
                f"CloudStack {command} for {subject} not sent: {refused} contains '{UNSIGNABLE}', which the cs "
                "client signs unescaped while a CloudStack server checks it as %7E, so the server would refuse the "
                "signature (HTTP 401); use a value without it", command=command, subject=subject)
        import requests

        client = self._client()
        last: list[Exception] = []

        def transient(exc: Exception) -> bool:
            last[:] = [exc]
            if read and isinstance(exc, (requests.ConnectionError, requests.Timeout)):
                return True
            error = getattr(exc, "error", None)
            code = error.get("errorcode") if isinstance(error, dict) else None
            return code not in PERMANENT_ERRORS and is_throttling_or_server_error(exc)

        def attempt() -> Observation[Any]:
            return Done(getattr(client, command)(**params))

        if self.config.retry_seconds <= 0:  # no retries: one call
            try:
                return getattr(client, command)(**params)
            except Exception as exc:
                raise _error(command, subject, exc, self.config) from None
        try:
            outcome = poll(attempt, deadline=self._clock() + self.config.retry_seconds, settings=self.config.poll,
                           transient=transient, what=f"{command} for {subject}", clock=self._clock, sleep=self._sleep)
        except Exception as exc:
            raise _error(command, subject, exc, self.config) from None
        if isinstance(outcome, Finished):
            return outcome.value
        raise _error(command, subject, last[0], self.config, retried=self.config.retry_seconds) from None

    def _describe(self, vm: str) -> dict[str, Any] | None:
        """The VM as `listVirtualMachines id=` shows it, None when there is none (an empty answer,
        a 431 for an id that does not exist, or an id with `~`, which no CloudStack uuid has and a
        server could not verify: not sent)."""
        if UNSIGNABLE in vm:
            return None
        try:
            found = self._call("listVirtualMachines", f"VM {vm!r}", read=True, id=vm)
        except CloudStackError as exc:
            if exc.errorcode == 431:
                return None
            raise
        vms = [dict(v) for v in found.get("virtualmachine", []) if v.get("id") == vm]
        with self._lock:
            if vms:
                self._seen[vm] = vms[0]
            else:
                self._seen.pop(vm, None)
        return vms[0] if vms else None

    def _describe_many(self, vms: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The VMs of `vms` that `listVirtualMachines ids=` shows, by id, one call per `ids_per_call`
        ids (`cs` pages each answer). A real server answers a uuid it has never seen with a 431
        naming it (`ids value=<uuid>`): that id is dropped and the call made again without it. An
        id with `~` is no uuid and is not sent (see `_describe`)."""
        found: dict[str, dict[str, Any]] = {}
        size = max(1, self.config.ids_per_call)
        sendable = [vm for vm in vms if UNSIGNABLE not in vm]
        for start in range(0, len(sendable), size):
            chunk = list(sendable[start:start + size])
            while chunk:
                subject = f"VMs {', '.join(repr(vm) for vm in chunk[:3])}{' ...' if len(chunk) > 3 else ''}"
                try:
                    listed = self._call("listVirtualMachines", subject, read=True, ids=",".join(chunk), fetch_list=True)
                except CloudStackError as exc:
                    unknown = next((vm for vm in chunk if f"value={vm} " in str(exc)), None) if exc.errorcode == 431 else None
                    if unknown is None:
                        raise
                    chunk.remove(unknown)
                    continue
                wanted = set(chunk)
                found.update({str(v["id"]): dict(v) for v in (listed if isinstance(listed, list) else [])
                              if isinstance(v, dict) and str(v.get("id")) in wanted})
                break
        with self._lock:
            for vm in vms:
                if vm in found:
                    self._seen[vm] = found[vm]
                else:
                    self._seen.pop(vm, None)
        return found

    def _group_uuid(self, group: GroupRef) -> str:
        """The uuid of the instance group `group` names: its `Id` once `listInstanceGroups id=`
        shows it, else its `Name`'s one match (NotFound when none, Failure when several)."""
        if group.tag_key is not None:
            raise Failure(f"instance group {group.name or ''!r}: Tag selects ECS instances; on CloudStack give Id or Instances")
        if group.id is not None:
            try:
                found = self._call("listInstanceGroups", f"instance group {group.id!r}", read=True, id=group.id)
            except CloudStackError as exc:
                if exc.errorcode != 431:  # a uuid the server has never seen
                    raise
                found = {}
            if not any(g.get("id") == group.id for g in found.get("instancegroup", [])):
                raise NotFound(f"instance group Id {group.id!r}: no CloudStack instance group with this id is visible "
                               "to these API keys (it does not exist, or another account owns it)")
            return group.id
        if not group.name:
            raise Failure("an instance group needs Id, Instances or Name on the cloudstack backend")
        found = self._call("listInstanceGroups", f"instance group {group.name!r}", read=True, name=group.name)
        matches = [g for g in found.get("instancegroup", []) if g.get("name") == group.name]
        if not matches:
            raise NotFound(f"instance group Name {group.name!r}: no CloudStack instance group visible to these API keys "
                           "has this name")
        if len(matches) > 1:
            ids = ", ".join(str(g.get("id")) for g in matches)
            raise Failure(f"instance group Name {group.name!r}: {len(matches)} CloudStack instance groups have this name "
                          f"({ids}); give the one you mean as Id")
        return str(matches[0]["id"])

    def _submit(self, command: str, vm: str, *, watch: float | None = None, **params: Any) -> str | None:
        """Submit `command` for `vm`; watch its job for `watch` seconds (default `job_wait`). The
        job id, None when the answer has none."""
        answer = self._call(command, f"VM {vm!r}", read=False, id=vm, **params)
        jobid = answer.get("jobid") if isinstance(answer, dict) else None
        if not jobid:
            return None
        with self._lock:
            self._jobs[vm] = _Job(command, str(jobid))
        _log.info("CloudStack %s submitted for VM %s: job %s", command, vm, jobid)
        self._watch_job(vm, self.config.job_wait if watch is None else watch)
        return str(jobid)

    def _watch_job(self, vm: str, wait: float) -> None:
        """Look at the VM's pending job (once, or until it ends within `wait` s); a failed job
        raises CloudStackError with its jobresultcode and error text."""
        if wait <= 0:
            self._job_observation(vm)
            return
        poll(lambda: self._job_observation(vm), deadline=self._clock() + wait, settings=self.config.poll,
             clock=self._clock, sleep=self._sleep)

    def _job_observation(self, vm: str) -> Observation[None]:
        with self._lock:
            job = self._jobs.get(vm)
        if job is None:
            return Done(None)
        answer = self._call("queryAsyncJobResult", f"VM {vm!r}", read=True, jobid=job.id)
        status = answer.get("jobstatus")
        if status == JOB_PENDING:
            return Waiting(f"job {job.id} of {job.command} pending")
        with self._lock:
            if self._jobs.get(vm) == job:
                del self._jobs[vm]
        result = answer.get("jobresult") if isinstance(answer.get("jobresult"), dict) else {}
        if status == JOB_SUCCEEDED and not answer.get("jobresultcode"):
            described = result.get("virtualmachine")
            if isinstance(described, dict):
                with self._lock:
                    self._seen[vm] = dict(described)
            return Done(None)
        code = result.get("errorcode", answer.get("jobresultcode"))
        raise CloudStackError(
            f"CloudStack {job.command} job {job.id} for VM {vm!r} failed (jobstatus {status}, jobresultcode "
            f"{answer.get('jobresultcode')}, errorcode {code}): {result.get('errortext') or 'no error text'}",
            command=job.command, subject=f"VM {vm!r}", errorcode=code if isinstance(code, int) else None)


# --- pure helpers ---------------------------------------------------------------------------------


def state_of(described: Mapping[str, Any] | None) -> VmState:
    """A `listVirtualMachines` entry as the engine's state (None: the VM is Missing)."""
    if described is None:
        return VmState(MISSING)
    return VmState(STATES.get(str(described.get("state")), FAILED), parse_lastupdated(described.get("lastupdated")))


def ineligibility(described: Mapping[str, Any]) -> str:
    """Why a VM may not join a boot group (§5), from its `listVirtualMachines` fields; "" when it may."""
    reasons = []
    if described.get("templatetype") == VNF_TEMPLATE:
        reasons.append(f"it is a VNF appliance (templatetype {VNF_TEMPLATE})")
    elif described.get("vnfnics"):
        reasons.append("it is a VNF appliance (it lists vnfnics)")
    if described.get("vmtype") == CKS_NODE:
        reasons.append(f"it is a CKS cluster node (vmtype {CKS_NODE})")
    if described.get("autoscalevmgroupid"):
        name = described.get("autoscalevmgroupname")
        reasons.append(f"it is in AutoScale VM group {name!r} (autoscalevmgroupid {described['autoscalevmgroupid']})"
                       if name else f"it is in an AutoScale VM group (autoscalevmgroupid {described['autoscalevmgroupid']})")
    return "; ".join(reasons)


def unsignable(params: Mapping[str, Any]) -> str:
    """The first parameter whose value a CloudStack server cannot verify once `cs` signs it
    (`name 'value'`, the value cut), "" when there is none."""
    for name, value in params.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, str) and UNSIGNABLE in item:
                return f"{name} {item[:60]!r}"
    return ""


def parse_lastupdated(value: Any) -> float | None:
    """`lastupdated` (`2024-01-01T00:10:00+0000`) as POSIX seconds; None when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, LASTUPDATED_FORMAT).timestamp()
    except ValueError:
        return None


def default_address(described: Mapping[str, Any]) -> str | None:
    """The IPv4 address of the VM's default NIC (`isdefault`), else of its first."""
    nics = [nic for nic in described.get("nic") or [] if isinstance(nic, dict)]
    nic = next((n for n in nics if n.get("isdefault")), nics[0] if nics else None)
    address = nic.get("ipaddress") if nic else None
    return str(address) if address else None


def check_described(rule_type: str, vm: str, described: Mapping[str, Any] | None, details: Mapping[str, str],
                    timeout: float) -> CheckResult:
    """One rule on a VM as listVirtualMachines described it (None: it does not exist): PortCheck
    and Ping from here to its default NIC's address, GuestAgentLiveness from what the API shows.
    Shared by this backend and the local endpoint's in-process one."""
    if described is None:
        return CheckResult(ERROR, f"instance {vm!r} does not exist")
    if rule_type == GUEST_AGENT:
        return guest_agent_result(vm, described)
    address = default_address(described)
    if address is None:
        return CheckResult(ERROR, f"instance {vm!r} has no IPv4 address on its default NIC")
    if rule_type == PORT_CHECK:
        return tcp_probe(address, int(details[PORT]), timeout)
    if rule_type == PING:
        return ping(address, timeout)
    return CheckResult(ERROR, f"no checker for rule type {rule_type} on a CloudStack VM")


def guest_agent_result(vm: str, described: Mapping[str, Any]) -> CheckResult:
    """GuestAgentLiveness as far as the CloudStack API lets anyone see it (module docstring)."""
    hypervisor = described.get("hypervisor") or "an unknown hypervisor"
    if hypervisor != KVM:
        return CheckResult(ERROR, f"instance {vm!r} runs on {hypervisor}, not KVM: GuestAgentLiveness needs "
                                  "qemu-guest-agent on a KVM host")
    if described.get("state") != "Running":
        return CheckResult(NOT_READY, f"instance {vm!r} is {described.get('state')}, not Running")
    return CheckResult(READY, f"instance {vm!r} is Running on KVM (qemu-guest-agent guest-ping is not exposed by "
                              "the CloudStack API: Running on KVM is what was checked)")


def _error(command: str, subject: str, exc: Exception, config: CloudStackConfig,
           retried: float | None = None) -> Exception:
    """A precise CloudStackError for what `cs` or `requests` raised; other exceptions unchanged."""
    if isinstance(exc, CloudStackError):
        return exc
    after = f" (still failing after {retried:g} s of retries)" if retried else ""
    error = getattr(exc, "error", None)
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(error, dict):  # CloudStackApiException: an API error answer, or a failed job
        code = error.get("errorcode", status)
        text = error.get("errortext") or "no error text"
        kind = "job" if exc.args and exc.args[0] == "Job failure" else f"HTTP {status}"
        reason = (f"CloudStack {command} for {subject} failed: {kind} (errorcode {code}"
                  + (f", cserrorcode {error['cserrorcode']}" if "cserrorcode" in error else "") + f"): {text}{after}")
        if status == 401:
            reason += (f"; check the API key and secret ({KEY_ENV}/{SECRET_ENV} or the resource's CloudStack "
                       f"settings) for {config.endpoint}")
        return CloudStackError(reason, command=command, subject=subject, errorcode=code if isinstance(code, int) else None)
    module = type(exc).__module__.split(".")[0]
    if module == "cs":  # CloudStackException: not a CloudStack answer (wrong URL, not JSON, timeout)
        text = "; ".join(str(arg) for arg in exc.args) or type(exc).__name__
        return CloudStackError(f"CloudStack {command} for {subject} failed: {text}{after}", command=command, subject=subject)
    if module in ("requests", "urllib3"):  # the text carries the URL and its signature: keep only the errno
        found = _ERRNO_TEXT.search(str(exc))
        what = found.group(0).strip() if found else type(exc).__name__
        return CloudStackError(f"CloudStack {command} for {subject}: cannot reach {config.endpoint}: {what}{after}",
                               command=command, subject=subject)
    return exc


def make_backend(env: Mapping[str, str], *, given: Mapping[str, Any] | None = None) -> CloudStackBackend:
    """What `backend_for` calls: a backend configured from the resource's `CloudStack` settings
    (`given`), each defaulting to its `CLOUDSTACK_*` variable in `env` (a Failure naming the
    missing ones otherwise)."""
    return CloudStackBackend(CloudStackConfig.resolve(given, env))
