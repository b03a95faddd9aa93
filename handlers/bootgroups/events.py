"""The `INSTANCE.BOOT.GROUP.*` events (spec §6, with `.MEMBER.REORDER`, §9 #5), a start's timeline
entries, and which events an Update's plan change makes (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .model import MemberSpec, RuleSpec

PREFIX = "INSTANCE.BOOT.GROUP"
CREATE, UPDATE, DELETE = f"{PREFIX}.CREATE", f"{PREFIX}.UPDATE", f"{PREFIX}.DELETE"
START, STOP, REBOOT = f"{PREFIX}.START", f"{PREFIX}.STOP", f"{PREFIX}.REBOOT"
MEMBER_ADD, MEMBER_REMOVE, MEMBER_REORDER = f"{PREFIX}.MEMBER.ADD", f"{PREFIX}.MEMBER.REMOVE", f"{PREFIX}.MEMBER.REORDER"
RULE_CREATE = f"{PREFIX}.READINESS.RULE.CREATE"
RULE_UPDATE = f"{PREFIX}.READINESS.RULE.UPDATE"
RULE_DELETE = f"{PREFIX}.READINESS.RULE.DELETE"
#: The eleven documented types and the reorder the code emits.
EVENT_TYPES = (CREATE, UPDATE, DELETE, START, STOP, REBOOT, MEMBER_ADD, MEMBER_REMOVE, MEMBER_REORDER,
               RULE_CREATE, RULE_UPDATE, RULE_DELETE)


@dataclasses.dataclass
class Event:
    """One audit event of a group: its type, when, whether what it records succeeded, and a
    message naming the member or rule."""

    type: str
    at: float
    message: str = ""
    ok: bool = True
    subject: str = ""

    def line(self) -> str:
        outcome = "" if self.ok else " FAILED"
        subject = f" {self.subject}" if self.subject else ""
        return f"{self.type}{outcome}{subject}: {self.message}" if self.message else f"{self.type}{outcome}{subject}"


@dataclasses.dataclass
class TimelineEntry:
    """One thing a start or stop did: who started when, each check, each retry, each halt."""

    at: float
    kind: str
    subject: str = ""
    message: str = ""
    #: The BootOrder of the tier it happened in (None: the whole run).
    order: int | None = None

    def line(self, origin: float = 0.0) -> str:
        tier = f"[order {self.order}] " if self.order is not None else ""
        subject = f"{self.subject}: " if self.subject else ""
        return f"{self.at - origin:9.2f}s {tier}{self.kind:<13} {subject}{self.message}"


# Timeline kinds.
TIER_START, TIER_READY = "tier.start", "tier.ready"
VM_START, VM_RUNNING, VM_BOOTED = "vm.start", "vm.running", "vm.booted"
CHECK, RETRY, REBOOT_VM, GAVE_UP = "check", "retry", "reboot", "gave-up"
MEMBER_READY, GROUP_CHECK = "member.ready", "group"
HALT, DONE = "halt", "done"
VM_STOP, VM_STOP_SKIP, VM_STOP_FAILED, VM_STOPPED = "vm.stop", "vm.stopped-already", "vm.stop-failed", "vm.stopped"


def _rules_by_id(members: list[MemberSpec]) -> dict[str, tuple[str, RuleSpec]]:
    out: dict[str, tuple[str, RuleSpec]] = {}
    for member in members:
        for rule in member.rules:
            out[rule.id] = (member.key, rule)
        for vm_rules in member.instance_rules.values():
            for rule in vm_rules:
                out[rule.id] = (member.key, rule)
    return out


def plan_changes(old: list[MemberSpec], new: list[MemberSpec], at: float) -> list[Event]:
    """The member and rule events an Update from `old` to `new` records: members added, removed or
    reordered; rules created, updated (name is the identity, so enabled or details changed) or
    deleted. A removed member's rules are deleted with it (§9 #6)."""
    events: list[Event] = []
    before = {member.key: member for member in old}
    after = {member.key: member for member in new}
    for key, member in after.items():
        if key not in before:
            events.append(Event(MEMBER_ADD, at, f"{member.describe()} at BootOrder {member.order}", subject=key))
        elif before[key].order != member.order:
            events.append(Event(MEMBER_REORDER, at, f"{member.describe()}: BootOrder {before[key].order} -> {member.order}",
                                subject=key))
    for key, member in before.items():
        if key not in after:
            events.append(Event(MEMBER_REMOVE, at, f"{member.describe()} (its readiness rules are deleted with it)",
                                subject=key))
    old_rules, new_rules = _rules_by_id(old), _rules_by_id(new)
    for rule_id, (_owner, rule) in new_rules.items():
        if rule_id not in old_rules:
            events.append(Event(RULE_CREATE, at, f"{rule.describe()} on {rule.item}", subject=rule_id))
        else:
            previous = old_rules[rule_id][1]
            if (previous.type, previous.enabled, previous.details) != (rule.type, rule.enabled, rule.details):
                events.append(Event(RULE_UPDATE, at, f"{rule.describe()} on {rule.item}", subject=rule_id))
    for rule_id, (_owner, rule) in old_rules.items():
        if rule_id not in new_rules:
            events.append(Event(RULE_DELETE, at, f"{rule.describe()} on {rule.item}", subject=rule_id))
    return events


def as_dicts(entries: list[Any]) -> list[dict[str, Any]]:
    """Events or timeline entries as JSON objects (for the provider's state and `--json`)."""
    return [dataclasses.asdict(entry) for entry in entries]
