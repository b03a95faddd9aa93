"""What the engine asks of a backend (local processes, ECS, CloudStack): one Protocol, no
implementation here. Each backend lives in its own module and satisfies it.

A backend may also offer the calls of `Inventory` (each one on its own): `vm_states`, the states of
several instances from one call (the local backend: one supervisor `list()`; ECS: DescribeInstanceStatus),
used by the engine and the provider when it is there (`engine.vm_states`), one instance at a time
otherwise; and, for the Create/Update checks of §5, `group_identity` and `ineligible`. Two more
optional calls serve the engine: `watch_check(rule_type, vm, details, timeout, window) -> CheckResult`
(a check that keeps trying through `window` seconds and answers the moment it is Ready, so a tier is
not seen ready only on the poll grid) and `stopped_detail(vm) -> str | None` (why an instance that
should run is down: an exit code or signal, a log path), used in a failed attempt's reason.

Times are on the engine's clock (POSIX seconds in production), so a backend reports an instance's
last power change on the same scale the engine measures the initial delay with.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol, Sequence

from .model import GroupRef

# Instance power states as the engine reads them (ECS and CloudStack names map onto these).
RUNNING, STOPPED, STARTING, STOPPING, MISSING, FAILED = "Running", "Stopped", "Starting", "Stopping", "Missing", "Error"


@dataclasses.dataclass(frozen=True)
class VmState:
    """An instance's power state and when it last changed (None: the backend cannot tell)."""

    state: str
    last_power_change: float | None = None

    @property
    def running(self) -> bool:
        return self.state == RUNNING


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """What one readiness check saw: Ready, NotReady or Error, and a message naming what it saw
    (`connection refused by 127.0.0.1:5432`)."""

    status: str
    message: str = ""


class BootBackend(Protocol):
    """The calls a start, stop or reboot makes. Each may raise; the engine turns an exception into a
    halt (start, reboot, a check) or a reported failure (stop) naming the instance and the call."""

    def vm_state(self, vm: str) -> VmState:
        """The instance's power state; MISSING for an instance that does not exist."""
        ...

    def start_vm(self, vm: str) -> VmState | None:
        """Ask for a start (returning at once is fine: the engine waits until the instance reads
        Running, without counting an attempt). Starting a Starting or Running instance is a no-op.
        A backend whose start call answers with the instance's state returns it (the engine then
        does not read it again); None: the engine reads it."""
        ...

    def stop_vm(self, vm: str, forced: bool) -> None:
        """Ask for a stop; `forced`: power it off, and mark it Stopped even when the host cannot be reached."""
        ...

    def reboot_vm(self, vm: str) -> None:
        """Reboot a Running instance (reboot-on-retry)."""
        ...

    def expand_group(self, group: GroupRef) -> list[str]:
        """The instances an instance group holds now (§1: expanded when the operation runs)."""
        ...

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        """Run one Ping, PortCheck or GuestAgentLiveness check within `timeout` seconds (the attempt's
        remaining budget, possibly 0). An instance without a guest agent answers GuestAgentLiveness
        with Error."""
        ...


class NotFound(LookupError):
    """An item the template names does not exist for these credentials (an instance group by Id or
    Name, a tag that matches nothing is not this: an empty group is allowed). The message says which."""


class Inventory(Protocol):
    """Optional calls (a backend offers any of them; callers look each one up with getattr)."""

    def vm_states(self, vms: Sequence[str]) -> dict[str, VmState]:
        """The states of `vms` from as few calls as the API allows; MISSING for an id that does not
        exist or belongs to another account (§5: the item must exist and belong to the owner)."""
        ...

    def group_identity(self, group: GroupRef) -> str | None:
        """What makes this instance group one item across stacks and names (§5 UNIQUE(member_type,
        member_id)): CloudStack's group uuid (a Name resolved through listInstanceGroups), ECS's
        `tag:<Key>=<Value>`; None when the group's Name is its identity (an `Instances` list). Raises
        NotFound for a group that does not exist."""
        ...

    def ineligible(self, vms: Sequence[str]) -> dict[str, str]:
        """Why some of `vms` may not join a boot group (§5: a VNF appliance, a CKS cluster node, a
        member of an AutoScale VM group), by instance id; the others are absent."""
        ...
