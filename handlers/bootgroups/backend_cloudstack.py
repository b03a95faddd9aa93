"""The boot-group backend for Apache CloudStack, through `cs` (imported when the first call is made).

    backend = CloudStackBackend(CloudStackConfig.resolve(settings))   # or CLOUDSTACK_* from the environment

Start, stop and reboot submit the VM's async job and watch `queryAsyncJobResult` for at most
`job_wait` seconds: a job that fails quickly (jobstatus 2) raises at once, with its `jobresultcode`
and error text; one still pending is left running, since the engine only needs "asked" and must
not wait a whole tier out on one job. The job is remembered, and the next `vm_state` of that VM
looks at it once more before reading `listVirtualMachines`, so a job that fails later raises there.
(The memory is this process's: after a restart, a job that failed unseen shows as a VM that stays
Stopped until the tier's deadline.)

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
from typing import Any, Callable, Mapping

from crhelper.cloud.poll import Done, Finished, Observation, PollSettings, Waiting, is_throttling_or_server_error, poll
from crhelper.config import env_float, env_int
from crhelper.errors import Failure
from crhelper.logs import get_logger

from .backends import FAILED, MISSING, RUNNING, STARTING, STOPPED, STOPPING, CheckResult, VmState
from .model import ERROR, GUEST_AGENT, NOT_READY, PING, PORT, PORT_CHECK, READY, GroupRef
from .probes import ping, tcp_probe

ENDPOINT_ENV, KEY_ENV, SECRET_ENV = "CLOUDSTACK_ENDPOINT", "CLOUDSTACK_KEY", "CLOUDSTACK_SECRET"
METHOD_ENV, TIMEOUT_ENV = "CLOUDSTACK_METHOD", "CLOUDSTACK_TIMEOUT"
JOB_WAIT_ENV = "CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT"
RETRY_ENV = "CRHELPER_BOOTGROUP_CLOUDSTACK_RETRY_SECONDS"

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

    @classmethod
    def resolve(cls, given: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> "CloudStackConfig":
        """From the resource's settings (`Endpoint`, `Key`, `Secret`, `Method`, `Timeout`), each
        defaulting to the variable `cs` reads (`CLOUDSTACK_ENDPOINT`, `_KEY`, `_SECRET`, `_METHOD`,
        `_TIMEOUT`); `CRHELPER_BOOTGROUP_CLOUDSTACK_JOB_WAIT` (2 s) and `_RETRY_SECONDS` (10 s)."""
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
                   retry_seconds=env_float(env, RETRY_ENV, 10.0))


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
        self._seen: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"CloudStackBackend(endpoint={self.config.endpoint!r})"

    # --- BootBackend ------------------------------------------------------------------------------

    def vm_state(self, vm: str) -> VmState:
        """The state `listVirtualMachines` reports, after one look at a job still pending for the
        VM (a failed one raises its error here)."""
        self._watch_job(vm, 0.0)
        described = self._describe(vm)
        if described is None:
            return VmState(MISSING)
        return VmState(STATES.get(str(described.get("state")), FAILED), parse_lastupdated(described.get("lastupdated")))

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
        self._submit("rebootVirtualMachine", vm)

    def expand_group(self, group: GroupRef) -> list[str]:
        """An instance group's VMs now: by `Id` (`listVirtualMachines groupid=`), by its listed
        `Instances`, or by `Name` (the one instance group of that name)."""
        if group.instances is not None:
            return list(group.instances)
        if group.tag_key is not None:
            raise Failure(f"instance group {group.name or ''!r}: Tag selects ECS instances; on CloudStack give Id or Instances")
        group_id = group.id
        if group_id is None:
            if not group.name:
                raise Failure("an instance group needs Id, Instances or Name on the cloudstack backend")
            found = self._call("listInstanceGroups", f"instance group {group.name!r}", read=True, name=group.name)
            matches = [g for g in found.get("instancegroup", []) if g.get("name") == group.name]
            if len(matches) != 1:
                found_text = "no CloudStack instance group has" if not matches else f"{len(matches)} CloudStack instance groups have"
                raise Failure(f"instance group {group.name!r}: {found_text} this name; give its Id")
            group_id = str(matches[0]["id"])
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
        return CheckResult(ERROR, f"no checker for rule type {rule_type} on the cloudstack backend")

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
        for up to `retry_seconds`; a failure raises CloudStackError naming `command` and `subject`."""
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
        or a 431 for an id that does not exist)."""
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

    def _submit(self, command: str, vm: str, **params: Any) -> None:
        answer = self._call(command, f"VM {vm!r}", read=False, id=vm, **params)
        jobid = answer.get("jobid") if isinstance(answer, dict) else None
        if not jobid:
            return
        with self._lock:
            self._jobs[vm] = _Job(command, str(jobid))
        _log.info("CloudStack %s submitted for VM %s: job %s", command, vm, jobid)
        self._watch_job(vm, self.config.job_wait)

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
