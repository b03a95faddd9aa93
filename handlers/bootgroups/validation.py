"""Every membership, rule and limit rule of spec §1, §2.1 and §5, as pure functions.

All problems are reported at once, each as (property path, rule): `Members[1].ReadinessRules[0].
Details.port: must be an integer 1-65535`. What lies outside the template (other boot groups'
claims, an instance group's current VMs, which instances have a guest agent, ineligible VMs, names
taken by other groups) comes in a `Context` the provider fills from its state and the backend, so
the same code serves Create, Update and the CLI.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from crhelper.errors import PropertiesError

from .model import (
    BACKENDS, COUNT, CUSTOM_SCRIPT, DESIRED_STATES, GUEST_AGENT, INSTANCE_GROUP, PERCENTAGE, PING, PORT,
    PORT_CHECK, PROTOCOL, QUORUM, RULE_TYPES, SINGLETON_TYPES, THRESHOLD_TYPE, THRESHOLD_VALUE, VIRTUAL_MACHINE,
    GroupRef, InstanceBootGroupProps, LocalInstanceProps, MemberProps, MemberSpec, ReadinessRuleProps, RuleSpec,
)
from .settings import GroupSettings, effective, settings_problems

PREFIX = "ResourceProperties"
#: A boot group's Name, as CloudStack's (it is in the resource's Data, whose 4,096 bytes it must not fill).
MAX_NAME = 255
#: Detail keys each type takes (lower-case); MemberQuorum also reads the PR's snake_case spelling.
_DETAIL_KEYS: dict[str, tuple[str, ...]] = {
    PING: (),
    GUEST_AGENT: (),
    PORT_CHECK: (PORT, PROTOCOL),
    QUORUM: (THRESHOLD_TYPE, THRESHOLD_VALUE, "threshold_type", "threshold_value"),
}
_SNAKE = {"threshold_type": THRESHOLD_TYPE, "threshold_value": THRESHOLD_VALUE}


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}"


def instance_item(vm: str) -> str:
    """The membership key of an instance (one boot group per item, across stacks)."""
    return f"instance:{vm}"


def group_item(key: str) -> str:
    """The membership key of an instance group."""
    return f"group:{key}"


@dataclasses.dataclass(frozen=True)
class Context:
    """What validation needs to know beyond the properties."""

    max_members: int = 10
    default_backend: str = "local"
    #: Membership key (instance_item/group_item) -> the name of the *other* boot group holding it.
    claims: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Group member key -> its current instances, for groups given by Tag or Id (Instances lists are read directly).
    group_instances: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    #: Group member key -> what makes the group one item across boot groups and names (the backend's
    #: `group_identity`: CloudStack's uuid, ECS's `tag:<Key>=<Value>`); absent: its key (the Name).
    group_identities: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Instance -> the identity of an instance group it belongs to, where known (a VM whose group is a
    #: member elsewhere: refused when `claims` has that group).
    instance_groups: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Whether an instance has a guest agent (counts as KVM); None: not known here (not checked).
    has_guest_agent: Callable[[str], bool | None] = lambda vm: None
    #: Instance -> why it cannot be a member (VNF appliance, CKS node, AutoScale group).
    ineligible: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Names of the owner's other boot groups (a Name is unique per owner).
    taken_names: Iterable[str] = ()


@dataclasses.dataclass
class CheckedGroup:
    """The outcome: the problems, and (when there are none) the normalised plan."""

    problems: list[Problem]
    members: list[MemberSpec]
    settings: GroupSettings
    backend: str
    desired_state: str
    #: What the group claims (membership key -> the property path naming it): every instance, listed
    #: or found in a group, and every instance group by its identity.
    items: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def problems_error(problems: Sequence[Problem], prefix: str = PREFIX) -> PropertiesError:
    """One FAILED Reason listing every problem (paths under ResourceProperties), never a value."""
    paths = tuple(dict.fromkeys(f"{prefix}.{p.path}" for p in problems))
    listed = "; ".join(f"{prefix}.{p}" for p in problems)
    return PropertiesError(f"invalid {prefix}: {listed}", paths)


def validate_group(props: InstanceBootGroupProps, context: Context | None = None) -> CheckedGroup:
    """check_group, raising PropertiesError (every problem in one Reason) when any rule is broken."""
    checked = check_group(props, context)
    if checked.problems:
        raise problems_error(checked.problems)
    return checked


def check_group(props: InstanceBootGroupProps, context: Context | None = None) -> CheckedGroup:
    """Every rule of §1, §2.1 and §5 on `props`; the normalised members alongside."""
    context = context or Context()
    problems: list[Problem] = []
    add = lambda path, rule: problems.append(Problem(path, rule))  # noqa: E731

    name = props.Name.strip()
    if not name:
        add("Name", "must not be empty")
    elif name != props.Name:
        add("Name", "must not start or end with whitespace")
    elif len(name) > MAX_NAME:
        add("Name", f"must be at most {MAX_NAME} characters (it is {len(name)})")
    elif name in set(context.taken_names):
        add("Name", f"another boot group of this owner is already named {name!r} (a Name is unique per owner)")
    backend = (props.Backend or context.default_backend).strip().lower()
    if backend not in BACKENDS:
        add("Backend", f"must be one of {', '.join(BACKENDS)}")
    _check_connection(props, backend, add)
    desired = next((s for s in DESIRED_STATES if s.lower() == props.DesiredState.strip().lower()), None)
    if desired is None:
        add("DesiredState", f"must be {' or '.join(DESIRED_STATES)}")
    problems.extend(Problem(path, rule) for path, rule in settings_problems(props.Settings))
    if len(props.Members) > context.max_members:
        add("Members", f"{len(props.Members)} members, but a boot group holds at most {context.max_members} "
                       "(CRHELPER_BOOTGROUP_MAX_MEMBERS; an InstanceGroup counts as one member)")

    members: list[MemberSpec] = []
    seen_items: dict[str, str] = {}  # membership key -> the path of the member holding it
    for index, member in enumerate(props.Members):
        spec = _check_member(member, f"Members[{index}]", backend, context, seen_items, add)
        if spec is not None:
            members.append(spec)
    return CheckedGroup(problems, members, effective(props.Settings), backend, desired or "Running", seen_items)


def _check_connection(props: InstanceBootGroupProps, backend: str, add: Callable[[str, str], None]) -> None:
    """`CloudStack` and `Ecs` configure their own backend only, with values the backend can use."""
    for key, owner in (("CloudStack", "cloudstack"), ("Ecs", "ecs")):
        if getattr(props, key) is not None and backend != owner:
            add(key, f"configures the {owner} backend, but this group runs on {backend} "
                     f"(remove it, or set Backend: {owner})")
    cloudstack = props.CloudStack
    if cloudstack is not None:
        endpoint = (cloudstack.Endpoint or "").strip()
        if endpoint and not endpoint.startswith(("http://", "https://")):
            add("CloudStack.Endpoint", "must be an http(s) URL such as https://cloud.example.com/client/api")
        if cloudstack.Method is not None and cloudstack.Method.strip().lower() not in ("get", "post"):
            add("CloudStack.Method", "must be get or post")
        if cloudstack.Timeout is not None and cloudstack.Timeout < 1:
            add("CloudStack.Timeout", "must be a whole number of seconds ≥ 1")
    ecs = props.Ecs
    if ecs is not None:
        for key, value in (("Endpoint", ecs.Endpoint), ("Region", ecs.Region)):
            if value is not None and not value.strip():
                add(f"Ecs.{key}", "must not be empty (leave it out for the default)")


def _check_member(member: MemberProps, path: str, backend: str, context: Context,
                  seen: dict[str, str], add: Callable[[str, str], None]) -> MemberSpec | None:
    if member.BootOrder < 0:
        add(f"{path}.BootOrder", "must be an integer ≥ 0 (equal orders form one tier)")
    if (member.Instance is None) == (member.InstanceGroup is None):
        add(path, "give exactly one of Instance and InstanceGroup")
        return None
    if member.Instance is not None:
        vm = member.Instance.strip()
        if not vm:
            add(f"{path}.Instance", "must be a non-empty instance id")
            return None
        if member.InstanceRules:
            add(f"{path}.InstanceRules", "only an InstanceGroup member holds instances; put this instance's rules in ReadinessRules")
        _claim_vm(vm, f"{path}.Instance", context, seen, add, direct=True)
        rules = _check_rules(member.ReadinessRules, f"{path}.ReadinessRules", VIRTUAL_MACHINE, vm, context, add)
        return MemberSpec(key=vm, kind=VIRTUAL_MACHINE, order=member.BootOrder, rules=rules)

    group = member.InstanceGroup
    assert group is not None
    ref, key = _check_group_ref(group, f"{path}.InstanceGroup", backend, add)
    if key is None:
        return None
    item = group_item(context.group_identities.get(key, key))
    if item in seen:
        add(f"{path}.InstanceGroup", f"instance group {key!r} is already a member of this boot group ({seen[item]})")
    elif item in context.claims:
        add(f"{path}.InstanceGroup", f"instance group {key!r} is already a member of boot group "
                                     f"{context.claims[item]!r} (one boot group per instance group)")
    seen.setdefault(item, f"{path}.InstanceGroup")
    instances = list(ref.instances) if ref.instances is not None else context.group_instances.get(key)
    for vm in instances or ():
        _claim_vm(vm, f"{path}.InstanceGroup", context, seen, add, direct=False, group=key)
    rules = _check_rules(member.ReadinessRules, f"{path}.ReadinessRules", INSTANCE_GROUP, key, context, add)
    instance_rules: dict[str, list[RuleSpec]] = {}
    for vm, vm_rules in member.InstanceRules.items():
        where = f"{path}.InstanceRules.{vm}"
        if instances is not None and vm not in instances:
            add(where, f"instance {vm!r} is not in instance group {key!r}; a rule attaches to an item of this boot group")
        instance_rules[vm] = _check_rules(vm_rules, where, VIRTUAL_MACHINE, vm, context, add, inside_group=True)
    return MemberSpec(key=key, kind=INSTANCE_GROUP, order=member.BootOrder, rules=rules,
                      instance_rules=instance_rules, group=ref)


def group_ref(group: Any) -> tuple[GroupRef, str | None]:
    """How a backend finds a member group's instances, and the member's key (its Name, else its Id;
    None without either)."""
    name = (group.Name or "").strip() or None
    ref = GroupRef(name=name, instances=[vm for vm in group.Instances if vm.strip()] if group.Instances is not None else None,
                   tag_key=group.Tag.Key if group.Tag else None, tag_value=group.Tag.Value if group.Tag else None,
                   id=group.Id)
    return ref, name or (group.Id.strip() if group.Id and group.Id.strip() else None)


def _check_group_ref(group: Any, path: str, backend: str,
                     add: Callable[[str, str], None]) -> tuple[GroupRef, str | None]:
    given = [name for name in ("Instances", "Tag", "Id") if getattr(group, name) is not None]
    if len(given) != 1:
        add(path, "give exactly one of Instances, Tag (ECS) and Id (CloudStack)")
    if group.Tag is not None and backend != "ecs":
        add(f"{path}.Tag", "selects instances by tag on the ecs backend only; list Instances instead")
    if group.Id is not None and backend != "cloudstack":
        add(f"{path}.Id", "names a CloudStack instance group; only the cloudstack backend has one")
    name = (group.Name or "").strip() or None
    if name is None and group.Id is None:
        add(f"{path}.Name", "is required (it names the member in Data, events and rule names) unless Id is given")
    if group.Instances is not None:
        counted: set[str] = set()
        for index, vm in enumerate(group.Instances):
            if not vm.strip():
                add(f"{path}.Instances[{index}]", "must be a non-empty instance id")
            elif vm in counted:
                add(f"{path}.Instances[{index}]", f"instance {vm!r} is listed twice")
            counted.add(vm)
    return group_ref(group)


def _claim_vm(vm: str, path: str, context: Context, seen: dict[str, str], add: Callable[[str, str], None],
              *, direct: bool, group: str | None = None) -> None:
    """One boot group per instance: not twice in this group, not in another, not inside a member group."""
    item = instance_item(vm)
    what = f"instance {vm!r}" + ("" if direct else f" (in instance group {group!r})")
    if item in seen:
        add(path, f"{what} is already a member of this boot group ({seen[item]})")
    elif item in context.claims:
        add(path, f"{what} is already a member of boot group {context.claims[item]!r} (one boot group per instance)")
    else:
        owner_group = context.instance_groups.get(vm)
        if owner_group is not None and group_item(owner_group) in context.claims and (
                direct or group is None or context.group_identities.get(group, group) != owner_group):
            add(path, f"{what} belongs to instance group {owner_group!r}, a member of boot group "
                      f"{context.claims[group_item(owner_group)]!r}")
    if vm in context.ineligible:
        add(path, f"{what} cannot be a member: {context.ineligible[vm]}")
    seen.setdefault(item, path)


def _check_rules(rules: Sequence[ReadinessRuleProps], path: str, item_type: str, item: str, context: Context,
                 add: Callable[[str, str], None], *, inside_group: bool = False) -> list[RuleSpec]:
    """The rules of one item: types valid for it, singletons, details, names (§2.1)."""
    out: list[RuleSpec] = []
    first_of: dict[str, str] = {}
    ports: dict[str, str] = {}
    names: set[str] = set()
    for index, rule in enumerate(rules):
        where = f"{path}[{index}]"
        kind = _rule_type(rule.Type, f"{where}.Type", add)
        if kind is None:
            continue
        if kind == QUORUM and item_type == VIRTUAL_MACHINE:
            add(f"{where}.Type", "MemberQuorum is valid on an InstanceGroup member only"
                + (" (these are one instance's rules)" if inside_group else ""))
        if kind in SINGLETON_TYPES:
            if kind in first_of:
                add(f"{where}.Type", f"a second {kind} rule on this item (the first is {first_of[kind]}); {kind} is one per item")
            first_of.setdefault(kind, where)
        if kind == GUEST_AGENT and item_type == VIRTUAL_MACHINE and context.has_guest_agent(item) is False:
            add(f"{where}.Type", f"GuestAgentLiveness needs a KVM instance with a guest agent; instance {item!r} has none "
                                 "(a Custom::LocalInstance needs GuestAgent: true)")
        details = _check_details(kind, rule.Details, f"{where}.Details", add)
        if kind == PORT_CHECK and PORT in details:
            if details[PORT] in ports:
                add(f"{where}.Details.port", f"port {details[PORT]} already has a PortCheck on this item ({ports[details[PORT]]}); one per port")
            ports.setdefault(details[PORT], where)
        name = (rule.Name or "").strip()
        if name:
            if name in names:
                add(f"{where}.Name", f"another rule of this item is named {name!r}; rule names are unique per item")
        else:
            base = name = f"{kind}-{item_type}-{item}"
            suffix = 2
            while name in names:
                name, suffix = f"{base}-{suffix}", suffix + 1
        names.add(name)
        out.append(RuleSpec(id=f"{item}/{name}", type=kind, name=name, enabled=rule.Enabled, item_type=item_type,
                            item=item, details=details))
    return out


def _rule_type(raw: str, path: str, add: Callable[[str, str], None]) -> str | None:
    """The canonical type (parsed case-insensitively, §2.1), or None after reporting why not."""
    text = raw.strip().lower()
    if text == CUSTOM_SCRIPT.lower():
        add(path, f"CustomScript is reserved and has no checker; use one of {', '.join(RULE_TYPES)}")
        return None
    kind = next((t for t in RULE_TYPES if t.lower() == text), None)
    if kind is None:
        add(path, f"must be one of {', '.join(RULE_TYPES)}")
    return kind


def _check_details(kind: str, raw: Mapping[str, Any], path: str, add: Callable[[str, str], None]) -> dict[str, str]:
    """The details as strings under the documented keys (keys case-insensitive), checked for `kind`."""
    allowed = _DETAIL_KEYS[kind]
    values: dict[str, str] = {}
    spelled: dict[str, str] = {}  # documented key -> the key as written
    for key, value in raw.items():
        low = key.strip().lower()
        if low not in allowed:
            rule = f"is not a detail of {kind}" + (f" (it takes {', '.join(k for k in allowed if k not in _SNAKE)})"
                                                     if allowed else " (it takes no details)")
            add(f"{path}.{key}", rule)
            continue
        if value is None:
            continue
        text = _detail_text(value)
        canonical = _SNAKE.get(low, low)
        if canonical in values and values[canonical].lower() != text.lower():
            add(f"{path}.{key}", f"disagrees with {spelled[canonical]} (give one spelling, or the same value under both)")
            continue
        values[canonical], spelled[canonical] = text, key
    if kind == PORT_CHECK:
        port = values.get(PORT)
        if port is None or port == "":
            add(f"{path}.port", "is required for PortCheck (an integer 1-65535)")
        elif not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            add(f"{path}.port", "must be an integer 1-65535")
        else:
            values[PORT] = str(int(port))
        protocol = values.get(PROTOCOL)
        if protocol:
            if protocol.lower() != "tcp":
                add(f"{path}.protocol", "only tcp is supported")
            else:
                values[PROTOCOL] = "tcp"
    elif kind == QUORUM:
        _check_quorum(values, path, add)
    return values


def _detail_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _check_quorum(values: dict[str, str], path: str, add: Callable[[str, str], None]) -> None:
    kind, value = values.get(THRESHOLD_TYPE, ""), values.get(THRESHOLD_VALUE, "")
    if not kind:
        add(f"{path}.thresholdtype", "is required for MemberQuorum (COUNT or PERCENTAGE; threshold_type is read too)")
    elif kind.upper() not in (COUNT, PERCENTAGE):
        add(f"{path}.thresholdtype", "must be COUNT or PERCENTAGE")
    else:
        values[THRESHOLD_TYPE] = kind = kind.upper()
    if not value:
        add(f"{path}.thresholdvalue", "is required for MemberQuorum (threshold_value is read too)")
        return
    if kind == COUNT:
        if not (value.isascii() and value.isdigit()):
            add(f"{path}.thresholdvalue", "must be a whole number ≥ 0 for COUNT")
    elif kind == PERCENTAGE:
        number = parse_number(value)
        if number is None:
            add(f"{path}.thresholdvalue", "must be a number for PERCENTAGE")
        elif not 0 <= number <= 100:
            add(f"{path}.thresholdvalue", "must be a percentage 0-100 (a larger one could never be met)")


def parse_number(text: str) -> float | None:
    """A finite decimal number, or None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


