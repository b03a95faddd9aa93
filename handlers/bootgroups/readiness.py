"""Readiness (spec §2.3-§2.5): one VM's evaluation under the attempt's shared budget, the result
cache keyed (rule, vm), and an Instance Group's aggregate and quorum read from that cache.

`evaluate_vm` calls the backend's checks; everything else here is pure.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, MutableMapping, Sequence

from .backends import BootBackend, CheckResult, VmState
from .model import (
    COUNT, ERROR, INHERITED_TYPES, INSTANCE_GROUP, NOT_READY, PERCENTAGE, READY, THRESHOLD_TYPE,
    THRESHOLD_VALUE, UNKNOWN, MemberSpec, RuleSpec,
)

#: Group-level results (an Instance Group's own rules) are cached under this VM key.
GROUP_SCOPE = "0"
NOT_REVERIFIED = "the instance was restarted outside the boot group; not yet re-verified"


@dataclasses.dataclass
class CacheEntry:
    """The last result of one rule on one VM; there is no history (§2.3)."""

    status: str
    message: str = ""
    at: float = 0.0


#: The cache as it is stored: cache_key(rule, vm) -> CacheEntry.
Cache = MutableMapping[str, CacheEntry]


def cache_key(rule_id: str, vm: str) -> str:
    return f"{rule_id}@{vm}"


def cached(cache: Mapping[str, CacheEntry], rule_id: str, vm: str) -> CacheEntry:
    """The cached result, Unknown when there is none."""
    return cache.get(cache_key(rule_id, vm)) or CacheEntry(UNKNOWN, "not checked yet")


def combine(statuses: Sequence[str]) -> str:
    """§2.4.4: any Error ⇒ Error; else any non-Ready (Unknown included) ⇒ NotReady; else Ready."""
    if ERROR in statuses:
        return ERROR
    return READY if all(status == READY for status in statuses) else NOT_READY


@dataclasses.dataclass
class VmVerdict:
    """One evaluation of one VM: its status, a message naming the first rule that was not Ready and
    what it saw, and each rule's result (to cache)."""

    status: str
    message: str
    results: dict[str, CheckResult] = dataclasses.field(default_factory=dict)


def vm_rules(member: MemberSpec, vm: str) -> tuple[list[RuleSpec], list[RuleSpec]]:
    """(direct, inherited) enabled rules of `vm` as a member or inside a group member (§2.2)."""
    inherited = member.inherited_rules() if member.kind == INSTANCE_GROUP else []
    return member.direct_rules_of(vm), inherited


def evaluate_vm(backend: BootBackend, vm: str, rules: Sequence[RuleSpec], budget: float,
                now: Callable[[], float], label: str | None = None) -> VmVerdict:
    """§2.4: not Running ⇒ NotReady (no rule runs); no rules ⇒ Ready; else every rule, direct ones
    first, one after another, each given what the earlier ones left of `budget`. `label` (`k/N`)
    ends each message written during a start."""
    suffix = f" (attempt {label})" if label else ""
    state = backend.vm_state(vm)
    if not state.running:
        return VmVerdict(NOT_READY, f"instance {vm!r} is {state.state}, not Running{suffix}")
    if not rules:
        return VmVerdict(READY, f"instance {vm!r} is Running (no readiness rules){suffix}")
    began = now()
    results: dict[str, CheckResult] = {}
    for rule in rules:
        left = max(0.0, budget - (now() - began))
        if rule.type not in INHERITED_TYPES:  # MemberQuorum is the group's; a type without a checker is Error
            result = CheckResult(ERROR, f"no checker for rule type {rule.type} on an instance")
        else:
            result = backend.check(rule.type, vm, rule.details, left)
        results[rule.id] = CheckResult(result.status, f"{result.message}{suffix}")
    status = combine([r.status for r in results.values()])
    first = next((rule for rule in rules if results[rule.id].status != READY), None)
    if first is None:
        message = f"instance {vm!r}: {len(rules)} rule(s) Ready{suffix}"
    else:
        message = f"{first.describe()}: {results[first.id].status}: {results[first.id].message}"
    return VmVerdict(status, message, results)


def record(cache: Cache, vm: str, verdict: VmVerdict, at: float) -> None:
    """Write each rule's result under (rule, vm)."""
    for rule_id, result in verdict.results.items():
        cache[cache_key(rule_id, vm)] = CacheEntry(result.status, result.message, at)


def reset_after_outside_restart(cache: Cache, vm: str, at: float) -> int:
    """A VM went Starting→Running outside the boot group: its results read Unknown (§2.3). Returns
    how many entries were reset."""
    ending = f"@{vm}"
    keys = [key for key in cache if key.endswith(ending)]
    for key in keys:
        cache[key] = CacheEntry(UNKNOWN, NOT_REVERIFIED, at)
    return len(keys)


