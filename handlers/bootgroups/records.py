"""The boot-group provider's state records and the store Protocol, shared by the SQLite store
(`state.py`) and the OSS one (`state_s3.py`): what a group, a local instance and a claim are, and
the rules a write can break (`StateConflict`). No I/O here."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, Sequence

from crhelper.operations.codec import load
from crhelper.paths import home

from .events import Event
from .model import MemberSpec
from .readiness import CacheEntry
from .settings import GroupSettings

STATE_DIR = "bootgroups"
#: The setting naming the store: `sqlite:///<path>` or `s3://<bucket>/<prefix>?endpoint=…&region=…`.
STORE_ENV = "CRHELPER_BOOTGROUP_STORE"
#: Events kept per group (the oldest go first).
MAX_EVENTS = 1000

# Group statuses.
CREATING, ACTIVE, FAILED_CREATE = "Creating", "Active", "CreateFailed"


class StateConflict(Exception):
    """A write refused by a rule of the state: a Name taken, or an item another group holds.
    `path` is the property the caller should name (e.g. `Members[1].Instance`)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


@dataclasses.dataclass
class GroupRecord:
    """One boot group as stored. `run` is the engine's BootRun as JSON (dump_run) while an
    operation runs and after it (the last one), `run_id` names the request step that owns it."""

    group_id: str
    name: str
    #: Whose names and claims the group counts against (set by create_group from the store's owner).
    owner: str = ""
    stack_id: str = ""
    logical_id: str = ""
    request_id: str = ""
    backend: str = "local"
    description: str = ""
    members: list[MemberSpec] = dataclasses.field(default_factory=list)
    settings: GroupSettings = dataclasses.field(default_factory=GroupSettings)
    desired_state: str = "Running"
    reboot_token: str | None = None
    forced: bool = False
    stop_on_delete: bool = False
    status: str = CREATING
    cache: dict[str, CacheEntry] = dataclasses.field(default_factory=dict)
    power_changes: dict[str, float] = dataclasses.field(default_factory=dict)
    run: Any = None
    run_id: str = ""
    #: What the last finished run came to: {"Operation", "Ok", "Reason", "Tiers", "Readiness", "Ended"}.
    last_result: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Times a step took over a run another process had left unfinished (a crash, a redelivery).
    resumed: int = 0
    created: float = 0.0
    updated: float = 0.0


@dataclasses.dataclass
class InstanceRecord:
    """A `Custom::LocalInstance`: what to run and where it listens. `owner` labels its processes
    in the supervisor (`<stack id>/<logical id>`, so `crhelper stack delete` stops leftovers)."""

    instance_id: str
    #: The program and its arguments, or (with `shell`) one string run by /bin/sh -c.
    argv: list[str]
    shell: bool = False
    owner: str = ""
    cwd: str = ""
    environment: dict[str, str] = dataclasses.field(default_factory=dict)
    host: str = "127.0.0.1"
    ports: list[int] = dataclasses.field(default_factory=list)
    guest_agent: bool = False
    #: The abstract Unix socket the guest agent answers on ("" without an agent).
    agent_address: str = ""
    stack_id: str = ""
    logical_id: str = ""
    created: float = 0.0


def group_from_json(raw: Any) -> GroupRecord:
    loaded: GroupRecord = load(GroupRecord, raw)
    return loaded


def instance_from_json(raw: Any) -> InstanceRecord:
    loaded: InstanceRecord = load(InstanceRecord, raw)
    return loaded


def local_owner(env: Mapping[str, str] | None = None) -> str:
    """The owner of local-backend groups: the `$CRHELPER_HOME` path (two homes sharing one store
    do not share names or claims: their `Custom::LocalInstance`s are different processes)."""
    return str(home(env))


class GroupStore(Protocol):
    """The provider's state as one owner sees it: names and claims are that owner's; groups,
    events and instances are found by id."""

    #: The owner whose names and claims `create_group`, `reclaim`, `claims`, `names` and `find_group` use.
    owner: str

    def for_owner(self, owner: str) -> "GroupStore":
        """The same state, with `owner`'s names and claims."""
        ...

    def create_group(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        """Store a new group and claim `items` (membership key -> the property path naming it) in
        one atomic write, for `record.owner` (set to the store's owner when empty); StateConflict
        when the Name is taken or an item belongs to another group of that owner."""
        ...

    def get_group(self, group_id: str) -> GroupRecord | None: ...

    def find_group(self, name: str) -> GroupRecord | None:
        """This owner's group named `name`, else the one group of that name in the store (None
        when no owner has one, or several do: then ask by id)."""
        ...

    def list_groups(self) -> list[GroupRecord]:
        """Every group in the store (all owners), by name."""
        ...

    def save_group(self, record: GroupRecord) -> None:
        """Replace the stored group (its claims and owner stay as they are)."""
        ...

    def save_group_if(self, record: GroupRecord, *, run_id: str, updated: float | None = None) -> bool:
        """Replace the stored group only if its `run_id` (and, given, its `updated`) are still
        these, in one atomic compare-and-set: the take-over of a run by `crhelper bootgroups start`
        and its checkpoints while a stack step may take the group at any moment. False, writing
        nothing, when the group is gone or another run (or a newer save) holds it."""
        ...

    def reclaim(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        """Save `record` and make `items` its claims (the others it held are released), atomically,
        for `record.owner` as create_group; StateConflict when another group of that owner holds one
        or has taken the (new) Name."""
        ...

    def remove_group(self, group_id: str) -> None:
        """Forget the group and release its claims (its events stay readable by group id)."""
        ...

    def claims(self, items: Sequence[str], *, besides: str = "") -> dict[str, str]:
        """Membership key -> the name of the group holding it, for groups other than `besides`."""
        ...

    def names(self, *, besides: str = "") -> list[str]: ...

    def append_events(self, group_id: str, events: Sequence[Event]) -> None: ...

    def events(self, group_id: str, limit: int = MAX_EVENTS) -> list[Event]: ...

    def put_instance(self, record: InstanceRecord) -> None: ...

    def get_instance(self, instance_id: str) -> InstanceRecord | None: ...

    def delete_instance(self, instance_id: str) -> None: ...

    def list_instances(self) -> list[InstanceRecord]: ...


def describe_item(item: str) -> str:
    """`instance:i-1` -> `instance 'i-1'`; `group:web` -> `instance group 'web'`."""
    kind, _, key = item.partition(":")
    return f"instance group {key!r}" if kind == "group" else f"instance {key!r}"
