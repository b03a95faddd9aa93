"""The `local` backend: `Custom::LocalInstance` processes started and stopped for real by the
per-home supervisor daemon (so an instance outlives the invocation that started it), checked from
this host: PortCheck is a TCP connect to the instance's Host:port, Ping an ICMP echo where this
process may send one and otherwise a TCP answer (accepted or refused) on a declared port or port 7
(`probes.ping`; the message says which ran), GuestAgentLiveness a guest-ping to the agent
(`guest_agent`) that wraps an instance declared with `GuestAgent: true`.

Ping of a local instance is vacuous: its Host is a loopback address, which answers (an echo reply,
or a TCP RST on port 7) whenever this host's network is up, whether or not the instance runs; so
Ping says no more than "its process is Running" here, and its message says so. PortCheck and
GuestAgentLiveness do tell.
"""

from __future__ import annotations

import hashlib
import ipaddress
import sys
import time
from typing import Mapping, Sequence

from crhelper.local.processes import python_env
from crhelper.local.supervisor import EXITED, LIVE, NOT_FOUND, ProcessStatus, SupervisorClient, SupervisorError

from . import guest_agent, probes
from .backends import MISSING, RUNNING, STOPPED, CheckResult, VmState
from .model import ERROR, GUEST_AGENT, PING, PORT, PORT_CHECK, READY, GroupRef
from .state import GroupStore, InstanceRecord

#: What an instance's process is told about itself.
ENV_ID, ENV_HOST, ENV_PORT, ENV_PORTS = ("CRHELPER_INSTANCE_ID", "CRHELPER_INSTANCE_HOST", "CRHELPER_INSTANCE_PORT",
                                         "CRHELPER_INSTANCE_PORTS")
#: How old (s) an instance record read by a batch read may be for a check to use it: a poll round
#: reads its tier's states, then checks them at once.
RECORD_FRESH_SECONDS = 1.0
#: Seconds between two tries of a watched check (`watch_check`): a refused connect on loopback
#: costs tens of microseconds, so a tier's ten watchers cost little CPU and see a port within this.
WATCH_EVERY_SECONDS = 0.005
#: What a Ready Ping of a loopback Host adds to its message (see above).
LOOPBACK_PING = ("a loopback address answers whether or not the instance runs: this says no more than "
                 "that its process is Running (PortCheck or GuestAgentLiveness tell more)")


def agent_address(home: str, instance_id: str) -> str:
    """The abstract socket name of an instance's guest agent (unique per home and instance)."""
    digest = hashlib.sha256(f"{home}\0{instance_id}".encode()).hexdigest()[:20]
    return f"crhelper-guest-agent-{digest}"


def process_argv(record: InstanceRecord) -> list[str]:
    """The argv the supervisor runs: the command (a string through /bin/sh -c), wrapped by the guest
    agent when the instance has one."""
    shell, command = record.shell, list(record.argv)
    if not record.guest_agent:
        return ["/bin/sh", "-c", command[0]] if shell else command
    return [sys.executable, "-m", "handlers.bootgroups.guest_agent", "--address", record.agent_address,
            *(["--shell"] if shell else []), "--", *command]


def process_env(record: InstanceRecord) -> dict[str, str]:
    """The instance's Environment plus its id, host and ports (and the import path of the agent)."""
    env = dict(record.environment)
    env.update({ENV_ID: record.instance_id, ENV_HOST: record.host,
                ENV_PORT: str(record.ports[0]) if record.ports else "",
                ENV_PORTS: ",".join(str(port) for port in record.ports), "PYTHONUNBUFFERED": "1"})
    if record.guest_agent:
        env["PYTHONPATH"] = python_env(record.environment)["PYTHONPATH"]
    return env


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: "localhost" is the only loopback one we can tell without a lookup
        return host == "localhost"


def _vm_state(status: ProcessStatus) -> VmState:
    if status.state in LIVE:
        return VmState(RUNNING, status.started_at)
    return VmState(STOPPED, status.ended_at)


