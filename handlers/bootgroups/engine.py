"""Start, stop and reboot (spec §4) as a resumable step over JSON-serialisable state.

A run's whole progress — per tier and per VM (`ready`, `gave_up`, `retries`, `attempt_start`,
`last_boot`), the result cache, the timeline and the events — is one `BootRun` dataclass.
`advance(run, backend, budget)` does what is due, sleeping between polls while the budget allows,
and returns either finished (ok, or halted with a Reason) or "call again in `delay` s". The run is
changed in place; store it (`dump_run`) after each call, or from `checkpoint`, called after each
tier's start calls and after poll rounds that leave their tier waiting, at most once a second of
rounds (`advance`; a round that ends a tier or the run is stored with what follows it a moment
later: the next tier's start calls, or the end).
A process that dies between two calls resumes from the stored run: finished tiers are not started
again, and an attempt counts only once its round was stored.

Start (§4.1-§4.3): tiers in ascending BootOrder. A tier expands its group members, asks every VM
that is not Running to start (at most `check_concurrency` calls at once) and anchors an already
Running VM to its last power change; then it polls: each round runs §4.2 concurrently for every VM
neither ready nor given up, then the Instance Group step, then waits one poll interval. A backend
that can watch a check (`watch_check`) spends that interval in the checks instead of asleep: a
check not Ready keeps trying and answers the moment it is (`_round`). Past
`initialDelay + (N+1)·timeout + N·poll`, counted from the end of the tier's start calls (so it
includes the boot on a backend whose start returns before Running), the start halts. A halt stops
nothing (no rollback). A VM whose start was asked and that still reads Stopped once `start_grace`
has passed failed to start (its job failed or was refused), as does one whose state cannot be read
then; one that went down after it ran is NotReady like any other, its attempts name why where the
backend can tell (`stopped_detail`: a local process's exit code).
Stop (§4.4): tiers in descending order through `crhelper.tiers` (CONTINUE policy: a failure is
reported, the remaining tiers are still stopped), skipping Stopped VMs, passing `forced`; a tier
waits at most `settings.stop_tier_timeout` (ReadinessTimeoutSeconds) for its VMs to read Stopped.
Reboot (§4.5): the stop, then the start.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import threading
from typing import Any, Callable, Mapping, Sequence, TypeVar

from crhelper.errors import Failure
from crhelper.operations.budget import Budget, NotYet
from crhelper.operations.codec import dump, load
from crhelper.response import exception_reason
from crhelper.tiers import CONTINUE, ItemRun, TierProgress, plan, run as run_tiers

from . import events as ev
from .backends import FAILED, MISSING, STOPPED, BootBackend, CheckResult, VmState
from .events import Event, TimelineEntry
from .model import ERROR, INSTANCE_GROUP, READY, UNKNOWN, VIRTUAL_MACHINE, GroupRef, MemberSpec, tiers_of
from .readiness import (
    GROUP_SCOPE, CacheEntry, ChildView, cache_key, cached, evaluate_group, evaluate_vm, vm_rules,
)
from .settings import GroupSettings, stop_tier_timeout, tier_deadline

T = TypeVar("T")
R = TypeVar("R")

START, STOP, REBOOT = "start", "stop", "reboot"
OPERATIONS = (START, STOP, REBOOT)
# Tier statuses of a start.
PENDING, WAITING, TIER_READY, HALTED, SKIPPED = "pending", "waiting", "ready", "halted", "skipped"
#: A round due this close (s) runs now rather than after another pause.
TOLERANCE = 1e-6
NO_ROLLBACK = "instances already started keep running (no rollback)"
#: Seconds of poll rounds between two checkpoints, at most (`advance`).
CHECKPOINT_EVERY_SECONDS = 1.0
#: Seconds (at least) a VM may read Stopped after its start was asked before the start counts as
#: failed (engine.start_grace; a backend may give its own `start_grace`).
START_GRACE_SECONDS = 5.0


@dataclasses.dataclass
class VmRun:
    """One VM of a tier during a start (§4.1.1)."""

    vm: str
    member: str
    ready: bool = False
    gave_up: bool = False
    retries: int = 0
    attempt_start: float | None = None
    last_boot: float | None = None
    #: A start was asked for and the VM does not read Running yet (no attempt counts meanwhile).
    booting: bool = False
    was_running: bool = False
    start_requested_at: float | None = None
    evaluations: int = 0
    reboots: int = 0
    status: str = UNKNOWN
    message: str = ""


@dataclasses.dataclass
class TierRun:
    """One tier of a start: its members, their VMs once expanded, and where its wait is."""

    order: int
    members: list[str]
    status: str = PENDING
    vms: list[VmRun] = dataclasses.field(default_factory=list)
    ready_members: list[str] = dataclasses.field(default_factory=list)
    began: float | None = None
    wait_started: float | None = None
    next_round: float | None = None
    ended: float | None = None
    rounds: int = 0


@dataclasses.dataclass
class StartProgress:
    tiers: list[TierRun] = dataclasses.field(default_factory=list)
    current: int = 0
    halted: str | None = None


@dataclasses.dataclass
class BootRun:
    """A start, stop or reboot of one boot group, as stored between steps."""

    operation: str
    group: str
    members: list[MemberSpec]
    settings: GroupSettings = dataclasses.field(default_factory=GroupSettings)
    poll_interval: float = 10.0
    check_concurrency: int = 10
    forced: bool = False
    began: float = 0.0
    #: "stop" then "start" for a reboot; "done" at the end.
    phase: str = START
    start: StartProgress | None = None
    stop: TierProgress | None = None
    stop_failures: list[str] = dataclasses.field(default_factory=list)
    cache: dict[str, CacheEntry] = dataclasses.field(default_factory=dict)
    timeline: list[TimelineEntry] = dataclasses.field(default_factory=list)
    events: list[Event] = dataclasses.field(default_factory=list)
    finished: bool = False
    ok: bool = False
    reason: str | None = None
    ended: float | None = None

    @property
    def deadline(self) -> float:
        """A start tier's deadline (s), counted from the start of its wait (§4.1.8)."""
        return tier_deadline(self.settings, self.poll_interval)

    def member(self, key: str) -> MemberSpec:
        return next(member for member in self.members if member.key == key)


