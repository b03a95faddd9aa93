"""The two resource types' properties as typed models, and the normalised plan the engine runs.

`InstanceBootGroupProps` and `LocalInstanceProps` are what a template writes (pydantic, the
framework's required validator: it reports every type problem at once, and ROS's habit of sending
numbers and booleans as strings is accepted). Type checks only: the rules of spec §1, §2.1 and §5
live in `validation`, which also builds the normalised `MemberSpec`/`RuleSpec` values below. Those
are plain dataclasses of JSON values, so a start's state can carry them through a JSON round trip.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict, Field, SecretStr

BOOT_GROUP_TYPE = "Custom::InstanceBootGroup"
LOCAL_INSTANCE_TYPE = "Custom::LocalInstance"

# Readiness statuses (§2.1): a missing cache entry reads Unknown, which is not Ready.
READY, NOT_READY, ERROR, UNKNOWN = "Ready", "NotReady", "Error", "Unknown"
STATUSES = (READY, NOT_READY, ERROR, UNKNOWN)

# Rule types (§2.1); CustomScript is a reserved value without a checker: refused.
PING, PORT_CHECK, GUEST_AGENT, QUORUM, CUSTOM_SCRIPT = "Ping", "PortCheck", "GuestAgentLiveness", "MemberQuorum", "CustomScript"
RULE_TYPES = (PING, PORT_CHECK, GUEST_AGENT, QUORUM)
#: One of each per item; PortCheck may repeat (one per port).
SINGLETON_TYPES = (PING, GUEST_AGENT, QUORUM)
#: Rules a group member's instances inherit (MemberQuorum never is: it is the group's own).
INHERITED_TYPES = (PING, PORT_CHECK, GUEST_AGENT)

# Item (member) types, with CloudStack's names: they appear in generated rule names.
VIRTUAL_MACHINE, INSTANCE_GROUP = "VirtualMachine", "InstanceGroup"

# Detail keys as stored and returned (the documented spelling, §9 #3).
PORT, PROTOCOL, THRESHOLD_TYPE, THRESHOLD_VALUE = "port", "protocol", "thresholdtype", "thresholdvalue"
COUNT, PERCENTAGE = "COUNT", "PERCENTAGE"

BACKENDS = ("local", "ecs", "cloudstack")
RUNNING, STOPPED = "Running", "Stopped"
DESIRED_STATES = (RUNNING, STOPPED)

#: A detail value as a template writes it: ROS sends scalars, often as strings.
DetailValue = Union[str, int, float, bool]


class _Props(BaseModel):
    """Template properties: unknown keys are refused, so a typo names itself."""

    model_config = ConfigDict(extra="forbid")


class ReadinessRuleProps(_Props):
    """`{Type, Name, Enabled, Details}`; Type is checked (case-insensitively) by validation."""

    Type: str
    Name: Optional[str] = None
    Enabled: bool = True
    Details: dict[str, Optional[DetailValue]] = Field(default_factory=dict)


class TagProps(_Props):
    """An ECS instance group given by tag."""

    Key: str
    Value: str = ""


class InstanceGroupProps(_Props):
    """`{Name, Instances}`; on ECS `Tag` instead of `Instances`; on CloudStack `Id`."""

    Name: Optional[str] = None
    Instances: Optional[list[str]] = None
    Tag: Optional[TagProps] = None
    Id: Optional[str] = None


class MemberProps(_Props):
    """One member: exactly one of `Instance` and `InstanceGroup`, its BootOrder and its rules."""

    Instance: Optional[str] = None
    InstanceGroup: Optional[InstanceGroupProps] = None
    BootOrder: int
    ReadinessRules: list[ReadinessRuleProps] = Field(default_factory=list)
    #: Rules attached to one instance inside a group member (group members only).
    InstanceRules: dict[str, list[ReadinessRuleProps]] = Field(default_factory=dict)


class SettingsProps(_Props):
    """The four per-group overrides; absent or negative means the default (§3)."""

    ReadinessTimeoutSeconds: Optional[float] = None
    MaxRetryAttempts: Optional[int] = None
    InitialDelaySeconds: Optional[float] = None
    RebootOnRetry: Optional[bool] = None


class CloudStackProps(_Props):
    """Where the cloudstack backend calls, each key defaulting to the variable `cs` reads
    (CLOUDSTACK_ENDPOINT, _KEY, _SECRET, _METHOD, _TIMEOUT). Secret is masked in every Reason and
    log line; prefer the environment (or a ROS NoEcho parameter) to a literal in the template."""

    Endpoint: Optional[str] = None
    Key: Optional[str] = None
    Secret: Optional[SecretStr] = None
    Method: Optional[str] = None
    Timeout: Optional[int] = None

    def given(self) -> dict[str, str]:
        """The keys set here, as `CloudStackConfig.resolve` takes them (the Secret in plain text)."""
        values = {"Endpoint": self.Endpoint, "Key": self.Key, "Method": self.Method,
                  "Secret": self.Secret.get_secret_value() if self.Secret is not None else None,
                  "Timeout": str(self.Timeout) if self.Timeout is not None else None}
        return {name: value for name, value in values.items() if value not in (None, "")}


class EcsProps(_Props):
    """Where the ecs backend calls: `Endpoint` (host:port or an http(s) URL; default the region's
    ECS endpoint, or CRHELPER_ECS_ENDPOINT) and `Region` (default the request's RegionId). No
    credentials here: they come from the function's context (STS) or the environment."""

    Endpoint: Optional[str] = None
    Region: Optional[str] = None


class InstanceBootGroupProps(_Props):
    """`Custom::InstanceBootGroup` ResourceProperties (issue 12)."""

    Name: str
    Description: str = ""
    #: local | ecs | cloudstack; None: CRHELPER_BOOTGROUP_BACKEND, else local.
    Backend: Optional[str] = None
    Members: list[MemberProps] = Field(default_factory=list)
    Settings: SettingsProps = Field(default_factory=SettingsProps)
    DesiredState: str = RUNNING
    #: Changing it reboots the group (stop, then start).
    RebootToken: Optional[str] = None
    Forced: bool = False
    StopOnDelete: bool = False
    #: Connection of the cloudstack backend (else the CLOUDSTACK_* variables).
    CloudStack: Optional[CloudStackProps] = None
    #: Endpoint and region of the ecs backend (else the request's region and the defaults).
    Ecs: Optional[EcsProps] = None


class LocalInstanceProps(_Props):
    """`Custom::LocalInstance`: a process the local backend starts and stops as an instance."""

    #: An argv list, or a string run by the shell.
    Command: Union[list[str], str]
    WorkingDirectory: Optional[str] = None
    Environment: dict[str, str] = Field(default_factory=dict)
    Host: str = "127.0.0.1"
    Ports: list[int] = Field(default_factory=list)
    #: The instance runs the tiny guest agent and counts as KVM (GuestAgentLiveness allowed).
    GuestAgent: bool = False


# --- the normalised plan ------------------------------------------------------------------------


@dataclasses.dataclass
class RuleSpec:
    """One enabled-or-not rule, normalised: canonical type, generated name, documented detail keys.
    `id` (`<item>/<name>`) is unique in the group and keys the result cache with the VM."""

    id: str
    type: str
    name: str
    enabled: bool
    item_type: str
    item: str
    details: dict[str, str] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        """`PortCheck 'db-port' (port 5432)`: how reasons and timelines name a rule."""
        extra = ""
        if self.type == PORT_CHECK:
            extra = f" (port {self.details.get(PORT, '?')})"
        elif self.type == QUORUM:
            extra = f" ({self.details.get(THRESHOLD_TYPE, '?')} {self.details.get(THRESHOLD_VALUE, '?')})"
        return f"{self.type} {self.name!r}{extra}"


@dataclasses.dataclass
class GroupRef:
    """How a backend finds an instance group's VMs when an operation runs (§1)."""

    name: str | None = None
    instances: list[str] | None = None
    tag_key: str | None = None
    tag_value: str | None = None
    id: str | None = None


@dataclasses.dataclass
class MemberSpec:
    """A member: `key` is the instance id, or the group's Name (else its Id); `rules` are its own
    (for a group: inherited by its instances, and MemberQuorum); `instance_rules` are direct rules
    of instances inside a group member."""

    key: str
    kind: str
    order: int
    rules: list[RuleSpec] = dataclasses.field(default_factory=list)
    instance_rules: dict[str, list[RuleSpec]] = dataclasses.field(default_factory=dict)
    group: GroupRef | None = None

    def describe(self) -> str:
        return f"{'Instance' if self.kind == VIRTUAL_MACHINE else 'InstanceGroup'} {self.key!r}"

    def inherited_rules(self) -> list[RuleSpec]:
        """The enabled rules the group's instances inherit (§2.2)."""
        return [rule for rule in self.rules if rule.enabled and rule.type in INHERITED_TYPES]

    def quorum_rule(self) -> RuleSpec | None:
        return next((rule for rule in self.rules if rule.enabled and rule.type == QUORUM), None)

    def direct_rules_of(self, vm: str) -> list[RuleSpec]:
        """The enabled rules attached to `vm` itself: a VM member's own, or its InstanceRules entry."""
        own = self.rules if self.kind == VIRTUAL_MACHINE else self.instance_rules.get(vm, [])
        return [rule for rule in own if rule.enabled]


def tiers_of(members: list[MemberSpec], *, descending: bool = False) -> list[tuple[int, list[MemberSpec]]]:
    """Members grouped by BootOrder (equal orders form one tier), in member order inside a tier."""
    grouped: dict[int, list[MemberSpec]] = {}
    for member in members:
        grouped.setdefault(member.order, []).append(member)
    return [(order, grouped[order]) for order in sorted(grouped, reverse=descending)]

