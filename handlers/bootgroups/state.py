"""The boot-group provider's own state, which never expires (unlike the idempotency records): the
groups (members, rules, settings, the readiness cache, the last power changes, the run in progress
or the last one), their events, the membership claims that keep one boot group per instance and per
instance group across stacks, and the local instances' definitions.

`GroupStore` is what the provider and the CLI need; `SqliteGroupStore` keeps it in
`$CRHELPER_HOME/bootgroups/state.sqlite` (WAL, a busy timeout, every check-then-write in one
`BEGIN IMMEDIATE` transaction, so several processes of one home share it safely);
`state_s3.S3GroupStore` keeps it under an OSS prefix for deployed providers (create-only writes).
`open_group_store` picks one from `CRHELPER_BOOTGROUP_STORE`.

Names and claims are per owner (issue 12): the `$CRHELPER_HOME` for the local backend
(`local_owner`), the account of the credentials for ECS and CloudStack (`backend_for.owner_of`).
A group's writes (`create_group`, `reclaim`) count against `record.owner`, else the store's
`owner`; the reads `claims`, `names` and `find_group` answer for the store's owner
(`store.for_owner(other)` is the same state seen by another); groups, events and instances are
found by id whoever owns them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator, Mapping, Sequence

from crhelper.operations.codec import dump
from crhelper.paths import state_dir
from crhelper.sqlite_files import immediate, opened, use_wal

from .events import Event
from .records import (  # re-exported: the provider, the CLI and tests import them from here
    ACTIVE, CREATING, FAILED_CREATE, MAX_EVENTS, STATE_DIR, STORE_ENV, GroupRecord, GroupStore, InstanceRecord,
    StateConflict, describe_item, group_from_json, instance_from_json, local_owner,
)

DB_NAME = "state.sqlite"
#: Seconds a writer waits for another process's transaction before giving up.
BUSY_SECONDS = 30.0

__all__ = [
    "ACTIVE", "BUSY_SECONDS", "CREATING", "DB_NAME", "FAILED_CREATE", "MAX_EVENTS", "STATE_DIR", "STORE_ENV",
    "GroupRecord", "GroupStore", "InstanceRecord", "SqliteGroupStore", "StateConflict", "default_path",
    "describe_item", "group_from_json", "instance_from_json", "local_owner", "open_group_store",
]


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

    def __init__(self, path: str | Path | None = None, *, owner: str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.owner = owner or local_owner()
        with self._read() as conn:
            use_wal(conn)
            conn.executescript(SCHEMA)

    def for_owner(self, owner: str) -> "SqliteGroupStore":
        view = copy.copy(self)
        view.owner = owner
        return view

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._read() as conn, immediate(conn):
            yield conn

    def _read(self) -> ContextManager[sqlite3.Connection]:
        return opened(self.path, busy_seconds=BUSY_SECONDS)

    # --- groups --------------------------------------------------------------------------------
    def _check_name(self, conn: sqlite3.Connection, record: GroupRecord) -> None:
        row = conn.execute("SELECT group_id FROM groups WHERE owner = ? AND name = ? AND group_id != ?",
                           (record.owner, record.name, record.group_id)).fetchone()
        if row is not None:
            raise StateConflict(f"another boot group of this owner is already named {record.name!r} "
                                f"({row[0]}; a Name is unique per owner)", "Name")

    def _claim(self, conn: sqlite3.Connection, owner: str, group_id: str, items: Mapping[str, str]) -> None:
        for item, path in items.items():
            row = conn.execute("SELECT c.group_id, g.name FROM claims c LEFT JOIN groups g ON g.group_id = c.group_id "
                               "WHERE c.owner = ? AND c.item = ?", (owner, item)).fetchone()
            if row is not None and row[0] != group_id:
                raise StateConflict(f"{describe_item(item)} is already a member of boot group {row[1] or row[0]!r} "
                                    "(one boot group per instance or instance group)", path)
        conn.execute("DELETE FROM claims WHERE group_id = ?", (group_id,))
        conn.executemany("INSERT INTO claims (owner, item, group_id) VALUES (?, ?, ?)",
                         [(owner, item, group_id) for item in items])

    def _write(self, conn: sqlite3.Connection, record: GroupRecord) -> None:
        record.owner = record.owner or self.owner
        record.updated = time.time()
        conn.execute("INSERT INTO groups (group_id, owner, name, doc) VALUES (?, ?, ?, ?) "
                     "ON CONFLICT (group_id) DO UPDATE SET name = excluded.name, doc = excluded.doc",
                     (record.group_id, record.owner, record.name, json.dumps(dump(record))))

    def create_group(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        with self._tx() as conn:
            if conn.execute("SELECT 1 FROM groups WHERE group_id = ?", (record.group_id,)).fetchone():
                raise StateConflict(f"boot group {record.group_id} exists already")
            record.owner = record.owner or self.owner
            self._check_name(conn, record)
            self._claim(conn, record.owner, record.group_id, items)
            record.created = record.created or time.time()
            self._write(conn, record)

    def get_group(self, group_id: str) -> GroupRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM groups WHERE group_id = ?", (group_id,)).fetchone()
        return group_from_json(json.loads(row[0])) if row else None

    def find_group(self, name: str) -> GroupRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT doc FROM groups WHERE name = ? AND owner = ?", (name, self.owner)).fetchone()
            others = conn.execute("SELECT doc FROM groups WHERE name = ? LIMIT 2", (name,)).fetchall() if row is None else []
        if row is not None:
            return group_from_json(json.loads(row[0]))
        return group_from_json(json.loads(others[0][0])) if len(others) == 1 else None

    def list_groups(self) -> list[GroupRecord]:
        with self._read() as conn:
            rows = conn.execute("SELECT doc FROM groups ORDER BY name, group_id").fetchall()
        return [group_from_json(json.loads(row[0])) for row in rows]

    def save_group(self, record: GroupRecord) -> None:
        """A removed group is not brought back by a late save (a checkpoint of a run still going when
        the stack deleted it): it would hold no claims."""
        with self._tx() as conn:
            record.owner = record.owner or self.owner
            record.updated = time.time()
            conn.execute("UPDATE groups SET name = ?, doc = ? WHERE group_id = ?",
                         (record.name, json.dumps(dump(record)), record.group_id))

    def save_group_if(self, record: GroupRecord, *, run_id: str, updated: float | None = None) -> bool:
        """The compare and the write in one `BEGIN IMMEDIATE` (no other writer in between)."""
        with self._tx() as conn:
            row = conn.execute("SELECT doc FROM groups WHERE group_id = ?", (record.group_id,)).fetchone()
            if row is None:
                return False
            stored = json.loads(row[0])
            if stored.get("run_id", "") != run_id or (updated is not None and stored.get("updated") != updated):
                return False
            record.owner = record.owner or self.owner
            record.updated = time.time()
            conn.execute("UPDATE groups SET name = ?, doc = ? WHERE group_id = ?",
                         (record.name, json.dumps(dump(record)), record.group_id))
        return True

    def reclaim(self, record: GroupRecord, items: Mapping[str, str]) -> None:
        with self._tx() as conn:
            record.owner = record.owner or self.owner
            self._check_name(conn, record)
            self._claim(conn, record.owner, record.group_id, items)
            self._write(conn, record)

    def remove_group(self, group_id: str) -> None:
        with self._tx() as conn:
            conn.execute("DELETE FROM claims WHERE group_id = ?", (group_id,))
            conn.execute("DELETE FROM groups WHERE group_id = ?", (group_id,))

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




def open_group_store(url: str | None = None, env: Mapping[str, str] | None = None) -> GroupStore:
    """The store `url` (`CRHELPER_BOOTGROUP_STORE`) names: None/"" (the file under the home),
    `sqlite:///<absolute path>`, or `s3://<bucket>/<prefix>?endpoint=…&region=…` (the OSS store,
    parsed like CRHELPER_STORE). ValueError names the setting and the rule, never the query."""
    if not url:
        return SqliteGroupStore(default_path(env), owner=local_owner(env))
    if url.startswith("sqlite:///"):
        return SqliteGroupStore(url[len("sqlite://"):], owner=local_owner(env))
    if url.startswith("s3://"):
        from .state_s3 import open_s3_group_store  # boto3 loads only for this store

        return open_s3_group_store(url, env, owner=local_owner(env))
    shown = url if "?" not in url else url.split("?", 1)[0] + "?…"
    raise ValueError(f"{STORE_ENV}: {shown!r} is not sqlite:///<absolute path> or s3://<bucket>/<prefix>?endpoint=…")