@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """What one `advance` call came to: finished (ok, or not with `reason`), or call again in `delay` s."""

    finished: bool
    ok: bool = False
    delay: float = 0.0
    reason: str | None = None


def begin(operation: str, group: str, members: Sequence[MemberSpec], *, settings: GroupSettings, now: float,
          poll_interval: float = 10.0, check_concurrency: int = 10, forced: bool = False,
          cache: dict[str, CacheEntry] | None = None) -> BootRun:
    """A new run over a snapshot of the plan; `cache` is the group's stored result cache (kept in
    the run and written back by the provider when it ends)."""
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    if check_concurrency < 1:
        raise ValueError(f"check_concurrency must be ≥ 1, got {check_concurrency!r}")
    run = BootRun(operation=operation, group=group, members=[dataclasses.replace(m) for m in members],
                  settings=settings, poll_interval=poll_interval, check_concurrency=check_concurrency,
                  forced=forced, began=now, phase=START if operation == START else STOP,
                  cache=dict(cache or {}))
    if run.phase == START:
        run.start = _start_plan(run.members)
    return run


def dump_run(run: BootRun) -> Any:
    """The run as JSON data (what the provider stores between steps)."""
    return dump(run)


def load_run(raw: Any) -> BootRun:
    """A stored run rebuilt; crhelper.operations.StateError names what does not fit."""
    loaded: BootRun = load(BootRun, raw)
    return loaded


def advance(run: BootRun, backend: BootBackend, budget: Budget, *,
            checkpoint: Callable[[BootRun], None] | None = None,
            checkpoint_every: float = CHECKPOINT_EVERY_SECONDS) -> StepOutcome:
    """Do what is due, waiting between polls while `budget.left()` allows; the run changes in place.
    Poll rounds are checkpointed at most once per `checkpoint_every` seconds (the engine's clock):
    a store costs tens of ms of CPU, and with a short poll interval every round's would compete with
    the instances starting. A process that dies loses at most that many seconds of rounds: those
    attempts were not counted and are made again (as for any round lost with its process)."""
    clock = budget.clock
    lock = threading.Lock()
    saved = checkpoint or (lambda _run: None)
    last_round_saved = [-math.inf]

    def round_saved(current: BootRun) -> None:
        if clock.now() - last_round_saved[0] >= checkpoint_every - TOLERANCE:
            saved(current)
            last_round_saved[0] = clock.now()
    while not run.finished:
        if run.phase == STOP:
            delay = _advance_stop(run, backend, budget, lock)
            saved(run)
            if delay is None:
                _after_stop(run, clock.now())
                saved(run)
                continue
        else:
            delay = _advance_start(run, backend, budget, saved, round_saved)
            if delay is None:
                _finish(run, clock.now())
                saved(run)
                break
        if delay > budget.left() or budget.left() <= 0:
            return StepOutcome(False, delay=delay)
        clock.sleep(delay)
    return StepOutcome(True, ok=run.ok, reason=run.reason)