class LocalBackend:
    """BootBackend over the local instances of one home."""

    def __init__(self, store: GroupStore, supervisor: SupervisorClient | None = None, *,
                 watch_every: float = WATCH_EVERY_SECONDS) -> None:
        self.store = store
        self.supervisor = supervisor or SupervisorClient()
        self.watch_every = watch_every
        #: Instance records as the last batch read saw them (monotonic time, record): the checks of
        #: a poll round use those instead of reading the store again, each.
        self._seen: dict[str, tuple[float, InstanceRecord]] = {}
        #: The supervisor's status of each instance as the last batch read saw it (`stopped_detail`).
        self._statuses: dict[str, ProcessStatus] = {}

    def _record(self, vm: str) -> InstanceRecord:
        record = self.store.get_instance(vm)
        if record is None:
            raise LookupError(f"no Custom::LocalInstance {vm!r} is registered in {self.supervisor.home}")
        return record

    def _recent_record(self, vm: str) -> InstanceRecord:
        """The record the round's batch read just took (within RECORD_FRESH_SECONDS), else the store's."""
        seen = self._seen.get(vm)
        if seen is not None and time.monotonic() - seen[0] <= RECORD_FRESH_SECONDS:
            return seen[1]
        return self._record(vm)

    def vm_state(self, vm: str) -> VmState:
        return self.vm_states([vm])[vm]

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        """The states of several instances from one store read and one supervisor `list()` (a tier's)."""
        if len(vms) > 1:
            records = {record.instance_id: record for record in self.store.list_instances()}
        else:
            records = {vm: record for vm in vms if (record := self.store.get_instance(vm)) is not None}
        at = time.monotonic()
        for vm in vms:
            if vm in records:
                self._seen[vm] = (at, records[vm])
        out = {vm: VmState(MISSING) for vm in vms}
        if any(vm in records for vm in vms):
            statuses = {status.name: status for status in self.supervisor.list()}
            for vm in vms:
                if vm in records:
                    status = statuses.get(vm)
                    if status is not None:
                        self._statuses[vm] = status
                    out[vm] = VmState(STOPPED, None) if status is None else _vm_state(status)  # None: never started
        return out

    def stopped_detail(self, vm: str) -> str | None:
        """Why an instance read Stopped is down, as the last batch read saw it: its process's exit
        (code or signal) and its log, or a stop by the supervisor; None while it runs or if unknown."""
        status = self._statuses.get(vm)
        if status is None or status.state in LIVE:
            return None
        if status.state != EXITED:
            return f"its process was stopped through the supervisor ({status.state}); its log: {status.log_path}"
        code = status.exit_code
        how = ("exited (exit code unknown)" if code is None else f"was killed by signal {-code}" if code < 0
               else f"exited with code {code}")
        return f"its process {how}; its log: {status.log_path}"

    def start_vm(self, vm: str) -> VmState:
        """Start it; the supervisor's answer is its state (Running once spawned: no second read). The
        record is the one the tier's batch read just took, when it did (no store read per start)."""
        record = self._recent_record(vm)
        return _vm_state(self.supervisor.start(vm, process_argv(record), owner=record.owner, cwd=record.cwd or None,
                                               env=process_env(record)))

    def stop_vm(self, vm: str, forced: bool) -> None:
        try:
            self.supervisor.stop(vm, grace=0.0 if forced else None)
        except SupervisorError as exc:
            if exc.code != NOT_FOUND and not forced:
                raise

    def reboot_vm(self, vm: str) -> None:
        self._record(vm)
        self.supervisor.restart(vm)

    def expand_group(self, group: GroupRef) -> list[str]:
        if group.instances is None:
            raise ValueError(f"instance group {group.name!r}: the local backend needs its Instances listed")
        return list(group.instances)

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        return self._check(self._recent_record(vm), rule_type, details, timeout)

    def watch_check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float,
                    window: float) -> CheckResult:
        """`check`, tried again every `watch_every` s for up to `window` s while it is not Ready
        (`probes.watch`); what cannot change (no guest agent, no checker) is answered at once."""
        record = self._recent_record(vm)
        if rule_type not in (PORT_CHECK, PING) and not (rule_type == GUEST_AGENT and record.guest_agent):
            return self._check(record, rule_type, details, timeout)
        return probes.watch(lambda left: self._check(record, rule_type, details, left), timeout, window,
                            self.watch_every)

    def _check(self, record: InstanceRecord, rule_type: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        vm = record.instance_id
        if rule_type == PORT_CHECK:
            return probes.tcp_probe(record.host, int(details[PORT]), timeout)
        if rule_type == PING:
            pinged = probes.ping(record.host, timeout, record.ports)
            if pinged.status == READY and _is_loopback(record.host):
                return CheckResult(READY, f"{pinged.message}; {LOOPBACK_PING}")
            return pinged
        if rule_type == GUEST_AGENT:
            if not record.guest_agent:
                return CheckResult(ERROR, f"instance {vm!r} runs no guest agent (a Custom::LocalInstance needs GuestAgent: true)")
            alive, seen = guest_agent.ping(record.agent_address, timeout)
            return CheckResult(READY if alive else ERROR, seen)
        return CheckResult(ERROR, f"no checker for rule type {rule_type}")
