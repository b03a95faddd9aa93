"""What the engine asks of a backend (local processes, ECS, CloudStack): one Protocol, no
implementation here. Each backend lives in its own module and satisfies it.

A backend may also offer `vm_states(vms) -> dict[str, VmState]`, the states of several instances
from one call (the local backend: one supervisor `list()`); the engine and the provider use it when
it is there (`engine.vm_states`) and read one instance at a time otherwise.

Times are on the engine's clock (POSIX seconds in production), so a backend reports an instance's
last power change on the same scale the engine measures the initial delay with.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Protocol

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