# --- start ---------------------------------------------------------------------------------------


def _start_plan(members: Sequence[MemberSpec]) -> StartProgress:
    return StartProgress(tiers=[TierRun(order=order, members=[m.key for m in group]) for order, group in tiers_of(list(members))])


def _tier_name(progress: StartProgress, tier: TierRun) -> str:
    return f"tier {progress.tiers.index(tier) + 1} of {len(progress.tiers)} (order {tier.order})"


def _advance_start(run: BootRun, backend: BootBackend, budget: Budget, saved: Callable[[BootRun], None],
                   round_saved: Callable[[BootRun], None]) -> float | None:
    """Run the start from where it is; None once it ended (every tier ready, or halted), else the
    seconds until its next round. A tier's start calls are always stored (`saved`), its rounds
    through `round_saved`."""
    progress = run.start
    assert progress is not None
    clock = budget.clock
    while progress.current < len(progress.tiers) and progress.halted is None:
        tier = progress.tiers[progress.current]
        if tier.status == PENDING:
            _open_tier(run, progress, tier, backend, clock.now)
            saved(run)
            if progress.halted is not None:
                break
        assert tier.wait_started is not None and tier.next_round is not None
        deadline = tier.wait_started + run.deadline
        now = clock.now()
        if now < tier.next_round - TOLERANCE:
            return tier.next_round - now
        if now >= deadline:
            _halt(run, progress, tier, _deadline_reason(run, progress, tier), now)
            break
        due = _round(run, progress, tier, backend, clock.now, budget.left())
        if progress.halted is None and set(tier.ready_members) >= set(tier.members):
            tier.status, tier.ended = TIER_READY, clock.now()
            _note(run, ev.TIER_READY, "", f"{_tier_name(progress, tier)} is ready after {tier.rounds} round(s)",
                  tier.order, tier.ended)
            progress.current += 1
            continue  # stored with the next tier's opening or the run's end, a moment later
        if progress.halted is not None:
            continue  # stored with the run's end
        now = clock.now()
        if now >= deadline:
            _halt(run, progress, tier, _deadline_reason(run, progress, tier), now)
            continue
        # A round whose checks could watch through the poll interval has had its pause (§4.1.5).
        tier.next_round = min(max(now, due) if due is not None else now + run.poll_interval, deadline)
        round_saved(run)
        if budget.left() <= 0:  # this step's time is spent: the next round belongs to the next step
            return max(0.0, tier.next_round - clock.now())
    return None


def _open_tier(run: BootRun, progress: StartProgress, tier: TierRun, backend: BootBackend,
               now: Callable[[], float]) -> None:
    """§4.1.1-4: expand the members, start every VM that is not Running, anchor the others."""
    tier.began = tier.began if tier.began is not None else now()
    _note(run, ev.TIER_START, "", f"{_tier_name(progress, tier)}: {', '.join(tier.members)}", tier.order, tier.began)
    vms: list[VmRun] = []
    seen: set[str] = set()
    for key in tier.members:
        member = run.member(key)
        if member.kind == VIRTUAL_MACHINE:
            found = [member.key]
        else:
            assert member.group is not None
            try:
                found = list(backend.expand_group(member.group))
            except Exception as exc:
                _halt(run, progress, tier, f"{_tier_name(progress, tier)}: could not list the instances of "
                                           f"{member.describe()}: {exception_reason(exc)}; {NO_ROLLBACK}", now())
                return
        for vm in found:
            if vm not in seen:
                seen.add(vm)
                vms.append(VmRun(vm=vm, member=key))
    tier.vms = vms
    known = vm_states(backend, [vm_run.vm for vm_run in vms], batch_only=True)
    outcomes = _parallel(lambda vm_run: _start_one(run, tier, vm_run, backend, now, known.get(vm_run.vm)), vms,
                         run.check_concurrency)
    for entries, _failure in outcomes:
        run.timeline.extend(entries)
    failures = [failure for _entries, failure in outcomes if failure]
    if failures:
        more = f" ({len(failures) - 1} more start(s) failed)" if len(failures) > 1 else ""
        _halt(run, progress, tier, f"{_tier_name(progress, tier)}: {failures[0]}{more}; {NO_ROLLBACK}", now())
        return
    tier.status = WAITING
    tier.wait_started = tier.next_round = now()


