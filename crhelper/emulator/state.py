"""Persists stacks in sqlite under $CRHELPER_HOME (default ~/.crhelper, `crhelper.paths.home()`), file `stacks.sqlite`.

Every CLI invocation is a new process, so the store is the only memory the emulator has:
stack status changes rewrite the stack row and its resource rows in one transaction, resource
status changes rewrite that resource's row, and
events are appended as they happen so `events` in another process sees a running operation.
Within `deferred_writes()` (a running operation) a resource's row is committed with the event that
follows its status change, one transaction instead of two; events are never held back.
Values are stored unmasked (updates need them); the file is created readable by the owner only.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import paths
from ..sqlite_files import connect, use_wal
from .model import ResourceRecord, StackEvent, StackRecord
from ..holder import process_alive

DB_FILE = "stacks.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS stacks (
    name TEXT PRIMARY KEY,
    stack_id TEXT NOT NULL UNIQUE,
    region TEXT NOT NULL,
    account_id TEXT NOT NULL,
    template_text TEXT NOT NULL,
    parameters TEXT NOT NULL,
    no_echo TEXT NOT NULL,
    status TEXT NOT NULL,
    status_reason TEXT NOT NULL,
    outputs TEXT NOT NULL,
    disable_rollback INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    parallelism INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS resources (
    stack_id TEXT NOT NULL,
    logical_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    resource_type TEXT NOT NULL,
    physical_id TEXT,
    status TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (stack_id, logical_id)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    stack_id TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_stack ON events (stack_id, seq);
CREATE TABLE IF NOT EXISTS operations (
    name TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL
);
"""


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _resource_row(record: StackRecord, r: ResourceRecord) -> tuple[Any, ...]:
    position = list(record.resources).index(r.logical_id) if r.logical_id in record.resources else -1
    # vars(), not to_dict(): the same fields without asdict's deep copy (this runs on every status change).
    return (record.stack_id, r.logical_id, position, r.resource_type, r.physical_id, r.status, _dump(vars(r)))


_STACK_COLUMNS = ("name, stack_id, region, account_id, template_text, parameters, no_echo, status, status_reason, "
                  "outputs, disable_rollback, created_at, updated_at, parallelism")
_SAVE_RESOURCE = "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?)"
_APPEND_EVENT = "INSERT INTO events (stack_id, body) VALUES (?, ?)"