# --- Custom::LocalInstance ---------------------------------------------------------------------


def check_local_instance(props: LocalInstanceProps) -> list[Problem]:
    """A runnable command, a host, distinct ports 1-65535, environment names without `=`."""
    problems: list[Problem] = []
    command = props.Command
    if isinstance(command, str):
        if not command.strip():
            problems.append(Problem("Command", "must not be empty (an argv list, or a string run by the shell)"))
    elif not command:
        problems.append(Problem("Command", "must not be empty (an argv list, or a string run by the shell)"))
    elif not command[0].strip():
        problems.append(Problem("Command[0]", "must name the program to run"))
    if not props.Host.strip():
        problems.append(Problem("Host", "must not be empty"))
    seen: set[int] = set()
    for index, port in enumerate(props.Ports):
        if not 1 <= port <= 65535:
            problems.append(Problem(f"Ports[{index}]", "must be a port number 1-65535"))
        elif port in seen:
            problems.append(Problem(f"Ports[{index}]", f"port {port} is listed twice"))
        seen.add(port)
    for name in props.Environment:
        if not name or "=" in name or "\0" in name:
            problems.append(Problem(f"Environment.{name}", "an environment variable name must be non-empty, without '=' or NUL"))
    return problems


def validate_local_instance(props: LocalInstanceProps) -> None:
    problems = check_local_instance(props)
    if problems:
        raise problems_error(problems)


def check_update(old: Sequence[MemberSpec], new: Sequence[MemberSpec]) -> list[Problem]:
    """§2.1: a rule's type never changes on Update (its identity is its item and Name); delete it
    and create one under another Name instead."""
    before = {rule.id: rule for member in old for rule in _all_rules(member)}
    problems = []
    for index, member in enumerate(new):
        for rule in _all_rules(member):
            previous = before.get(rule.id)
            if previous is not None and previous.type != rule.type:
                where = f"Members[{index}]" + ("" if rule.item == member.key else f".InstanceRules.{rule.item}")
                problems.append(Problem(where, f"rule {rule.name!r} is a {previous.type} rule; a rule's type cannot change "
                                               "(remove it and add one under another Name)"))
    return problems


def _all_rules(member: MemberSpec) -> list[RuleSpec]:
    return list(member.rules) + [rule for rules in member.instance_rules.values() for rule in rules]