def vm_states(backend: BootBackend, vms: Sequence[str], *, batch_only: bool = False) -> dict[str, VmState]:
    """The states of `vms` in one backend call where the backend offers `vm_states` (see
    `backends`); else (or when that call fails) one `vm_state` each, or nothing with `batch_only`
    (the caller then reads each itself, so a failure is reported per instance)."""
    batch = getattr(backend, "vm_states", None)
    if callable(batch) and vms:
        try:
            states = batch(list(vms))
        except Exception:  # noqa: BLE001 - read one by one below: each failure is then the instance's own
            states = None
        if isinstance(states, dict):
            return {vm: states[vm] for vm in vms if isinstance(states.get(vm), VmState)}
    return {} if batch_only else {vm: backend.vm_state(vm) for vm in vms}


def _start_one(run: BootRun, tier: TierRun, vm_run: VmRun, backend: BootBackend,
               now: Callable[[], float], known: VmState | None = None) -> tuple[list[TimelineEntry], str | None]:
    """Start one VM unless it is Running (then anchor it to its last power change, §4.1.3); `known`:
    its state as the tier's batch read saw it just before."""
    vm = vm_run.vm
    try:
        state = known if known is not None else backend.vm_state(vm)
        at = now()
        if state.state == MISSING:
            return [], f"instance {vm!r} does not exist"
        if state.running:
            vm_run.was_running = True
            vm_run.last_boot = state.last_power_change if state.last_power_change is not None else at
            vm_run.attempt_start = at
            wait = max(0.0, run.settings.initial_delay - (at - vm_run.last_boot))
            return [TimelineEntry(at, ev.VM_RUNNING, vm, f"already Running (since {at - vm_run.last_boot:.1f} s), not "
                                                        f"restarted; first check in {wait:.1f} s", tier.order)], None
        answered = backend.start_vm(vm)
        vm_run.start_requested_at = at
        after = answered if isinstance(answered, VmState) else backend.vm_state(vm)
    except Exception as exc:
        return [], f"instance {vm!r} failed to start: {exception_reason(exc)}"
    if after.running:
        vm_run.last_boot = vm_run.attempt_start = now()
        return [TimelineEntry(at, ev.VM_START, vm, f"started (was {state.state})", tier.order)], None
    vm_run.booting = True
    return [TimelineEntry(at, ev.VM_START, vm, f"start requested (was {state.state}, now {after.state})", tier.order)], None


def start_grace(run: BootRun, backend: BootBackend) -> float:
    """How long a VM whose start was asked may still read Stopped before the start counts as failed:
    the backend's `start_grace` (seconds) when it has one, else max(2 polls, START_GRACE_SECONDS),
    since a backend may take a moment to move Stopped -> Starting (CloudStack queues the job)."""
    given = getattr(backend, "start_grace", None)
    if isinstance(given, (int, float)) and not isinstance(given, bool) and given >= 0:
        return float(given)
    return max(2 * run.poll_interval, START_GRACE_SECONDS)


@dataclasses.dataclass
class _Checked:
    entries: list[TimelineEntry] = dataclasses.field(default_factory=list)
    cache: dict[str, CacheEntry] = dataclasses.field(default_factory=dict)
    halt: str | None = None