def restarted_outside(known_boots: Mapping[str, float], states: Mapping[str, VmState]) -> list[str]:
    """The VMs Running since a power change later than the boot the group last saw (§2.3: their
    results must be reset to Unknown)."""
    return [vm for vm, state in states.items() if state.running and state.last_power_change is not None
            and vm in known_boots and state.last_power_change > known_boots[vm]]


def cache_as_read(cache: Mapping[str, CacheEntry], known_boots: Mapping[str, float], states: Mapping[str, VmState],
                  at: float) -> dict[str, CacheEntry]:
    """The cache as it reads now (a copy: a read writes nothing): the entries of VMs restarted outside
    the group since the boot it last saw read Unknown, not yet re-verified (§2.3)."""
    view = dict(cache)
    for vm in restarted_outside(known_boots, states):
        reset_after_outside_restart(view, vm, at)
    return view


def prune_cache(cache: Mapping[str, CacheEntry], members: Sequence[MemberSpec]) -> dict[str, CacheEntry]:
    """The entries the plan still has a use for (Update, B11): those of rules still in it, and for a
    member whose instances are known (itself, a listed group) only on those instances or the group
    scope. A rule or instance added back later then starts Unknown, not with an old result."""
    wanted: dict[str, set[str] | None] = {}  # rule id -> the VMs it may be cached on (None: any)
    for member in members:
        listed = member.group.instances if member.group is not None else [member.key]
        scope = None if listed is None else {*listed, GROUP_SCOPE}
        for rule in [*member.rules, *(rule for rules in member.instance_rules.values() for rule in rules)]:
            wanted[rule.id] = scope
    kept = {}
    for key, entry in cache.items():
        rule_id, _, vm = key.rpartition("@")
        scope = wanted.get(rule_id, set())
        if rule_id in wanted and (scope is None or vm in scope):
            kept[key] = entry
    return kept


def cached_vm_status(cache: Mapping[str, CacheEntry], vm: str, rules: Sequence[RuleSpec], *,
                     running: bool, ignore_instance_state: bool = False) -> tuple[str, str]:
    """A VM's readiness from the cache (no check runs): a VM that is not Running reads NotReady
    unless `ignore_instance_state`; no rules ⇒ its power state; else the rules' cached results
    combined (Error, else NotReady, else Unknown if any, else Ready)."""
    if not running and not ignore_instance_state:
        return NOT_READY, f"instance {vm!r} is not Running"
    if not rules:
        return (READY, "Running (no readiness rules)") if running else (NOT_READY, "not Running (no readiness rules)")
    entries = [(rule, cached(cache, rule.id, vm)) for rule in rules]
    statuses = [entry.status for _, entry in entries]
    status = ERROR if ERROR in statuses else NOT_READY if NOT_READY in statuses else UNKNOWN if UNKNOWN in statuses else READY
    worst = next(((rule, entry) for rule, entry in entries if entry.status == status), None)
    message = f"{worst[0].describe()}: {worst[1].message}" if worst and status != READY else f"{len(rules)} rule(s) Ready"
    return status, message


# --- Instance Group aggregation (§2.5) ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChildView:
    """One VM of a group member as the group step sees it: its readiness (from the cache or this
    start's progress), whether it used up its retries, and its inherited rules' cached statuses."""

    vm: str
    status: str
    gave_up: bool = False
    rule_status: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class GroupVerdict:
    status: str
    message: str
    #: The group's own rules' results (cached under GROUP_SCOPE).
    results: dict[str, CheckResult] = dataclasses.field(default_factory=dict)


def quorum(threshold_type: str, threshold_value: str, *, total: int, ready: int, failed: int) -> CheckResult:
    """§2.5: met ⇒ Ready; not met and no longer achievable (`total − failed` short of it) ⇒ Error;
    else NotReady; no VMs ⇒ NotReady; an unparseable value ⇒ Error."""
    if total == 0:
        return CheckResult(NOT_READY, "the instance group has no instances")
    kind = (threshold_type or "").strip().upper()
    achievable = total - failed
    try:
        if kind == PERCENTAGE:
            wanted = float(threshold_value)
            if wanted != wanted or wanted in (float("inf"), float("-inf")):
                raise ValueError(threshold_value)
            met, reachable = ready * 100 / total >= wanted, achievable * 100 / total >= wanted
            need = f"{wanted:g} %"
        elif kind == COUNT:
            count = int(str(threshold_value).strip())
            met, reachable = ready >= count, achievable >= count
            need = f"{count} Ready"
        else:
            raise ValueError(threshold_type)
    except (TypeError, ValueError):
        return CheckResult(ERROR, f"invalid threshold configuration: {threshold_type}={threshold_value}")
    seen = f"{ready}/{total} instances Ready ({kind} threshold {threshold_value}, needs {need})"
    if met:
        return CheckResult(READY, seen)
    if not reachable:
        return CheckResult(ERROR, f"{seen}; no longer achievable: {failed}/{total} gave up, "
                                  f"at most {achievable}/{total} can still be Ready")
    return CheckResult(NOT_READY, seen)


