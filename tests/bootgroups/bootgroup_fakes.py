"""A scripted backend on a drivable clock for the boot-group engine tests (the real backends are the
provider's next step), and a driver that runs a start/stop step by step like the provider would."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from typing import Any, Callable, Mapping

from crhelper.operations import Budget, ManualClock, Memory
from handlers.bootgroups.backends import MISSING, RUNNING, STARTING, STOPPED, CheckResult, VmState
from handlers.bootgroups.engine import BootRun, StepOutcome, advance, begin, dump_run, load_run
from handlers.bootgroups.model import ERROR, READY, InstanceBootGroupProps, MemberSpec, GroupRef
from handlers.bootgroups.settings import GroupSettings
from handlers.bootgroups.validation import validate_group


@dataclasses.dataclass
class FakeVm:
    state: str = STOPPED
    last_power_change: float | None = None
    #: Seconds after its last boot from which its checks answer Ready (None: never).
    ready_after: float | None = 0.0
    #: Seconds a start takes to reach Running (0: at once).
    boot_seconds: float = 0.0
    booted_at: float | None = None
    guest_agent: bool = True


class FakeBackend:
    """Instances that start, stop and reboot on the test's clock; checks answer by script."""

    def __init__(self, clock: ManualClock, vms: Mapping[str, FakeVm] | None = None, *,
                 groups: Mapping[str, list[str]] | None = None, real_latency: float = 0.0) -> None:
        self.clock = clock
        self.vms: dict[str, FakeVm] = dict(vms or {})
        self.groups = dict(groups or {})
        self.real_latency = real_latency
        self.calls: list[tuple[Any, ...]] = []
        self.fail_start: set[str] = set()
        self.fail_stop: set[str] = set()
        self.fail_expand: set[str] = set()
        #: Seconds one check takes on the clock (capped by its timeout unless `hang`).
        self.check_cost: dict[str, float] = {}
        self.hang: set[str] = set()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    # --- helpers for tests
    def add(self, name: str, **kw: Any) -> FakeVm:
        self.vms[name] = FakeVm(**kw)
        return self.vms[name]

    def count(self, kind: str, vm: str | None = None) -> int:
        return sum(1 for call in self.calls if call[0] == kind and (vm is None or call[1] == vm))

    def _enter(self, *call: Any) -> None:
        with self._lock:
            self.calls.append(call)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.real_latency:
            time.sleep(self.real_latency)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _refresh(self, vm: FakeVm) -> None:
        if vm.state == STARTING and vm.booted_at is not None and self.clock.now() >= vm.booted_at:
            vm.state, vm.last_power_change = RUNNING, vm.booted_at

    # --- BootBackend
    def vm_state(self, vm: str) -> VmState:
        found = self.vms.get(vm)
        if found is None:
            return VmState(MISSING)
        self._refresh(found)
        return VmState(found.state, found.last_power_change)

    def start_vm(self, vm: str) -> None:
        self._enter("start", vm)
        try:
            if vm in self.fail_start:
                raise RuntimeError(f"host capacity exhausted for {vm}")
            found = self.vms[vm]
            if found.state == STOPPED:
                now = self.clock.now()
                if found.boot_seconds:
                    found.state, found.booted_at = STARTING, now + found.boot_seconds
                else:
                    found.state, found.last_power_change = RUNNING, now
        finally:
            self._leave()

    def stop_vm(self, vm: str, forced: bool) -> None:
        self._enter("stop", vm, forced)
        try:
            if vm in self.fail_stop:
                raise RuntimeError(f"the host of {vm} does not answer")
            found = self.vms[vm]
            found.state, found.last_power_change = STOPPED, self.clock.now()
        finally:
            self._leave()

    def reboot_vm(self, vm: str) -> None:
        self._enter("reboot", vm)
        try:
            self.vms[vm].last_power_change = self.clock.now()
        finally:
            self._leave()

    def expand_group(self, group: GroupRef) -> list[str]:
        self.calls.append(("expand", group.name))
        if group.name in self.fail_expand:
            raise RuntimeError(f"cannot list group {group.name}")
        if group.name in self.groups:
            return list(self.groups[group.name])
        return list(group.instances or [])

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        self._enter("check", vm, rule_type, dict(details), timeout, self.clock.now())
        try:
            cost = self.check_cost.get(vm, 0.0)
            if cost:
                self.clock.advance(cost if vm in self.hang else min(cost, timeout))
            found = self.vms[vm]
            if rule_type == "GuestAgentLiveness" and not found.guest_agent:
                return CheckResult(ERROR, "no guest agent answers")
            boot = found.last_power_change or 0.0
            if found.ready_after is not None and self.clock.now() - boot >= found.ready_after:
                return CheckResult(READY, f"{rule_type} ok")
            if cost and vm not in self.hang and cost >= timeout:
                return CheckResult(ERROR, f"{rule_type} timed out after {timeout:g} s")
            return CheckResult(ERROR, f"connection refused by {vm}:{details.get('port', '-')}")
        finally:
            self._leave()

    def check_calls(self, vm: str | None = None) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == "check" and (vm is None or c[1] == vm)]


def members_of(props: dict[str, Any], **context: Any) -> list[MemberSpec]:
    """The normalised plan of a Custom::InstanceBootGroup's properties (through real validation)."""
    from handlers.bootgroups.validation import Context

    checked = validate_group(InstanceBootGroupProps.model_validate({"Name": "g", **props}), Context(**context))
    return checked.members


def budget(clock: ManualClock, step_seconds: float) -> Budget:
    return Budget(clock=clock, step_started=clock.now(), step_seconds=step_seconds, deadline=math.inf,
                  memory=Memory(), invocation_left=lambda: math.inf)


def new_run(operation: str, members: list[MemberSpec], clock: ManualClock, *, settings: GroupSettings | None = None,
            poll: float = 10.0, concurrency: int = 10, forced: bool = False) -> BootRun:
    return begin(operation, "g", members, settings=settings or GroupSettings(), now=clock.now(),
                 poll_interval=poll, check_concurrency=concurrency, forced=forced)


def drive(run: BootRun, backend: FakeBackend, clock: ManualClock, *, step_seconds: float = 1e9,
          roundtrip: bool = False, after_step: Callable[[BootRun], None] | None = None,
          max_steps: int = 10_000) -> tuple[BootRun, StepOutcome, int]:
    """Call advance until the run finishes, letting the clock pass each returned delay; with
    `roundtrip`, the run goes through JSON between every two calls. Returns (run, outcome, steps)."""
    for steps in range(1, max_steps + 1):
        outcome = advance(run, backend, budget(clock, step_seconds))
        if after_step is not None:
            after_step(run)
        if outcome.finished:
            return run, outcome, steps
        clock.advance(outcome.delay)
        if roundtrip:
            run = load_run(json.loads(json.dumps(dump_run(run))))
    raise AssertionError("the run did not finish")


def no_cloud_environment(monkeypatch: Any) -> None:
    """No cloud connection or credentials from the environment: a test's template and FC context
    say where its backend calls (the local endpoints), and the metadata service is never asked."""
    from crhelper.cloud.credentials import KEY_ID_ENV, KEY_SECRET_ENV, TOKEN_ENV

    for name in ("CLOUDSTACK_ENDPOINT", "CLOUDSTACK_KEY", "CLOUDSTACK_SECRET", KEY_ID_ENV, KEY_SECRET_ENV, TOKEN_ENV,
                 "CRHELPER_ECS_ENDPOINT", "CRHELPER_ECS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALIBABA_CLOUD_ECS_METADATA_DISABLED", "true")