def _round(run: BootRun, progress: StartProgress, tier: TierRun, backend: BootBackend,
           now: Callable[[], float], step_left: float) -> float | None:
    """One poll (§4.1.5): §4.2 for every open VM (concurrently), then the Instance Group step.

    Where the backend can watch a check (`watch_check`) and every open VM has a thread of its own,
    the checks spend the poll interval they would otherwise sleep watching: from a VM's first
    check, for one poll interval (within its budget and the step's `step_left` s), a check not
    Ready yet keeps trying and answers Ready the moment it is, so detection is not bound to the
    poll grid. Still one evaluation per VM per round, one round per poll interval and what the
    round itself takes. Returns when the next round is due with watching (one poll interval after
    this one began: at once when a VM watched its whole interval), or None without (due one poll
    interval after this one ends)."""
    tier.rounds += 1
    began = now()
    open_vms = [vm_run for vm_run in tier.vms if not vm_run.ready and not vm_run.gave_up]
    watching = callable(getattr(backend, "watch_check", None)) and len(open_vms) <= run.check_concurrency
    states = vm_states(backend, [vm_run.vm for vm_run in open_vms], batch_only=True)
    seen = _RoundView(backend, states, now, window=run.poll_interval if watching else None, step_ends=began + step_left)
    results = _parallel(lambda vm_run: _check_one(run, tier, vm_run, seen, now), open_vms, run.check_concurrency)
    halts = []
    for result in results:
        run.timeline.extend(result.entries)
        run.cache.update(result.cache)
        if result.halt:
            halts.append(result.halt)
    for vm_run in tier.vms:
        if vm_run.ready and run.member(vm_run.member).kind == VIRTUAL_MACHINE and vm_run.member not in tier.ready_members:
            tier.ready_members.append(vm_run.member)
            _note(run, ev.MEMBER_READY, vm_run.member, "Ready", tier.order, now())
    if halts:
        more = f" ({len(halts) - 1} more member(s) failed in this round)" if len(halts) > 1 else ""
        _halt(run, progress, tier, f"{_tier_name(progress, tier)}: {halts[0]}{more}; {NO_ROLLBACK}", now())
        return began + run.poll_interval if watching else None
    for key in tier.members:
        member = run.member(key)
        if member.kind != INSTANCE_GROUP or key in tier.ready_members:
            continue
        halt = _group_step(run, tier, member, now)
        if halt:
            _halt(run, progress, tier, f"{_tier_name(progress, tier)}: {halt}; {NO_ROLLBACK}", now())
            break
    return began + run.poll_interval if watching else None


class _RoundView:
    """The backend as one poll round sees it: the power states of the round's batch read (one
    backend call for the tier, where the backend offers `vm_states`), each VM's checks watched for
    `window` s from its first one (not past `step_ends`, engine clock) where the backend can, every
    other call passed on."""

    def __init__(self, backend: BootBackend, states: dict[str, VmState], now: Callable[[], float] | None = None, *,
                 window: float | None = None, step_ends: float = math.inf) -> None:
        self.backend, self.states, self.now, self.window, self.step_ends = backend, states, now, window, step_ends
        #: When each VM's watching ends (set at its first check; one thread per VM writes its own key).
        self._watch_until: dict[str, float] = {}

    def vm_state(self, vm: str) -> VmState:
        known = self.states.get(vm)
        return known if known is not None else self.backend.vm_state(vm)

    def start_vm(self, vm: str) -> VmState | None:
        return self.backend.start_vm(vm)

    def stop_vm(self, vm: str, forced: bool) -> None:
        self.backend.stop_vm(vm, forced)

    def reboot_vm(self, vm: str) -> None:
        self.states.pop(vm, None)  # read it afresh after the reboot
        self.backend.reboot_vm(vm)

    def expand_group(self, group: GroupRef) -> list[str]:
        return self.backend.expand_group(group)

    def check(self, rule_type: str, vm: str, details: Mapping[str, str], timeout: float) -> CheckResult:
        """The backend's check; watched for what is left of the round's window (at most `timeout`)."""
        watch_check = getattr(self.backend, "watch_check", None)
        if self.window is not None and self.now is not None and callable(watch_check):
            at = self.now()
            until = self._watch_until.setdefault(vm, min(at + self.window, self.step_ends))
            window = min(timeout, until - at)
            if window > 0:
                result: CheckResult = watch_check(rule_type, vm, details, timeout, window)
                return result
        return self.backend.check(rule_type, vm, details, timeout)

    @property
    def start_grace(self) -> Any:
        return getattr(self.backend, "start_grace", None)

    def stopped_detail(self, vm: str) -> str | None:
        """Why an instance the round read as not Running is down (a local process's exit code), where
        the backend can tell (`stopped_detail`); None otherwise, and for one read Running."""
        state, explain = self.states.get(vm), getattr(self.backend, "stopped_detail", None)
        if state is None or state.running or not callable(explain):
            return None
        detail: str | None = explain(vm)
        return detail


def _stop_detail(backend: BootBackend, vm: str) -> str | None:
    explain = getattr(backend, "stopped_detail", None)
    return explain(vm) if callable(explain) else None


