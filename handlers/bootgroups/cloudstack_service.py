"""The Instance Boot Group API (boot-groups.md §7) on the local CloudStack endpoint, so a
CloudStack user's script (`cs`, Marvin-style) drives boot groups against `LocalCloudStack`.

Registered in the entry-point group `crhelper.local.cloudstack` (`extension`): the endpoint loads
it when it starts and serves its fifteen commands beside the VM ones, signed and wrapped alike.
The boot groups, members and rules live in memory beside the endpoint's VMs (as its state does).

Every rule is the provider's: each change builds the whole group as template properties and runs
`validation.check_group` with a `Context` read from the endpoint (other groups' claims, instance
groups' VMs, hypervisors, ineligible VMs, names taken), so the API and `Custom::InstanceBootGroup`
refuse the same things; a problem is a 431 naming the API parameter (`order`, `details.port`...).
Start, stop and reboot are async jobs (`CloudStackState.run_job`) running `engine.advance` on the
group's plan with `cloudstack_inprocess.EndpointBackend`: jobstatus 1 with `instancebootgroup`, or
2 with 530 and the engine's reason (member, rule, attempt). A second operation on a busy group,
or deleting it, is a 530. Readiness in listings comes from the result cache (no check runs); a VM
restarted outside the group reads Unknown there (§2.3).

Choices where §7 says nothing: a member's `memberstate` is its VM's state, or for an instance
group its VMs' common state (`Mixed` when they differ, `Empty` without VMs); `readinessmode` is
`None` (a VM without rules), `RuleBased` (enabled rules of its own) or `ChildDependent` (an
instance group without rules of its own). Reorder shifts the members between the old and new
positions by one (§9 #2); add allows ties.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from crhelper.local.cloudstack_api import (
    CloudStackExtension, Command, Parameters, boolean_parameter, page_of, required_parameter, whole_parameter)
from crhelper.local.cloudstack_state import (
    CS_CLOUD_RUNTIME, INTERNAL_ERROR, ApiError, cs_date, invalid_parameter, unknown_entity)
from crhelper.logs import get_logger
from crhelper.operations.budget import Budget, Memory

from . import engine, events as ev
from .cloudstack_inprocess import EndpointBackend
from .model import (
    INHERITED_TYPES, INSTANCE_GROUP, THRESHOLD_TYPE, THRESHOLD_VALUE, VIRTUAL_MACHINE, GroupRef,
    InstanceBootGroupProps, InstanceGroupProps, MemberProps, MemberSpec, ReadinessRuleProps, RuleSpec, SettingsProps)
from .readiness import (
    CacheEntry, cached_vm_status, member_status, reset_after_outside_restart, restarted_outside, vm_rules)
from .settings import GlobalSettings, effective
from .validation import Context, Problem, check_group, group_item, instance_item

if TYPE_CHECKING:
    from crhelper.local.cloudstack_server import LocalCloudStack

_log = get_logger("bootgroups.cloudstack_api")
T = TypeVar("T")

GROUP_KEY, MEMBER_KEY, RULE_KEY = "instancebootgroup", "instancebootgroupmember", "instancebootgroupreadinessrule"
#: `jobinstancetype` of the group's jobs, and the package of its command classes.
JOB_INSTANCE_TYPE = "InstanceBootGroup"
_CMD_PACKAGE = "org.apache.cloudstack.api.command.user.bootgroup"
#: The API's override parameters -> the template's Settings names (§3).
OVERRIDES = {"readinessattempttimeoutseconds": "ReadinessTimeoutSeconds",
             "readinessmaxretryattempts": "MaxRetryAttempts",
             "readinessinitialdelayseconds": "InitialDelaySeconds"}
REBOOT_ON_RETRY = "readinessrebootonretry"
#: How long `close` waits for running jobs to end (each ends at its next pause).
CLOSE_WAIT_SECONDS = 5.0
MEMBER_DETAILS = ("all", "readiness", "children")
_SNAKE_KEYS = {"threshold_type": THRESHOLD_TYPE, "threshold_value": THRESHOLD_VALUE}
_MAP_ENTRY = re.compile(r"^details\[(\d+)\]\.(.+)$")
#: A problem's property path (validation) -> the API parameter it came from.
_PARAMETER_OF = {"BootOrder": "order", "Instance": "virtualmachineid", "InstanceGroup": "instancegroupid",
                 "Type": "ruletype", "Name": "name", "Description": "description", "Enabled": "enabled"}
_SETTING_PARAMETER = {setting: parameter for parameter, setting in OVERRIDES.items()} | {"RebootOnRetry": REBOOT_ON_RETRY}


@dataclasses.dataclass
class BootGroup:
    id: str
    name: str
    description: str
    created: float
    overrides: SettingsProps
    #: The result cache, (rule uuid, vm) -> the last result (§2.3).
    cache: dict[str, CacheEntry] = dataclasses.field(default_factory=dict)
    #: vm -> its last boot the group saw (to tell a restart outside the group).
    boots: dict[str, float] = dataclasses.field(default_factory=dict)
    #: The start/stop/reboot job running now.
    job: str | None = None


@dataclasses.dataclass
class Member:
    id: str
    group: str
    kind: str
    item: str
    order: int
    created: float


@dataclasses.dataclass
class Rule:
    id: str
    group: str
    name: str
    type: str
    item_type: str
    item: str
    enabled: bool
    details: dict[str, str]
    created: float


@dataclasses.dataclass
class _Plan:
    problems: list[Problem]
    members: list[MemberSpec]
    rules: dict[str, RuleSpec]


class _JobClock:
    """The engine's clock in a job: the endpoint's time; a sleep ends the job when the endpoint stops."""

    def __init__(self, now: Callable[[], float], closing: threading.Event) -> None:
        self.now, self._closing = now, closing

    def sleep(self, seconds: float) -> None:
        if self._closing.wait(max(0.0, seconds)):
            raise ApiError(INTERNAL_ERROR, "the endpoint stopped while the job ran", CS_CLOUD_RUNTIME)

    def defer(self, seconds: float) -> float:
        return seconds


def _parameter(path: str) -> str:
    """`Members[2].ReadinessRules[0].Details.port` -> `details.port`; `Settings.MaxRetryAttempts`
    -> `readinessmaxretryattempts`."""
    path = re.sub(r"^Members\[\d+\]\.?", "", path)
    path = re.sub(r"^(ReadinessRules|InstanceRules\.[^\[]*)\[\d+\]\.?", "", path)
    head, _, rest = path.partition(".")
    if head == "Settings":
        return _SETTING_PARAMETER.get(rest, rest.lower())
    if head == "Details":
        return f"details.{rest}"
    return _PARAMETER_OF.get(head, head.lower() or "id")


def _refused(problems: list[Problem]) -> ApiError:
    return invalid_parameter("; ".join(f"{_parameter(problem.path)}: {problem.rule}" for problem in problems))


def _details_map(params: Parameters) -> dict[str, str]:
    """A `details` map as `cs` sends it (`details[0].port=5432`) or as `key`/`value` pairs
    (`details[0].key=port&details[0].value=5432`)."""
    entries: dict[int, dict[str, str]] = {}
    for name, value in params.items():
        found = _MAP_ENTRY.match(name)
        if found:
            entries.setdefault(int(found.group(1)), {})[found.group(2)] = value
    out: dict[str, str] = {}
    for _index, entry in sorted(entries.items()):
        if set(entry) == {"key", "value"}:
            out[entry["key"]] = entry["value"]
        else:
            out.update(entry)
    return out


def _canonical_key(key: str) -> str:
    low = key.strip().lower()
    return _SNAKE_KEYS.get(low, low)


class BootGroupService:
    """The boot groups of one endpoint and the commands over them; thread-safe (one lock)."""

    def __init__(self, cloud: "LocalCloudStack", settings: GlobalSettings | None = None) -> None:
        self.cloud = cloud
        self.state = cloud.state
        self.settings = settings or GlobalSettings.from_env()
        self.backend = EndpointBackend(cloud)
        self.groups: dict[str, BootGroup] = {}
        self.members: dict[str, Member] = {}
        self.rules: dict[str, Rule] = {}
        #: The INSTANCE.BOOT.GROUP.* events so far (§6), oldest first.
        self.events: list[ev.Event] = []
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._clock = _JobClock(self.state.clock, self._closing)

    def extension(self) -> CloudStackExtension:
        commands: dict[str, Command] = {
            "createInstanceBootGroup": self.create_group, "updateInstanceBootGroup": self.update_group,
            "deleteInstanceBootGroup": self.delete_group, "listInstanceBootGroups": self.list_groups,
            "addMemberToInstanceBootGroup": self.add_member, "updateInstanceBootGroupMember": self.update_member,
            "removeInstanceBootGroupMember": self.remove_member, "listInstanceBootGroupMembers": self.list_members,
            "startInstanceBootGroup": lambda params: self._operate(engine.START, params, "startInstanceBootGroup"),
            "stopInstanceBootGroup": lambda params: self._operate(engine.STOP, params, "stopInstanceBootGroup"),
            "rebootInstanceBootGroup": lambda params: self._operate(engine.REBOOT, params, "rebootInstanceBootGroup"),
            "createInstanceBootGroupReadinessRule": self.create_rule,
            "updateInstanceBootGroupReadinessRule": self.update_rule,
            "deleteInstanceBootGroupReadinessRule": self.delete_rule,
            "listInstanceBootGroupReadinessRules": self.list_rules,
        }
        return CloudStackExtension("bootgroups", commands, close=self.close)

    def close(self) -> None:
        """The endpoint stops: running jobs fail at their next pause; wait (a bounded while) for
        them to end, so none starts a VM's guest after the endpoint killed them all."""
        self._closing.set()
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        while time.monotonic() < deadline:
            with self._lock:
                if all(group.job is None for group in self.groups.values()):
                    return
            time.sleep(0.01)
        _log.warning("boot-group jobs still running %g s after the endpoint stopped", CLOSE_WAIT_SECONDS)

    # ------------------------------------------------------------------------------ groups
    def create_group(self, params: Parameters) -> dict[str, Any]:
        command = "createInstanceBootGroup"
        name = required_parameter(params, "name", command)
        self._own_account(params)
        overrides = SettingsProps()
        self._apply_overrides(overrides, params)
        with self._lock:
            group = BootGroup(str(uuid.uuid4()), name, params.get("description", ""), self.state.clock(), overrides)
            plan = self._plan(group, [], [])
            if plan.problems:
                raise _refused(plan.problems)
            self.groups[group.id] = group
            self._note(ev.CREATE, group, f"boot group {name!r}")
            return {GROUP_KEY: self._describe_group(group)}

    def update_group(self, params: Parameters) -> dict[str, Any]:
        command = "updateInstanceBootGroup"
        with self._lock:
            group = self._group(params, "id", command)
            changed = dataclasses.replace(group, name=params.get("name") or group.name,
                                          description=params.get("description", group.description),
                                          overrides=group.overrides.model_copy())
            self._apply_overrides(changed.overrides, params)
            plan = self._plan(changed, self._members_of(group), self._rules_of(group))
            if plan.problems:
                raise _refused(plan.problems)
            group.name, group.description, group.overrides = changed.name, changed.description, changed.overrides
            self._note(ev.UPDATE, group, f"boot group {group.name!r}")
            return {GROUP_KEY: self._describe_group(group)}

    def delete_group(self, params: Parameters) -> dict[str, Any]:
        with self._lock:
            group = self._group(params, "id", "deleteInstanceBootGroup")
            self._refuse_busy(group, "delete")
            members, rules = self._members_of(group), self._rules_of(group)
            for member in members:
                del self.members[member.id]
            for rule in rules:
                del self.rules[rule.id]
            del self.groups[group.id]
            self._note(ev.DELETE, group, f"boot group {group.name!r} with {len(members)} member(s) and "
                                         f"{len(rules)} rule(s); its VMs and instance groups are untouched")
            return {"success": True}

    def list_groups(self, params: Parameters) -> dict[str, Any]:
        with self._lock:
            if params.get("id"):
                self._group(params, "id", "listInstanceBootGroups")
            keyword = params.get("keyword", "").lower()
            found = [self._describe_group(group) for group in self.groups.values()
                     if (not params.get("id") or group.id == params["id"])
                     and (not params.get("name") or group.name == params["name"])
                     and (not keyword or keyword in group.name.lower() or keyword in group.description.lower())]
        return page_of(found, params, GROUP_KEY)

    # ----------------------------------------------------------------------------- members
    def add_member(self, params: Parameters) -> dict[str, Any]:
        command = "addMemberToInstanceBootGroup"
        with self._lock:
            group, (kind, item) = self._group(params, "id", command), self._item(params, command)
            order = self._order(params, command)
            members = self._members_of(group)
            if len(members) >= self.settings.max_members:
                raise invalid_parameter(
                    f"id: boot group {group.name!r} already holds {len(members)} members, the most it may hold "
                    f"(instance.boot.group.max.members {self.settings.max_members}; an instance group counts as one)")
            member = Member(str(uuid.uuid4()), group.id, kind, item, order, self.state.clock())
            plan = self._plan(group, members + [member], self._rules_of(group))
            if plan.problems:
                raise _refused(plan.problems)
            self.members[member.id] = member
            self._note(ev.MEMBER_ADD, group, f"{kind} {item} at order {order}")
            return {MEMBER_KEY: self._describe_member(member, plan, set(), False)}

    def update_member(self, params: Parameters) -> dict[str, Any]:
        """A new order; the members between the old and the new position move by one (§9 #2)."""
        command = "updateInstanceBootGroupMember"
        with self._lock:
            member = self._member(params, command)
            order = self._order(params, command)
            old = member.order
            for other in self._members_of(self.groups[member.group]):
                if other.id == member.id:
                    continue
                if order < old and order <= other.order < old:
                    other.order += 1
                elif order > old and old < other.order <= order:
                    other.order -= 1
            member.order = order
            group = self.groups[member.group]
            self._note(ev.MEMBER_REORDER, group, f"{member.kind} {member.item}: order {old} -> {order}")
            return {MEMBER_KEY: self._describe_member(member, self._plan(group), set(), False)}

    def remove_member(self, params: Parameters) -> dict[str, Any]:
        """The membership and the rules attached through it go; the VM or group is untouched (§4.5)."""
        with self._lock:
            member = self._member(params, "removeInstanceBootGroupMember")
            group = self.groups[member.group]
            del self.members[member.id]
            dropped = [rule for rule in self._rules_of(group) if not self._holds(group, rule.item_type, rule.item)]
            for rule in dropped:
                self._drop_rule(group, rule)
            self._note(ev.MEMBER_REMOVE, group, f"{member.kind} {member.item} and {len(dropped)} rule(s) of it")
            return {"success": True}

    def list_members(self, params: Parameters) -> dict[str, Any]:
        command = "listInstanceBootGroupMembers"
        kinds = {VIRTUAL_MACHINE.lower(): VIRTUAL_MACHINE, INSTANCE_GROUP.lower(): INSTANCE_GROUP}
        wanted = params.get("membertype", "")
        if wanted and wanted.lower() not in kinds:
            raise invalid_parameter(f"membertype: must be {VIRTUAL_MACHINE} or {INSTANCE_GROUP}, got {wanted[:40]!r}")
        details = {part.strip().lower() for part in params.get("details", "").split(",") if part.strip()}
        unknown = sorted(details - set(MEMBER_DETAILS))
        if unknown:
            raise invalid_parameter(f"details: each value must be one of {', '.join(MEMBER_DETAILS)}, got {unknown[0][:40]!r}")
        if "all" in details:
            details = {"readiness", "children"}
        ignore = boolean_parameter(params, "ignoreinstancestate")
        with self._lock:
            group = self._group(params, "bootgroupid", command)
            if "readiness" in details:
                self._reset_outside_restarts(group)
            plan = self._plan(group)
            members = sorted(self._members_of(group), key=lambda member: member.order)  # stable: ties by creation
            found = [self._describe_member(member, plan, details, ignore) for member in members
                     if not wanted or member.kind == kinds[wanted.lower()]]
        return page_of(found, params, MEMBER_KEY)

    # ------------------------------------------------------------------------------- rules
    def create_rule(self, params: Parameters) -> dict[str, Any]:
        command = "createInstanceBootGroupReadinessRule"
        with self._lock:
            group, (kind, item) = self._group(params, "bootgroupid", command), self._item(params, command)
            rule_type = required_parameter(params, "ruletype", command)
            if not self._holds(group, kind, item):
                raise invalid_parameter(
                    f"{'virtualmachineid' if kind == VIRTUAL_MACHINE else 'instancegroupid'}: {kind} {item} is not an "
                    f"item of boot group {group.name!r}; a rule attaches to an instance group member, a VM member, "
                    "or a VM inside an instance group member")
            rule = Rule(str(uuid.uuid4()), group.id, params.get("name", "").strip(), rule_type, kind, item,
                        boolean_parameter(params, "enabled", default=True), _details_map(params), self.state.clock())
            self._store_rule(group, rule, ev.RULE_CREATE)
            return {RULE_KEY: self._describe_rule(rule)}

    def update_rule(self, params: Parameters) -> dict[str, Any]:
        """`name`, `enabled` and `details`, merged over the stored ones and checked again (§2.1)."""
        command = "updateInstanceBootGroupReadinessRule"
        with self._lock:
            rule = self._rule(params, command)
            if params.get("ruletype") and params["ruletype"].strip().lower() != rule.type.lower():
                raise invalid_parameter(f"ruletype: rule {rule.name!r} is a {rule.type} rule; a rule's type cannot "
                                        "change (delete it and create another)")
            given = _details_map(params)
            merged = {key: value for key, value in rule.details.items()
                      if _canonical_key(key) not in {_canonical_key(new) for new in given}}
            merged.update(given)
            changed = dataclasses.replace(rule, name=params.get("name", "").strip() or rule.name, details=merged,
                                          enabled=boolean_parameter(params, "enabled", default=rule.enabled))
            group = self.groups[rule.group]
            self._store_rule(group, changed, ev.RULE_UPDATE)
            return {RULE_KEY: self._describe_rule(changed)}

    def delete_rule(self, params: Parameters) -> dict[str, Any]:
        with self._lock:
            rule = self._rule(params, "deleteInstanceBootGroupReadinessRule")
            group = self.groups[rule.group]
            self._drop_rule(group, rule)
            self._note(ev.RULE_DELETE, group, f"{rule.type} {rule.name!r} on {rule.item_type} {rule.item}")
            return {"success": True}

    def list_rules(self, params: Parameters) -> dict[str, Any]:
        """With a VM filter, the rules it inherits from its instance group member too (`inherited`)."""
        command = "listInstanceBootGroupReadinessRules"
        with self._lock:
            group = self._group(params, "bootgroupid", command)
            if params.get("id"):
                self._rule(params, command)
            item = self._item(params, command) if params.get("virtualmachineid") or params.get("instancegroupid") else None
            keyword = params.get("keyword", "").lower()
            found: list[dict[str, Any]] = []
            for rule in self._rules_of(group):
                inherited = False
                if item is not None and (rule.item_type, rule.item) != item:
                    inherited = (item[0] == VIRTUAL_MACHINE and rule.item_type == INSTANCE_GROUP
                                 and rule.type in INHERITED_TYPES and item[1] in self._vms_of(rule.item))
                    if not inherited:
                        continue
                if ((params.get("id") and rule.id != params["id"])
                        or (params.get("ruletype") and rule.type.lower() != params["ruletype"].lower())
                        or (keyword and keyword not in rule.name.lower())):
                    continue
                found.append(self._describe_rule(rule, inherited=inherited))
        return page_of(found, params, RULE_KEY)

    # ---------------------------------------------------------------------- start, stop, reboot
    def _operate(self, operation: str, params: Parameters, command: str) -> dict[str, Any]:
        with self._lock:
            group = self._group(params, "id", command)
            forced = boolean_parameter(params, "forced") if operation != engine.START else False
            self._refuse_busy(group, operation)
            plan = self._plan(group)
            if operation != engine.STOP:
                self._reset_outside_restarts(group)
            run = engine.begin(operation, group.name, plan.members, settings=effective(group.overrides),
                               now=self.state.clock(), poll_interval=self.settings.poll_interval,
                               check_concurrency=self.settings.check_concurrency, forced=forced, cache=group.cache)
            cmd = f"{_CMD_PACKAGE}.{command[0].upper()}{command[1:]}Cmd"
            job = self.state.run_job(command, cmd, JOB_INSTANCE_TYPE, group.id, lambda: self._run(group, run))
            group.job = job.id
            return {"jobid": job.id}

    def _run(self, group: BootGroup, run: engine.BootRun) -> dict[str, Any]:
        """The job's body: the engine to the end (no step budget: the job's thread is its own)."""
        now = self.state.clock()
        budget = Budget(clock=self._clock, step_started=now, step_seconds=math.inf, deadline=math.inf,
                        memory=Memory(), invocation_left=lambda: math.inf)

        def checkpoint(current: engine.BootRun) -> None:
            with self._lock:
                group.cache = dict(current.cache)

        try:
            outcome = engine.advance(run, self.backend, budget, checkpoint=checkpoint)
        finally:
            with self._lock:
                group.job = None
                group.cache = dict(run.cache)
                group.boots.update(engine.power_changes(run))
                for event in run.events:
                    self._record(event)
        if not outcome.finished or not outcome.ok:
            raise ApiError(INTERNAL_ERROR, f"{run.operation} of boot group {group.name!r} failed: "
                                           f"{outcome.reason or 'the run did not finish'}", CS_CLOUD_RUNTIME)
        with self._lock:
            return {GROUP_KEY: self._describe_group(group)}

    def _refuse_busy(self, group: BootGroup, what: str) -> None:
        if group.job is not None:
            raise ApiError(INTERNAL_ERROR, f"Unable to {what} boot group {group.name!r}: its job {group.job} is still "
                                           "running; wait for it (queryAsyncJobResult)", CS_CLOUD_RUNTIME)

    def _reset_outside_restarts(self, group: BootGroup) -> None:
        """VMs started outside the group since it last saw them boot read Unknown (§2.3)."""
        states = self.backend.vm_states(list(group.boots))
        now = self.state.clock()
        for vm in restarted_outside(group.boots, states):
            reset_after_outside_restart(group.cache, vm, now)
            group.boots[vm] = states[vm].last_power_change or now

    # ---------------------------------------------------------------------------- validation
    def _plan(self, group: BootGroup, members: list[Member] | None = None, rules: list[Rule] | None = None) -> _Plan:
        """`group` with `members` and `rules` (default: its own) as template properties, checked by
        `validation.check_group`; the plan's rule ids are the rules' uuids."""
        members = self._members_of(group) if members is None else members
        rules = self._rules_of(group) if rules is None else rules
        vm_groups = {vm.id: vm.group_id for vm in list(self.state.vms.values()) if vm.group_id}
        props_of: list[MemberProps] = []
        ids: list[tuple[list[str], dict[str, list[str]]]] = []
        for member in members:
            own = [rule for rule in rules if (rule.item_type, rule.item) == (member.kind, member.item)]
            inside: dict[str, list[Rule]] = {}
            if member.kind == INSTANCE_GROUP:
                direct = {other.item for other in members if other.kind == VIRTUAL_MACHINE}
                for rule in rules:
                    if (rule.item_type == VIRTUAL_MACHINE and rule.item not in direct
                            and vm_groups.get(rule.item) == member.item):
                        inside.setdefault(rule.item, []).append(rule)
            ids.append(([rule.id for rule in own], {vm: [rule.id for rule in held] for vm, held in inside.items()}))
            given = [_rule_props(rule) for rule in own]
            if member.kind == VIRTUAL_MACHINE:
                props_of.append(MemberProps(Instance=member.item, BootOrder=member.order, ReadinessRules=given))
            else:
                props_of.append(MemberProps(InstanceGroup=InstanceGroupProps(Id=member.item), BootOrder=member.order,
                                            ReadinessRules=given,
                                            InstanceRules={vm: [_rule_props(r) for r in held] for vm, held in inside.items()}))
        props = InstanceBootGroupProps(Name=group.name, Description=group.description, Backend="cloudstack",
                                       Members=props_of, Settings=group.overrides)
        checked = check_group(props, self._context(group, members, vm_groups))
        specs: dict[str, RuleSpec] = {}
        for spec, (own_ids, inside_ids) in zip(checked.members, ids):
            for rule_spec, rule_id in zip(spec.rules, own_ids):
                rule_spec.id = rule_id
                specs[rule_id] = rule_spec
            for vm, vm_specs in spec.instance_rules.items():
                for rule_spec, rule_id in zip(vm_specs, inside_ids.get(vm, [])):
                    rule_spec.id = rule_id
                    specs[rule_id] = rule_spec
        return _Plan(checked.problems, checked.members, specs)

    def _context(self, group: BootGroup, members: list[Member], vm_groups: dict[str, str]) -> Context:
        claims: dict[str, str] = {}
        for other in self.members.values():
            if other.group == group.id:
                continue
            holder = self.groups[other.group].name
            if other.kind == VIRTUAL_MACHINE:
                claims[instance_item(other.item)] = holder
            else:  # its VMs are found through `instance_groups` (a VM is in one instance group)
                claims[group_item(other.item)] = holder
        group_vms = {member.item: self._vms_of(member.item) for member in members if member.kind == INSTANCE_GROUP}
        candidates = [member.item for member in members if member.kind == VIRTUAL_MACHINE]
        candidates += [vm for vms in group_vms.values() for vm in vms]

        def has_guest_agent(vm: str) -> bool | None:
            found = self.state.vms.get(vm)
            return None if found is None else found.hypervisor == "KVM"

        return Context(max_members=self.settings.max_members, default_backend="cloudstack", claims=claims,
                       group_instances=group_vms,
                       instance_groups=vm_groups,
                       has_guest_agent=has_guest_agent, ineligible=self.backend.ineligible(candidates),
                       taken_names=[other.name for other in self.groups.values() if other.id != group.id])

    def _store_rule(self, group: BootGroup, rule: Rule, event: str) -> None:
        """Check the group with `rule` (new or changed) and keep it with its canonical type, name and details."""
        others = [other for other in self._rules_of(group) if other.id != rule.id]
        plan = self._plan(group, self._members_of(group), others + [rule])
        if plan.problems:
            raise _refused(plan.problems)
        spec = plan.rules[rule.id]
        rule.type, rule.name, rule.details = spec.type, spec.name, dict(spec.details)
        self.rules[rule.id] = rule
        self._note(event, group, f"{rule.type} {rule.name!r} on {rule.item_type} {rule.item}")

    def _drop_rule(self, group: BootGroup, rule: Rule) -> None:
        del self.rules[rule.id]
        for key in [key for key in group.cache if key.startswith(f"{rule.id}@")]:
            del group.cache[key]

    # ------------------------------------------------------------------------------ lookups
    def _group(self, params: Parameters, name: str, command: str) -> BootGroup:
        return _lookup(self.groups, params, name, command)

    def _member(self, params: Parameters, command: str) -> Member:
        return _lookup(self.members, params, "id", command)

    def _rule(self, params: Parameters, command: str) -> Rule:
        return _lookup(self.rules, params, "id", command)

    def _item(self, params: Parameters, command: str) -> tuple[str, str]:
        """(VirtualMachine, vm uuid) or (InstanceGroup, group uuid): exactly one, and it exists."""
        vm, group = params.get("virtualmachineid", ""), params.get("instancegroupid", "")
        if bool(vm) == bool(group):
            raise invalid_parameter("virtualmachineid, instancegroupid: give exactly one of them")
        if vm:
            if vm not in self.state.vms:
                raise unknown_entity(command, "virtualmachineid", vm)
            return VIRTUAL_MACHINE, vm
        if group not in self.state.groups:
            raise unknown_entity(command, "instancegroupid", group)
        return INSTANCE_GROUP, group

    def _order(self, params: Parameters, command: str) -> int:
        order = whole_parameter(params, "order")
        if order is None:
            required_parameter(params, "order", command)
        assert order is not None
        if order < 0:
            raise invalid_parameter(f"order: must be an integer ≥ 0 (equal orders form one tier), got {order}")
        return order

    def _own_account(self, params: Parameters) -> None:
        if params.get("account") and params["account"] != self.state.account:
            raise invalid_parameter(f"account: the local endpoint has one account, {self.state.account!r}")
        if params.get("domainid") and params["domainid"] != self.state.domain_id:
            raise invalid_parameter(f"domainid: the local endpoint has one domain, ROOT ({self.state.domain_id})")
        if params.get("projectid"):
            raise invalid_parameter("projectid: the local endpoint has no projects")

    def _apply_overrides(self, overrides: SettingsProps, params: Parameters) -> None:
        """The overrides given; a negative number clears one of the three numbers (on create:
        leaves it unset); the boolean can only be set (§3)."""
        for parameter, setting in OVERRIDES.items():
            value = whole_parameter(params, parameter)
            if value is not None:
                setattr(overrides, setting, None if value < 0 else value)
        if params.get(REBOOT_ON_RETRY):
            overrides.RebootOnRetry = boolean_parameter(params, REBOOT_ON_RETRY)

    def _members_of(self, group: BootGroup) -> list[Member]:
        return [member for member in self.members.values() if member.group == group.id]

    def _rules_of(self, group: BootGroup) -> list[Rule]:
        return [rule for rule in self.rules.values() if rule.group == group.id]

    def _vms_of(self, instance_group: str) -> list[str]:
        return self.backend.expand_group(GroupRef(id=instance_group))

    def _holds(self, group: BootGroup, kind: str, item: str) -> bool:
        """Whether `item` is one of the group's: a member, or a VM inside an instance group member."""
        members = self._members_of(group)
        if any((member.kind, member.item) == (kind, item) for member in members):
            return True
        return kind == VIRTUAL_MACHINE and any(
            member.kind == INSTANCE_GROUP and item in self._vms_of(member.item) for member in members)

    # ----------------------------------------------------------------------------- responses
    def _describe_group(self, group: BootGroup) -> dict[str, Any]:
        report = effective(group.overrides).report()
        return {"id": group.id, "name": group.name, "description": group.description, "created": cs_date(group.created),
                "account": self.state.account, "accountid": self.state.account_id, "domainid": self.state.domain_id,
                "domain": "ROOT", "domainpath": "ROOT",
                "readinessattempttimeoutseconds": report["ReadinessTimeoutSeconds"],
                "readinessmaxretryattempts": report["MaxRetryAttempts"],
                "readinessrebootonretry": report["RebootOnRetry"],
                "readinessinitialdelayseconds": report["InitialDelaySeconds"]}

    def _describe_member(self, member: Member, plan: _Plan, details: set[str], ignore: bool) -> dict[str, Any]:
        vms = [member.item] if member.kind == VIRTUAL_MACHINE else self._vms_of(member.item)
        states = {vm: self.cloud.vm(vm).state for vm in vms if vm in self.state.vms}
        if member.kind == VIRTUAL_MACHINE:
            name, state = self.state.vms[member.item].name, states.get(member.item, "Destroyed")
        else:
            name = self.state.groups[member.item].name
            distinct = set(states.values())
            state = distinct.pop() if len(distinct) == 1 else "Mixed" if distinct else "Empty"
        answer: dict[str, Any] = {"id": member.id, "bootgroupid": member.group, "membertype": member.kind,
                                  "memberid": member.item, "membername": name, "memberstate": state,
                                  "order": member.order, "created": cs_date(member.created)}
        spec = next((spec for spec in plan.members if spec.key == member.item), None)
        if spec is None or not details:
            return answer
        group = self.groups[member.group]
        running = {vm: value == "Running" for vm, value in states.items()}
        if "readiness" in details:
            status, message = member_status(spec, vms, group.cache, running, ignore_instance_state=ignore)
            mode = ("RuleBased" if any(rule.enabled for rule in spec.rules)
                    else "None" if member.kind == VIRTUAL_MACHINE else "ChildDependent")
            answer.update(readinessmode=mode, readinessstatus=status, readinessmessage=message)
        if "children" in details and member.kind == INSTANCE_GROUP:
            children = []
            for vm in vms:
                direct, inherited = vm_rules(spec, vm)
                status, message = cached_vm_status(group.cache, vm, direct + inherited, running=running.get(vm, False),
                                                   ignore_instance_state=ignore)
                children.append({"id": vm, "name": self.state.vms[vm].name, "state": states.get(vm, "Destroyed"),
                                 "readinessmode": "RuleBased" if direct or inherited else "None",
                                 "readinessstatus": status, "readinessmessage": message})
            answer["children"] = children
        return answer

    def _describe_rule(self, rule: Rule, inherited: bool = False) -> dict[str, Any]:
        source = self.state.vms.get(rule.item) if rule.item_type == VIRTUAL_MACHINE else self.state.groups.get(rule.item)
        return {"id": rule.id, "name": rule.name, "bootgroupid": rule.group, "itemtype": rule.item_type,
                "itemid": rule.item, "itemname": source.name if source is not None else "", "enabled": rule.enabled,
                "ruletype": rule.type, "created": cs_date(rule.created), "details": dict(rule.details),
                "inherited": inherited}

    # -------------------------------------------------------------------------------- events
    def _note(self, kind: str, group: BootGroup, message: str) -> None:
        self._record(ev.Event(kind, self.state.clock(), message, subject=group.name))

    def _record(self, event: ev.Event) -> None:
        self.events.append(event)
        _log.info(event.line(), extra={"fields": {"event": event.type, "group": event.subject, "ok": event.ok}})


def _lookup(table: Mapping[str, T], params: Parameters, name: str, command: str) -> T:
    """The entry parameter `name` names: a missing parameter or an unknown id is a 431."""
    key = required_parameter(params, name, command)
    found = table.get(key)
    if found is None:
        raise unknown_entity(command, name, key)
    return found


def _rule_props(rule: Rule) -> ReadinessRuleProps:
    return ReadinessRuleProps(Type=rule.type, Name=rule.name or None, Enabled=rule.enabled, Details=dict(rule.details))


def extension(cloud: "LocalCloudStack") -> CloudStackExtension:
    """The entry point (`crhelper.local.cloudstack`): the boot-group API on `cloud`, with the
    CRHELPER_BOOTGROUP_* settings (poll interval, check concurrency, member limit)."""
    return BootGroupService(cloud).extension()
