"""The boot-group provider's own state, which never expires (unlike the idempotency records): the
groups (members, rules, settings, the readiness cache, the last power changes, the run in progress
or the last one), their events, the membership claims that keep one boot group per instance and per
instance group across stacks, and the local instances' definitions.

`GroupStore` is what the provider and the CLI need; `SqliteGroupStore` keeps it in
`$CRHELPER_HOME/bootgroups/state.sqlite` (WAL, a busy timeout, every check-then-write in one
`BEGIN IMMEDIATE` transaction, so several processes of one home share it safely);
an OSS implementation (conditional writes under a prefix) is to follow for deployed providers.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol, Sequence

from crhelper.operations.codec import dump, load
from crhelper.paths import state_dir

from .events import Event
from .model import MemberSpec
from .readiness import CacheEntry
from .settings import GroupSettings

STATE_DIR = "bootgroups"
DB_NAME = "state.sqlite"
#: Seconds a writer waits for another process's transaction before giving up.
BUSY_SECONDS = 30.0
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
    owner: str = "local"
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


class GroupStore(Protocol):
    """The provider's state for one owner (locally: one `$CRHELPER_HOME`)."""

    def create_group(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        """Store a new group and claim `items` (membership key -> the property path naming it) in
        one atomic write; StateConflict when the Name is taken or an item belongs to another group."""
        ...

    def get_group(self, group_id: str) -> GroupRecord | None: ...

    def find_group(self, name: str) -> GroupRecord | None: ...

    def list_groups(self) -> list[GroupRecord]: ...

    def save_group(self, record: GroupRecord) -> None:
        """Replace the stored group (its claims stay as they are)."""
        ...

    def reclaim(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        """Save `record` and make `items` its claims (the others it held are released), atomically;
        StateConflict when another group holds one or has taken the (new) Name."""
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


def default_path(env: Mapping[str, str] | None = None) -> Path:
    return state_dir(STATE_DIR, env, create=True) / DB_NAME


SCHEMA = """
CREATE TABLE IF NOT EXISTS groups (
    group_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS groups_name ON groups (owner, name);
CREATE TABLE IF NOT EXISTS claims (
    owner TEXT NOT NULL,
    item TEXT NOT NULL,
    group_id TEXT NOT NULL,
    PRIMARY KEY (owner, item)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_group ON events (group_id, seq);
CREATE TABLE IF NOT EXISTS instances (
    instance_id TEXT PRIMARY KEY,
    doc TEXT NOT NULL
);
"""


class SqliteGroupStore:
    """GroupStore in one SQLite file; a connection per call, so any thread or process may use it."""

    def __init__(self, path: str | Path | None = None, *, owner: str = "local") -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.owner = owner
        with self._connect() as conn:
            _wal(conn)
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
        return conn

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    # --- groups --------------------------------------------------------------------------------
    def _check_name(self, conn: sqlite3.Connection, record: GroupRecord) -> None:
        row = conn.execute("SELECT group_id FROM groups WHERE owner = ? AND name = ? AND group_id != ?",
                           (self.owner, record.name, record.group_id)).fetchone()
        if row is not None:
            raise StateConflict(f"another boot group of this owner is already named {record.name!r} "
                                f"({row[0]}; a Name is unique per owner)", "Name")

    def _claim(self, conn: sqlite3.Connection, group_id: str, items: Mapping[str, str]) -> None:
        for item, path in items.items():
            row = conn.execute("SELECT c.group_id, g.name FROM claims c LEFT JOIN groups g ON g.group_id = c.group_id "
                               "WHERE c.owner = ? AND c.item = ?", (self.owner, item)).fetchone()
            if row is not None and row[0] != group_id:
                raise StateConflict(f"{describe_item(item)} is already a member of boot group {row[1] or row[0]!r} "
                                    "(one boot group per instance or instance group)", path)
        conn.execute("DELETE FROM claims WHERE owner = ? AND group_id = ?", (self.owner, group_id))
        conn.executemany("INSERT INTO claims (owner, item, group_id) VALUES (?, ?, ?)",
                         [(self.owner, item, group_id) for item in items])

    def _write(self, conn: sqlite3.Connection, record: GroupRecord) -> None:
        record.owner = self.owner
        record.updated = time.time()
        conn.execute("INSERT INTO groups (group_id, owner, name, doc) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (group_id) DO UPDATE SET name = excluded.name, doc = excluded.doc",
                     (record.group_id, self.owner, record.name, json.dumps(dump(record))))

    def create_group(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM groups WHERE group_id = ?", (record.group_id,)).fetchone():
                raise StateConflict(f"boot group {record.group_id} exists already")
            self._check_name(conn, record)
            self._claim(conn, record.group_id, items)
            record.created = record.created or time.time()
            self._write(conn, record)

    def get_group(self, group_id: str) -> GroupRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM groups WHERE group_id = ? AND owner = ?", (group_id, self.owner)).fetchone()
        return group_from_json(json.loads(row[0])) if row else None

    def find_group(self, name: str) -> GroupRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM groups WHERE name = ? AND owner = ?", (name, self.owner)).fetchone()
        return group_from_json(json.loads(row[0])) if row else None

    def list_groups(self) -> list[GroupRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT doc FROM groups WHERE owner = ? ORDER BY name", (self.owner,)).fetchall()
        return [group_from_json(json.loads(row[0])) for row in rows]

    def save_group(self, record: GroupRecord) -> None:
        with self._tx() as conn:
            self._write(conn, record)

    def reclaim(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        with self._tx() as conn:
            self._check_name(conn, record)
            self._claim(conn, record.group_id, items)
            self._write(conn, record)

    def remove_group(self, group_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM claims WHERE owner = ? AND group_id = ?", (self.owner, group_id))
            conn.execute("DELETE FROM groups WHERE owner = ? AND group_id = ?", (self.owner, group_id))

    def claims(self, items: Sequence[str], *, besides: str = "") -> dict[str, str]:
        found: dict[str, str] = {}
        with self._read() as conn:
            for item in items:
                row = conn.execute("SELECT c.group_id, g.name FROM claims c LEFT JOIN groups g ON g.group_id = c.group_id "
                                   "WHERE c.owner = ? AND c.item = ?", (self.owner, item)).fetchone()
                if row is not None and row[0] != besides:
                    found[item] = row[1] or row[0]
        return found

    def names(self, *, besides: str = "") -> list[str]:
        with self._read() as conn:
            rows = conn.execute("SELECT name FROM groups WHERE owner = ? AND group_id != ?", (self.owner, besides)).fetchall()
        return [row[0] for row in rows]

    # --- events --------------------------------------------------------------------------------
    def append_events(self, group_id: str, events: Sequence[Event]) -> None:
        if not events:
            return
        with self._tx() as conn:
            conn.executemany("INSERT INTO events (group_id, doc) VALUES (?, ?)",
                             [(group_id, json.dumps(dataclasses.asdict(event))) for event in events])
            conn.execute("DELETE FROM events WHERE group_id = ? AND seq NOT IN "
                         "(SELECT seq FROM events WHERE group_id = ? ORDER BY seq DESC LIMIT ?)",
                         (group_id, group_id, MAX_EVENTS))

    def events(self, group_id: str, limit: int = MAX_EVENTS) -> list[Event]:
        with self._read() as conn:
            rows = conn.execute("SELECT doc FROM (SELECT seq, doc FROM events WHERE group_id = ? ORDER BY seq DESC LIMIT ?) "
                                "ORDER BY seq", (group_id, limit)).fetchall()
        return [Event(**json.loads(row[0])) for row in rows]

    # --- local instances -----------------------------------------------------------------------
    def put_instance(self, record: InstanceRecord) -> None:
        record.created = record.created or time.time()
        with self._tx() as conn:
            conn.execute("INSERT INTO instances (instance_id, doc) VALUES (?, ?) ON CONFLICT (instance_id) "
                         "DO UPDATE SET doc = excluded.doc", (record.instance_id, json.dumps(dump(record))))

    def get_instance(self, instance_id: str) -> InstanceRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM instances WHERE instance_id = ?", (instance_id,)).fetchone()
        return instance_from_json(json.loads(row[0])) if row else None

    def delete_instance(self, instance_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM instances WHERE instance_id = ?", (instance_id,))

    def list_instances(self) -> list[InstanceRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT doc FROM instances ORDER BY instance_id").fetchall()
        return [instance_from_json(json.loads(row[0])) for row in rows]


def _wal(conn: sqlite3.Connection, wait: float = BUSY_SECONDS) -> None:
    """WAL, retried: SQLite answers the pragma SQLITE_BUSY at once while another connection recovers."""
    deadline = time.monotonic() + wait
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def describe_item(item: str) -> str:
    """`instance:i-1` -> `instance 'i-1'`; `group:web` -> `instance group 'web'`."""
    kind, _, key = item.partition(":")
    return f"instance group {key!r}" if kind == "group" else f"instance {key!r}"


def open_store(url: str | None = None, env: Mapping[str, str] | None = None) -> GroupStore:
    """The store `url` names: None/"" (the default file) or `sqlite:///path`."""
    if not url:
        return SqliteGroupStore(default_path(env))
    if url.startswith("sqlite:///"):
        return SqliteGroupStore(url[len("sqlite://"):])
    raise ValueError(f"CRHELPER_BOOTGROUP_STORE: {url!r} is not sqlite:///<absolute path> (the OSS store is not built yet)")