def evaluate_group(member: MemberSpec, children: Sequence[ChildView]) -> GroupVerdict:
    """An Instance Group member's readiness from its children's readiness (no check runs).

    With an enabled MemberQuorum, its verdict alone decides (the other rules' aggregates are still
    computed, for information). Without one, every child must be Ready (a child that gave up counts
    as Error, one still retrying as NotReady) and each inherited rule's aggregate over the children
    must be Ready (an Error there counts only from a child that gave up: a child mid-retry is never
    an Error, as the PR's own comment says). Empty group ⇒ NotReady."""
    results: dict[str, CheckResult] = {}
    quorum_rule = member.quorum_rule()
    failed = sum(1 for child in children if child.gave_up)
    ready = sum(1 for child in children if child.status == READY)
    for rule in member.inherited_rules():
        results[rule.id] = _aggregate_rule(rule, children)
    if quorum_rule is not None:
        verdict = quorum(quorum_rule.details.get(THRESHOLD_TYPE, ""), quorum_rule.details.get(THRESHOLD_VALUE, ""),
                         total=len(children), ready=ready, failed=failed)
        results[quorum_rule.id] = verdict
        return GroupVerdict(verdict.status, f"{quorum_rule.describe()}: {verdict.message}", results)
    if not children:
        return GroupVerdict(NOT_READY, "the instance group has no instances", results)
    statuses: list[str] = []
    for child in children:
        if child.status != READY:
            statuses.append(ERROR if child.gave_up else NOT_READY)
    statuses.extend(result.status for result in results.values())
    status = combine(statuses) if statuses else READY
    failing = [child.vm for child in children if child.gave_up]
    waiting = [child.vm for child in children if child.status != READY and not child.gave_up]
    message = f"{ready}/{len(children)} instances Ready"
    if failing:
        message += f"; gave up: {', '.join(failing)}"
    if waiting:
        message += f"; not Ready yet: {', '.join(waiting)}"
    bad_rules = [f"{rule.describe()}: {results[rule.id].message}" for rule in member.inherited_rules()
                 if results[rule.id].status != READY]
    if bad_rules and status != READY:
        message += "; " + "; ".join(bad_rules)
    return GroupVerdict(status, message, results)


def _aggregate_rule(rule: RuleSpec, children: Sequence[ChildView]) -> CheckResult:
    if not children:
        return CheckResult(NOT_READY, "the instance group has no instances")
    statuses = [child.rule_status.get(rule.id, UNKNOWN) for child in children]
    ready = statuses.count(READY)
    error = any(status == ERROR and child.gave_up for status, child in zip(statuses, children))
    message = f"{ready} of {len(children)} instance(s) Ready by {rule.type}"
    if error:
        return CheckResult(ERROR, message)
    return CheckResult(READY if ready == len(children) else NOT_READY, message)


def group_children(member: MemberSpec, vms: Sequence[str], cache: Mapping[str, CacheEntry],
                   running: Mapping[str, bool], *, ignore_instance_state: bool = False) -> list[ChildView]:
    """The children of a group member as the cache has them (for show and Data, outside a start)."""
    children = []
    for vm in vms:
        direct, inherited = vm_rules(member, vm)
        status, _ = cached_vm_status(cache, vm, direct + inherited, running=running.get(vm, False),
                                     ignore_instance_state=ignore_instance_state)
        children.append(ChildView(vm, status, False, {rule.id: cached(cache, rule.id, vm).status for rule in inherited}))
    return children


def member_status(member: MemberSpec, vms: Sequence[str], cache: Mapping[str, CacheEntry],
                  running: Mapping[str, bool], *, ignore_instance_state: bool = False) -> tuple[str, str]:
    """A member's readiness from the cache: a VM member's cached status, or its group's aggregate."""
    if member.kind != INSTANCE_GROUP:
        direct, _ = vm_rules(member, member.key)
        return cached_vm_status(cache, member.key, direct, running=running.get(member.key, False),
                                ignore_instance_state=ignore_instance_state)
    verdict = evaluate_group(member, group_children(member, vms, cache, running, ignore_instance_state=ignore_instance_state))
    return verdict.status, verdict.message

