"""A `BootBackend` over a local CloudStack endpoint's own state, in process: what the boot-group
API the endpoint serves (`cloudstack_service`) starts, stops and checks VMs with.

It acts as CloudStack's manager does, not as an API client: a start, stop or reboot is the VM's
own async job (`CloudStackState.start` ...; they show in `listAsyncJobs`), then the endpoint is
woken so guests start and die at once. A VM whose job failed raises at its next `vm_state`, with
the job's error, so a start halts naming it. States map as the `cloudstack` backend maps them
(`backend_cloudstack.STATES`), with `lastupdated` to the sub-second (the state's own clock, the
one the engine runs on). Checks are the `cloudstack` backend's: PortCheck a TCP connect to the
VM's address (127.0.0.N), Ping `probes.ping`, GuestAgentLiveness Running on KVM; `ineligible`
reads the same fields (`backend_cloudstack.ineligibility`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from crhelper.errors import Failure
from crhelper.local.cloudstack_state import JOB_FAILED, ApiError, AsyncJob, VirtualMachine

from .backend_cloudstack import STATES, check_described, ineligibility
from .backends import FAILED, MISSING, RUNNING, STARTING, STOPPED, CheckResult, VmState
from .model import GroupRef

if TYPE_CHECKING:
    from crhelper.local.cloudstack_server import LocalCloudStack


class EndpointBackend:
    """BootBackend and Inventory (`vm_states`, `ineligible`) on one `LocalCloudStack`."""

    #: Seconds a VM may read Stopped after its start was asked (the start is synchronous here:
    #: a Stopped VM then means a job that failed, which `vm_state` reports first).
    start_grace = 1.0

    def __init__(self, cloud: "LocalCloudStack") -> None:
        self.cloud = cloud
        self._lock = threading.Lock()
        self._jobs: dict[str, str] = {}  # vm -> its last start/stop/reboot job

    def _vm(self, vm: str) -> VirtualMachine | None:
        try:
            return self.cloud.vm(vm)
        except ApiError:  # an unknown id
            return None

    def _described(self, vm: str) -> dict[str, Any] | None:
        found = self.cloud.state.list_vms(lambda candidate: candidate.id == vm)
        return found[0] if found else None

    # --- BootBackend ------------------------------------------------------------------------------

    def vm_state(self, vm: str) -> VmState:
        """The VM's state, after a look at its last job: a failed one raises with its error."""
        state = self._state_now(vm)  # takes the steps that are due: a job that failed shows as failed
        self._raise_failed_job(vm)
        return state

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        """The states of `vms`, leaving out a VM whose last job failed: the engine then reads it
        with `vm_state`, which raises that job's error for it."""
        states = {vm: self._state_now(vm) for vm in dict.fromkeys(vms)}
        return {vm: state for vm, state in states.items() if self._failed_job(vm) is None}

    def _state_now(self, vm: str) -> VmState:
        found = self._vm(vm)
        return VmState(MISSING) if found is None else VmState(STATES.get(found.state, FAILED), found.lastupdated)

    def start_vm(self, vm: str) -> VmState | None:
        state = self.vm_state(vm)
        if state.state in (RUNNING, STARTING):
            return state
        self._act(vm, lambda: self.cloud.state.start(vm).id)
        return None

    def stop_vm(self, vm: str, forced: bool) -> None:
        if self.vm_state(vm).state != STOPPED:
            self._act(vm, lambda: self.cloud.state.stop(vm, forced=forced).id)

    def reboot_vm(self, vm: str) -> None:
        self._act(vm, lambda: self.cloud.state.reboot(vm).id)

    def expand_group(self, group: GroupRef) -> list[str]:
        """The VMs of the instance group `group.id` now (§1: expanded when the operation runs)."""
        if group.instances is not None:
            return list(group.instances)
        if group.id is None or group.id not in self.cloud.state.groups:
            raise Failure(f"instance group {group.id or group.name!r} does not exist")
        return [str(vm["id"]) for vm in self.cloud.state.list_vms(lambda candidate: candidate.group_id == group.id)]

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        return check_described(rule_type, vm, self._described(vm), details, timeout)

    # --- Inventory --------------------------------------------------------------------------------

    def ineligible(self, vms: Sequence[str]) -> dict[str, str]:
        """Why some of `vms` may not join a boot group (§5: VNF appliance, CKS node, AutoScale)."""
        reasons = {}
        for vm in dict.fromkeys(vms):
            described = self._described(vm)
            reason = ineligibility(described) if described is not None else ""
            if reason:
                reasons[vm] = reason
        return reasons

    # --- jobs -------------------------------------------------------------------------------------

    def _act(self, vm: str, submit: Any) -> None:
        job_id = submit()
        with self._lock:
            self._jobs[vm] = job_id
        self.cloud.advance()  # guests start or die now, not at the ticker's next look

    def _failed_job(self, vm: str) -> AsyncJob | None:
        with self._lock:
            job = self.cloud.state.jobs.get(self._jobs.get(vm, ""))
        return job if job is not None and job.status == JOB_FAILED else None

    def _raise_failed_job(self, vm: str) -> None:
        """Raise the error of the VM's failed job, once (later reads show the VM's state)."""
        job = self._failed_job(vm)
        if job is None:
            return
        with self._lock:
            if self._jobs.get(vm) == job.id:
                del self._jobs[vm]
        raise Failure(f"{job.command} job {job.id} failed: {job.result.get('errortext', 'no error text')} "
                      f"(errorcode {job.result.get('errorcode')})")