def _check_one(run: BootRun, tier: TierRun, vm_run: VmRun, backend: BootBackend, now: Callable[[], float]) -> _Checked:
    """§4.2 for one VM; mutates only its own VmRun (threads share nothing else)."""
    out = _Checked()
    settings = run.settings
    vm = vm_run.vm
    member = run.member(vm_run.member)
    try:
        at = now()
        if vm_run.booting:
            try:
                state = backend.vm_state(vm)
            except Exception as exc:  # e.g. the start job failed after the step that submitted it
                out.halt = f"instance {vm!r} of {member.describe()} failed to start: {exception_reason(exc)}"
                return out
            if state.state in (FAILED, MISSING):
                out.halt = f"instance {vm!r} of {member.describe()} failed to start: it reads {state.state}"
                return out
            if state.state == STOPPED:
                asked = vm_run.start_requested_at if vm_run.start_requested_at is not None else at
                grace = start_grace(run, backend)
                if at - asked >= grace - TOLERANCE:
                    out.halt = (f"instance {vm!r} of {member.describe()} failed to start: it reads Stopped "
                                f"{at - asked:.1f} s after its start was asked (grace {grace:g} s: the start was "
                                "refused or its job failed)")
                return out  # within the grace: the backend may not have moved it to Starting yet
            if not state.running:
                return out  # still booting: no attempt counts
            since = state.last_power_change
            requested = vm_run.start_requested_at or at
            vm_run.booting = False
            vm_run.last_boot = vm_run.attempt_start = since if since is not None and since >= requested else at
            out.entries.append(TimelineEntry(at, ev.VM_BOOTED, vm, "Running", tier.order))
        assert vm_run.last_boot is not None and vm_run.attempt_start is not None
        if at - vm_run.last_boot < settings.initial_delay - TOLERANCE:
            return out  # within the initial delay: skipped, no attempt counted (§4.2.1)
        budget = max(0.0, settings.timeout - (at - vm_run.attempt_start))
        label = f"{vm_run.retries + 1}/{settings.attempts}"
        direct, inherited = vm_rules(member, vm)
        verdict = evaluate_vm(backend, vm, direct + inherited, budget, now, label)
        done = now()
        vm_run.evaluations += 1
        explained = _stop_detail(backend, vm) if verdict.status != READY else None
        vm_run.status, vm_run.message = verdict.status, verdict.message + (f": {explained}" if explained else "")
        for rule_id, result in verdict.results.items():
            out.cache[cache_key(rule_id, vm)] = CacheEntry(result.status, result.message, done)
        out.entries.append(TimelineEntry(at, ev.CHECK, vm, f"{verdict.status} (budget {budget:.1f} s): {vm_run.message}", tier.order))
        if verdict.status == READY:
            vm_run.ready = True
            return out
        if vm_run.retries < settings.max_retries:
            if settings.reboot_on_retry:
                backend.reboot_vm(vm)
                vm_run.reboots += 1
                vm_run.last_boot = now()
                out.entries.append(TimelineEntry(vm_run.last_boot, ev.REBOOT_VM, vm, "rebooted before the next attempt; "
                                                 "the initial delay applies again", tier.order))
            vm_run.retries += 1
            vm_run.attempt_start = now()
            out.entries.append(TimelineEntry(vm_run.attempt_start, ev.RETRY, vm,
                                             f"attempt {vm_run.retries + 1}/{settings.attempts} next", tier.order))
            return out
        vm_run.gave_up = True
        out.entries.append(TimelineEntry(done, ev.GAVE_UP, vm, f"not Ready after {settings.attempts} attempt(s)", tier.order))
        if member.kind == VIRTUAL_MACHINE:
            out.halt = f"{member.describe()} is not Ready after {settings.attempts} attempt(s): {vm_run.message}"
    except Exception as exc:  # a failed reboot or a failed evaluation halts (§4.2.6)
        out.halt = f"instance {vm!r} of {member.describe()}: the readiness evaluation failed: {exception_reason(exc)}"
    return out


