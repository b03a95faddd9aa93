"""Records the engine mutates and persists, and the read-only views the facade hands out."""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any

STACK_RESOURCE_TYPE = "ALIYUN::ROS::Stack"

#: Resource statuses whose physical id still exists in the provider's world.
LIVE_RESOURCE_STATUSES = frozenset(
    {"CREATE_COMPLETE", "UPDATE_IN_PROGRESS", "UPDATE_COMPLETE", "UPDATE_FAILED", "DELETE_FAILED"}
)


def utc_now() -> str:
    """ISO 8601 UTC with milliseconds, so events sort and read the same everywhere."""
    now = _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class StackEvent:
    """One status change of the stack or of a resource, in the order it happened."""

    timestamp: str
    stack_name: str
    stack_id: str
    logical_id: str
    physical_id: str | None
    resource_type: str
    status: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ResourceRecord:
    """What the emulator knows about one resource between operations.

    `properties` are those of its last successful Create or Update (what the provider applied);
    `requested` is false while no request ever reached a provider for it (its token did not
    resolve or nothing was bound to it), so deleting it sends none."""

    logical_id: str
    resource_type: str
    service_token: str
    timeout: float
    deletion_policy: str = "Delete"
    physical_id: str | None = None
    properties: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    status: str = ""
    status_reason: str = ""
    depends_on: list[str] = field(default_factory=list)
    requested: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ResourceRecord":
        return cls(**raw)


@dataclass
class StackRecord:
    """The whole persisted state of one stack (parameters hold real values; views mask NoEcho)."""

    stack_id: str
    name: str
    region: str
    account_id: str
    template_text: str
    parameters: dict[str, Any]
    no_echo: list[str]
    status: str
    status_reason: str = ""
    resources: dict[str, ResourceRecord] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    disable_rollback: bool = False
    created_at: str = field(default_factory=utc_now)
    updated_at: str = field(default_factory=utc_now)
    #: ROS Parallelism: at most this many resource requests at once; 0 (the ROS default) means no limit.
    #: Set by create or update, kept for the stack's later operations (as ROS associates it with the stack).
    parallelism: int = 0


@dataclass(frozen=True)
class ResourceDescription:
    """A resource as `describe` shows it (NoEcho values masked)."""

    logical_id: str
    resource_type: str
    physical_id: str | None
    status: str
    status_reason: str
    properties: dict[str, Any]
    data: dict[str, Any]
    depends_on: list[str]
    deletion_policy: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class OutputDescription:
    """A resolved template output."""

    key: str
    value: Any
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StackDescription:
    """A stack as `describe` shows it (NoEcho values masked)."""

    stack_id: str
    name: str
    status: str
    status_reason: str
    region: str
    parameters: dict[str, Any]
    outputs: list[OutputDescription]
    resources: list[ResourceDescription]
    created_at: str
    updated_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_values(self) -> dict[str, Any]:
        return {o.key: o.value for o in self.outputs}