class StackStore:
    """Load, save and list stacks through one lazily opened connection (close() releases it)."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = Path(home).expanduser() if home is not None else paths.home()
        self.path = self.home / DB_FILE
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._deferring = 0
        self._pending_rows: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            self.path.touch(mode=0o600)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(stacks)")}
            if "parallelism" not in columns:  # a file written by an earlier version
                db.execute("ALTER TABLE stacks ADD COLUMN parallelism INTEGER NOT NULL DEFAULT 0")

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """One transaction on the shared connection (operations save after every event)."""
        with self._lock:
            if self._db is None:
                self._db = connect(self.path, autocommit=False, check_same_thread=False)
                use_wal(self._db)
                self._db.execute("PRAGMA synchronous=NORMAL")
            with self._db:
                yield self._db

    def close(self) -> None:
        with self._lock:
            try:
                self.flush()
            finally:
                if self._db is not None:
                    self._db.close()
                    self._db = None

    @contextmanager
    def deferred_writes(self) -> Iterator[None]:
        """Keep resource saves until the next event, `flush()` or full save (and the way out); every
        read flushes first, so nothing reads around what was kept."""
        with self._lock:
            self._deferring += 1
        try:
            yield
        finally:
            with self._lock:
                self._deferring -= 1
                self.flush()

    def flush(self) -> None:
        """Commit the kept resource rows (the latest of each) in one transaction."""
        self._commit(())

    def _commit(self, events: tuple[tuple[str, str], ...]) -> None:
        with self._lock:
            if not self._pending_rows and not events:
                return
            rows = list(self._pending_rows.values())
            self._pending_rows = {}
            with self._connect() as db:
                db.executemany(_SAVE_RESOURCE, rows)
                db.executemany(_APPEND_EVENT, events)

    def claim_operation(self, name: str) -> tuple[int, str] | None:
        """Take the stack for this process; returns the (pid, host) of a live owner instead, if any.
        An owner whose process has died on this machine is replaced (its operation was interrupted)."""
        me, host = os.getpid(), socket.gethostname()
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT pid, host FROM operations WHERE name = ?", (name,)).fetchone()
            if row is not None and (row[0], row[1]) != (me, host):
                if row[1] != host or process_alive(row[0]):
                    return int(row[0]), str(row[1])
            db.execute("INSERT OR REPLACE INTO operations (name, pid, host) VALUES (?, ?, ?)", (name, me, host))
        return None

    def operation_owner(self, name: str) -> tuple[int, str] | None:
        """The (pid, host) of the process running an operation on the stack, while it runs: one
        recorded on another machine counts as running (it cannot be checked), one of this machine
        only while its process lives."""
        with self._connect() as db:
            row = db.execute("SELECT pid, host FROM operations WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        owner = (int(row[0]), str(row[1]))
        return owner if owner[1] != socket.gethostname() or process_alive(owner[0]) else None

    def operation_live(self, name: str) -> bool:
        """Whether a process is still running an operation on the stack (see `operation_owner`)."""
        return self.operation_owner(name) is not None

    def release_operation(self, name: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM operations WHERE name = ? AND pid = ?", (name, os.getpid()))

    def save(self, record: StackRecord, resource: ResourceRecord | None = None) -> None:
        """Write the stack row and all resource rows, or with `resource` just that one row."""
        if resource is not None:
            row = _resource_row(record, resource)
            with self._lock:
                if self._deferring:
                    self._pending_rows[(record.stack_id, resource.logical_id)] = row
                    return
                with self._connect() as db:
                    db.execute(_SAVE_RESOURCE, row)
            return
        with self._lock:
            self.flush()
            self._save_all(record)

    def _save_all(self, record: StackRecord) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM stacks WHERE name = ? AND stack_id != ?", (record.name, record.stack_id))
            db.execute(
                f"INSERT OR REPLACE INTO stacks ({_STACK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.name,
                    record.stack_id,
                    record.region,
                    record.account_id,
                    record.template_text,
                    _dump(record.parameters),
                    _dump(record.no_echo),
                    record.status,
                    record.status_reason,
                    _dump(record.outputs),
                    int(record.disable_rollback),
                    record.created_at,
                    record.updated_at,
                    record.parallelism,
                ),
            )
            db.execute("DELETE FROM resources WHERE stack_id = ?", (record.stack_id,))
            db.executemany(
                "INSERT INTO resources VALUES (?, ?, ?, ?, ?, ?, ?)",
                [_resource_row(record, r) for r in record.resources.values()],
            )

    def load(self, name: str, *, with_resources: bool = True,
             resource_types: Collection[str] | None = None) -> StackRecord | None:
        """The stored stack; `with_resources=False` leaves `resources` empty (a status poll of a big
        stack then reads one row); `resource_types` keeps only resources of those types (a lookup of
        another stack's functions then parses none of its other resources)."""
        self.flush()
        with self._connect() as db:
            row = db.execute(f"SELECT {_STACK_COLUMNS} FROM stacks WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            if not with_resources:
                resources = []
            elif resource_types is None:
                resources = db.execute(
                    "SELECT body FROM resources WHERE stack_id = ? ORDER BY position", (row[1],)).fetchall()
            else:
                types = sorted(set(resource_types))
                resources = db.execute(
                    f"SELECT body FROM resources WHERE stack_id = ? AND resource_type IN ({', '.join('?' * len(types))})"
                    " ORDER BY position", (row[1], *types)).fetchall() if types else []
        record = StackRecord(
            name=row[0],
            stack_id=row[1],
            region=row[2],
            account_id=row[3],
            template_text=row[4],
            parameters=json.loads(row[5]),
            no_echo=json.loads(row[6]),
            status=row[7],
            status_reason=row[8],
            outputs=json.loads(row[9]),
            disable_rollback=bool(row[10]),
            created_at=row[11],
            updated_at=row[12],
            parallelism=int(row[13] or 0),
        )
        for (body,) in resources:
            resource = ResourceRecord.from_dict(json.loads(body))
            record.resources[resource.logical_id] = resource
        return record

    def names(self) -> list[str]:
        self.flush()
        with self._connect() as db:
            return [row[0] for row in db.execute("SELECT name FROM stacks ORDER BY created_at, name")]

    def remove(self, record: StackRecord) -> None:
        """Forget a stack and its history (used before re-creating a deleted stack's name)."""
        self.flush()
        with self._connect() as db:
            db.execute("DELETE FROM stacks WHERE stack_id = ?", (record.stack_id,))
            db.execute("DELETE FROM resources WHERE stack_id = ?", (record.stack_id,))
            db.execute("DELETE FROM events WHERE stack_id = ?", (record.stack_id,))

    def append_event(self, event: StackEvent) -> None:
        self._commit(((event.stack_id, _dump(event.to_dict())),))

    def events(self, stack_id: str) -> list[StackEvent]:
        self.flush()
        with self._connect() as db:
            rows = db.execute("SELECT body FROM events WHERE stack_id = ? ORDER BY seq", (stack_id,)).fetchall()
        return [StackEvent(**json.loads(body)) for (body,) in rows]

    def name_of(self, stack_id: str) -> tuple[str, str] | None:
        """(name, status) of the stack with this id, or None: the ROS API addresses stacks by StackId
        and polls their status without reading every resource."""
        self.flush()
        with self._connect() as db:
            row = db.execute("SELECT name, status FROM stacks WHERE stack_id = ?", (stack_id,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def events_since(self, stack_id: str, offset: int) -> list[StackEvent]:
        """The stack's events after the first `offset` (events are only appended: a reader that
        keeps what it read asks for the new ones only)."""
        self.flush()
        with self._connect() as db:
            rows = db.execute("SELECT body FROM events WHERE stack_id = ? ORDER BY seq LIMIT -1 OFFSET ?",
                              (stack_id, offset)).fetchall()
        return [StackEvent(**json.loads(body)) for (body,) in rows]