def _group_step(run: BootRun, tier: TierRun, member: MemberSpec, now: Callable[[], float]) -> str | None:
    """§4.1.6 for one Instance Group member; a halt reason, or None."""
    vms = [vm_run for vm_run in tier.vms if vm_run.member == member.key]
    if vms and all(not v.ready and not v.gave_up for v in vms):
        return None  # none is ready or gave up yet
    inherited = member.inherited_rules()
    children = [ChildView(v.vm, READY if v.ready else v.status, v.gave_up,
                          {rule.id: cached(run.cache, rule.id, v.vm).status for rule in inherited}) for v in vms]
    verdict = evaluate_group(member, children)
    at = now()
    for rule_id, result in verdict.results.items():
        run.cache[cache_key(rule_id, GROUP_SCOPE)] = CacheEntry(result.status, result.message, at)
    _note(run, ev.GROUP_CHECK, member.key, f"{verdict.status}: {verdict.message}", tier.order, at)
    if verdict.status == READY:
        tier.ready_members.append(member.key)
        _note(run, ev.MEMBER_READY, member.key, "Ready", tier.order, at)
        return None
    if verdict.status == ERROR or all(v.ready or v.gave_up for v in vms):
        reason = f"{member.describe()} is {verdict.status}: {verdict.message}"
        failed = next((v for v in vms if v.gave_up), None)
        if failed is not None:
            reason += f"; instance {failed.vm!r} gave up: {failed.message}"
        return reason
    return None


def _deadline_reason(run: BootRun, progress: StartProgress, tier: TierRun) -> str:
    settings = run.settings
    waiting = [key for key in tier.members if key not in tier.ready_members]
    details = []
    for key in waiting:
        vm_runs = [v for v in tier.vms if v.member == key and not v.ready]
        worst = vm_runs[0] if vm_runs else None
        seen = (f"instance {worst.vm!r} after {worst.evaluations} attempt(s): {worst.message or 'not checked yet'}"
                if worst else "no instance")
        details.append(f"{run.member(key).describe()} ({seen})")
    return (f"{_tier_name(progress, tier)} was not ready within its deadline of {run.deadline:,.1f} s "
            f"(initialDelay {settings.initial_delay:g} + {settings.attempts}×timeout {settings.timeout:g} + "
            f"{settings.max_retries}×poll {run.poll_interval:g}); not Ready: {'; '.join(details)}; {NO_ROLLBACK}")


def _halt(run: BootRun, progress: StartProgress, tier: TierRun, reason: str, at: float) -> None:
    """§4.3: the start fails with `reason`; no VM is stopped; later tiers are skipped."""
    progress.halted = reason
    tier.status, tier.ended = HALTED, at
    for later in progress.tiers[progress.tiers.index(tier) + 1:]:
        later.status = SKIPPED
    _note(run, ev.HALT, "", reason, tier.order, at)


def _note(run: BootRun, kind: str, subject: str, message: str, order: int | None, at: float) -> None:
    run.timeline.append(TimelineEntry(at, kind, subject, message, order))


# --- stop ----------------------------------------------------------------------------------------


def _advance_stop(run: BootRun, backend: BootBackend, budget: Budget, lock: threading.Lock) -> float | None:
    """Stop tiers in descending order (CONTINUE past failures); None once every tier ran."""
    if run.stop is None:
        orders: dict[str, int] = {}
        for member in run.members:
            if member.kind == VIRTUAL_MACHINE:
                orders.setdefault(member.key, member.order)
                continue
            assert member.group is not None
            try:
                for vm in backend.expand_group(member.group):
                    orders.setdefault(vm, member.order)
            except Exception as exc:  # reported; the other members are still stopped
                run.stop_failures.append(f"could not list the instances of {member.describe()}: {exception_reason(exc)}")
        run.stop = plan(orders, descending=True, policy=CONTINUE)
    progress = run.stop
    order_of = {item: tier.order for tier in progress.tiers for item in tier.items}

    def note(kind: str, vm: str, message: str) -> None:
        with lock:
            _note(run, kind, vm, message, order_of.get(vm), budget.now())

    def stop_one(vm: str, item: ItemRun) -> Any:
        if "stop" not in item.memory.memo:
            state = backend.vm_state(vm)
            if state.state == MISSING:
                raise Failure(f"instance {vm!r} does not exist")
            if state.state == STOPPED:
                note(ev.VM_STOP_SKIP, vm, "already Stopped: skipped")
                return "skipped"
        item.once("stop", lambda: _request_stop(backend, vm, run.forced, note))
        item.wait_until(lambda: backend.vm_state(vm).state == STOPPED, every=run.poll_interval, name=f"{vm} Stopped")
        note(ev.VM_STOPPED, vm, "Stopped")
        return "stopped"

    try:
        outcome = run_tiers(progress, {vm: vm for vm in progress.items}, stop_one, budget,
                            concurrency=run.check_concurrency, tier_timeout=stop_tier_timeout(run.settings))
    except NotYet as waiting:
        return waiting.delay
    for failure in outcome.failures:
        run.stop_failures.append(f"instance {failure.item!r} (order {failure.order}): {failure.reason}")
        note(ev.VM_STOP_FAILED, failure.item, failure.reason)
    return None


def _request_stop(backend: BootBackend, vm: str, forced: bool, note: Callable[[str, str, str], None]) -> bool:
    backend.stop_vm(vm, forced)
    note(ev.VM_STOP, vm, "stop requested" + (" (forced)" if forced else ""))
    return True


def _after_stop(run: BootRun, at: float) -> None:
    """The stop ended: a stop run finishes; a reboot goes on with the start."""
    if run.operation == REBOOT:
        run.phase = START
        run.start = _start_plan(run.members)
        return
    _finish(run, at)


def _finish(run: BootRun, at: float) -> None:
    start_reason = run.start.halted if run.start is not None else None
    stop_reason = None
    if run.stop_failures:
        total = len(run.stop.items) if run.stop is not None else 0
        stop_reason = (f"the stop went on through every tier, but {len(run.stop_failures)} of {total} instance(s) "
                       f"failed to stop: {'; '.join(run.stop_failures)} (a stop tier waits at most "
                       f"ReadinessTimeoutSeconds, {stop_tier_timeout(run.settings):g} s, for its instances to read Stopped)")
    reasons = [reason for reason in (stop_reason, start_reason) if reason]
    run.ok = not reasons
    run.reason = "; then ".join(reasons) if reasons else None
    run.finished, run.ended, run.phase = True, at, "done"
    kind = {START: ev.START, STOP: ev.STOP, REBOOT: ev.REBOOT}[run.operation]
    message = run.reason or _success_message(run)
    run.events.append(Event(kind, at, message, ok=run.ok, subject=run.group))
    _note(run, ev.DONE, "", ("done: " if run.ok else "failed: ") + message, None, at)


def _success_message(run: BootRun) -> str:
    took = f"in {(run.ended or run.began) - run.began:,.1f} s"
    if run.operation == STOP:
        return f"{len(run.stop.items) if run.stop else 0} instance(s) Stopped or already Stopped, {took}"
    tiers = run.start.tiers if run.start else []
    return f"{len(tiers)} tier(s) ready ({', '.join(f'order {t.order}' for t in tiers)}), {took}"


# --- reporting -----------------------------------------------------------------------------------


def member_readiness(run: BootRun) -> dict[str, str]:
    """Each member's readiness as this run left it (Ready, NotReady, Error, Unknown): compact enough
    for the resource's Data."""
    out: dict[str, str] = {member.key: UNKNOWN for member in run.members}
    if run.start is None:
        return out
    for tier in run.start.tiers:
        for key in tier.members:
            if key in tier.ready_members:
                out[key] = READY
                continue
            vm_runs = [v for v in tier.vms if v.member == key]
            if not vm_runs:
                continue
            statuses = [v.status if not v.gave_up else ERROR for v in vm_runs]
            out[key] = ERROR if ERROR in statuses else UNKNOWN if all(s == UNKNOWN for s in statuses) else "NotReady"
    return out


def power_changes(run: BootRun) -> dict[str, float]:
    """Each VM's last boot as this start saw it: what the provider keeps to tell a later restart
    outside the boot group (readiness.restarted_outside) from its own."""
    if run.start is None:
        return {}
    return {v.vm: v.last_boot for tier in run.start.tiers for v in tier.vms if v.last_boot is not None}


def tier_summary(run: BootRun) -> list[dict[str, Any]]:
    """The tiers in start order with their status (Data and `show`)."""
    if run.start is not None:
        return [{"Order": t.order, "Members": list(t.members), "Status": t.status} for t in run.start.tiers]
    return [{"Order": order, "Members": [m.key for m in group], "Status": PENDING} for order, group in tiers_of(run.members)]


# --- concurrency ---------------------------------------------------------------------------------


def _parallel(call: Callable[[T], R], items: Sequence[T], limit: int) -> list[R]:
    """`call` on every item, at most `limit` at once; results in item order."""
    if len(items) <= 1 or limit == 1:
        return [call(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor  # only parallel tiers pay for it

    with ThreadPoolExecutor(max_workers=min(limit, len(items)), thread_name_prefix="crhelper-bootgroup") as pool:
        futures = [pool.submit(contextvars.copy_context().run, call, item) for item in items]
    return [future.result() for future in futures]
