"""SQLite store: the embedded default, safe for several processes on one machine.

WAL lets readers run beside one writer; ``busy_timeout`` makes a writer wait for the lock instead
of failing; every read-decide-write runs inside ``BEGIN IMMEDIATE`` so the write lock is taken
before the read and two processes can never both decide they won. Do not put the file on a network
file system: SQLite's locking is only reliable on a local disk.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

from ..sqlite_files import WalBusy, use_wal
from . import transitions
from .budget import seconds_left
from .base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_TTL_SECONDS,
    ClaimResult,
    Continuation,
    IdempotencyKey,
    IdempotencyRecord,
    RecordState,
    StoreConflict,
    StoreError,
)

MEMORY = ":memory:"
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (
    stack_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    logical_resource_id TEXT NOT NULL,
    state TEXT NOT NULL,
    owner TEXT NOT NULL,
    lease_expires_at REAL NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    version INTEGER NOT NULL,
    response TEXT,
    response_urls TEXT NOT NULL,
    PRIMARY KEY (stack_id, request_id, logical_resource_id)
);
CREATE INDEX IF NOT EXISTS idempotency_expires ON idempotency (expires_at);
CREATE TABLE IF NOT EXISTS continuations (
    id TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    state TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_at REAL NOT NULL,
    deadline REAL NOT NULL,
    next_run_at REAL NOT NULL,
    version INTEGER NOT NULL,
    holder TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS continuations_due ON continuations (next_run_at);
"""

#: Every table and index `_SCHEMA` creates: all present means nothing to create.
_SCHEMA_NAMES = ("idempotency", "idempotency_expires", "continuations", "continuations_due")

_KEY_WHERE = "stack_id = ? AND request_id = ? AND logical_resource_id = ?"


def _key_params(key: IdempotencyKey) -> tuple[str, str, str]:
    return (key.stack_id, key.request_id, key.logical_resource_id)


def _record_from_row(row: sqlite3.Row) -> IdempotencyRecord:
    return IdempotencyRecord(
        key=IdempotencyKey(row["stack_id"], row["request_id"], row["logical_resource_id"]),
        state=RecordState(row["state"]),
        owner=row["owner"],
        lease_expires_at=row["lease_expires_at"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        version=row["version"],
        response=None if row["response"] is None else json.loads(row["response"]),
        response_urls=json.loads(row["response_urls"]),
    )


def _continuation_from_row(row: sqlite3.Row) -> Continuation:
    return Continuation(
        id=row["id"],
        request=json.loads(row["request"]),
        state=json.loads(row["state"]),
        attempt=row["attempt"],
        started_at=row["started_at"],
        deadline=row["deadline"],
        next_run_at=row["next_run_at"],
        version=row["version"],
        holder=row["holder"],
    )


def _continuation_values(c: Continuation, version: int) -> tuple[object, ...]:
    """The columns request, state, attempt, started_at, deadline, next_run_at, version, holder."""
    return (json.dumps(c.request), json.dumps(c.state), c.attempt, c.started_at, c.deadline, c.next_run_at,
            version, c.holder)


#: Steps of the busy timeout under a deadline: the wait left shrinks every millisecond, and a
#: PRAGMA per transaction would cost a statement (and a GIL handoff) on every store call.
_BUSY_STEP_MS = 250


def _busy_ms_for(wait_ms: int, current_ms: int) -> int:
    """The busy timeout to use when `wait_ms` may be waited (pure): the current one while it is
    within the wait and less than a step below it, else the wait rounded down to a step."""
    if current_ms <= wait_ms < current_ms + _BUSY_STEP_MS or wait_ms == current_ms:
        return current_ms
    return wait_ms if wait_ms < _BUSY_STEP_MS else wait_ms - wait_ms % _BUSY_STEP_MS


class SqliteStore(transitions.AppliedTransitions):
    """`Store` on one SQLite file (or a private in-memory database for tests)."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._lock = threading.RLock()
        if path != MEMORY:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        wait = seconds_left(BUSY_TIMEOUT_MS / 1000)
        try:
            self._conn = sqlite3.connect(
                path,
                timeout=wait,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"CRHELPER_STORE sqlite file cannot be opened: {exc}") from None
        self._conn.row_factory = sqlite3.Row
        self._busy_ms = int(wait * 1000)
        self._conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        if path != MEMORY:
            self._use_wal(wait)
            self._conn.execute("PRAGMA synchronous = NORMAL")
        if not self._schema_present():
            self._create_schema()

    def _schema_present(self) -> bool:
        """A plain read: every open after the first finds the schema and takes no write lock."""
        names = {row[0] for row in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, ?, ?, ?)", _SCHEMA_NAMES)}
        if names != set(_SCHEMA_NAMES):
            return False
        return any(row["name"] == "holder" for row in self._conn.execute("PRAGMA table_info(continuations)"))

    def _create_schema(self) -> None:
        """CREATE ... IF NOT EXISTS under the write lock: safe when several processes open a new file at once."""
        with self._transaction() as conn:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            columns = {row["name"] for row in conn.execute("PRAGMA table_info(continuations)")}
            if "holder" not in columns:  # a file written by an earlier version
                conn.execute("ALTER TABLE continuations ADD COLUMN holder TEXT NOT NULL DEFAULT ''")

    def _use_wal(self, wait: float) -> None:
        """Switch the file to WAL, retrying until `wait` runs out. SQLite answers this pragma
        SQLITE_BUSY at once, without its busy handler, while another connection recovers the WAL
        of a process that died mid-write (a SIGKILLed worker): that is seconds of waiting, not an
        unusable store."""
        try:
            use_wal(self._conn, wait)
        except WalBusy as exc:
            self._conn.close()
            raise StoreError(f"state store busy: {exc}") from None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock before reading, so read-decide-write is atomic. The
        wait for the lock is bounded by the caller's deadline (`store.budget`)."""
        wait = seconds_left(BUSY_TIMEOUT_MS / 1000)
        if not self._lock.acquire(timeout=max(wait, 0.001)):
            raise StoreError(f"state store busy: the SQLite store stayed in use by this process for {wait:.1f} s")
        try:
            wait_ms = _busy_ms_for(int(wait * 1000), self._busy_ms)
            if wait_ms != self._busy_ms:  # a statement per transaction otherwise, on the warm path
                self._conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
                self._busy_ms = wait_ms
            began = time.monotonic()
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                waited = time.monotonic() - began
                raise StoreError(f"state store busy: the SQLite file stayed locked for {waited:.1f} s "
                                 f"(waited up to {wait:.1f} s: {exc})") from None
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        finally:
            self._lock.release()

    # -- idempotency records -------------------------------------------------------------

    def _read(self, conn: sqlite3.Connection, key: IdempotencyKey) -> IdempotencyRecord | None:
        row = conn.execute(
            f"SELECT * FROM idempotency WHERE {_KEY_WHERE}", _key_params(key)
        ).fetchone()
        return None if row is None else _record_from_row(row)

    def _write(
        self,
        conn: sqlite3.Connection,
        current: IdempotencyRecord | None,
        new: IdempotencyRecord,
    ) -> None:
        values = (
            new.state.value,
            new.owner,
            new.lease_expires_at,
            new.created_at,
            new.expires_at,
            new.version,
            None if new.response is None else json.dumps(new.response),
            json.dumps(new.response_urls),
        )
        if current is None:
            conn.execute(
                "INSERT INTO idempotency (stack_id, request_id, logical_resource_id, state, owner,"
                " lease_expires_at, created_at, expires_at, version, response, response_urls)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _key_params(new.key) + values,
            )
            return
        cursor = conn.execute(
            "UPDATE idempotency SET state = ?, owner = ?, lease_expires_at = ?, created_at = ?,"
            " expires_at = ?, version = ?, response = ?, response_urls = ?"
            f" WHERE {_KEY_WHERE} AND version = ?",
            values + _key_params(new.key) + (current.version,),
        )
        if cursor.rowcount != 1:
            raise StoreError("idempotency record changed inside an immediate transaction")

    def claim(
        self,
        key: IdempotencyKey,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        response_urls: Mapping[str, str] | None = None,
    ) -> ClaimResult:
        with self._transaction() as conn:
            current = self._read(conn, key)
            result, to_write = transitions.decide_claim(
                current, key, owner, self._clock(), lease_seconds, ttl_seconds, response_urls
            )
            if to_write is not None:
                self._write(conn, current, to_write)
            return result

    def claim_with_continuation(
        self,
        key: IdempotencyKey,
        continuation: Continuation,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> ClaimResult:
        try:
            with self._transaction() as conn:
                current = self._read(conn, key)
                result, to_write = transitions.decide_claim(
                    current, key, continuation.id, self._clock(), lease_seconds, ttl_seconds, None
                )
                if to_write is not None:
                    self._write(conn, current, to_write)
                if result.owns:
                    self._insert_continuation(conn, continuation)
                return result
        except sqlite3.IntegrityError:  # rolled back: the claim is not kept either
            raise StoreConflict("continuation id already exists") from None

    def mark_delivered_and_delete(self, key: IdempotencyKey, owner: str, continuation_id: str) -> bool:
        with self._transaction() as conn:
            current = self._read(conn, key)
            new = transitions.delivered(current, owner, self._clock())
            if new is not None:
                self._write(conn, current, new)
            conn.execute("DELETE FROM continuations WHERE id = ?", (continuation_id,))
            return new is not None

    def _apply(self, key: IdempotencyKey, step: transitions.Step) -> bool:
        """Read, decide with a pure transition, write: one immediate transaction; False if it refuses."""
        with self._transaction() as conn:
            current = self._read(conn, key)
            new = step(current, self._clock())
            if new is None:
                return False
            self._write(conn, current, new)
            return True

    def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        with self._lock:
            record = self._read(self._conn, key)
        if record is None or record.is_expired(self._clock()):
            return None
        return record

    def release(self, key: IdempotencyKey, owner: str) -> bool:
        with self._transaction() as conn:
            current = self._read(conn, key)
            if current is None or not transitions.may_release(current, owner, self._clock()):
                return False
            conn.execute(
                f"DELETE FROM idempotency WHERE {_KEY_WHERE} AND version = ?",
                _key_params(key) + (current.version,),
            )
            return True

    def purge_expired(self) -> int:
        with self._transaction() as conn:
            cursor = conn.execute(
                "DELETE FROM idempotency WHERE expires_at <= ?", (self._clock(),)
            )
            return cursor.rowcount

    # -- continuations -------------------------------------------------------------------

    @staticmethod
    def _insert_continuation(conn: sqlite3.Connection, c: Continuation) -> None:
        conn.execute(
            "INSERT INTO continuations (request, state, attempt, started_at, deadline,"
            " next_run_at, version, holder, id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _continuation_values(c, c.version) + (c.id,),
        )

    def put_continuation(self, continuation: Continuation) -> None:
        try:
            with self._transaction() as conn:
                self._insert_continuation(conn, continuation)
        except sqlite3.IntegrityError:
            raise StoreConflict("continuation id already exists") from None

    def get_continuation(self, continuation_id: str) -> Continuation | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM continuations WHERE id = ?", (continuation_id,)
            ).fetchone()
        return None if row is None else _continuation_from_row(row)

    def update_continuation(self, continuation: Continuation, expected_version: int) -> bool:
        c = continuation
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE continuations SET request = ?, state = ?, attempt = ?, started_at = ?,"
                " deadline = ?, next_run_at = ?, version = ?, holder = ? WHERE id = ? AND version = ?",
                _continuation_values(c, expected_version + 1) + (c.id, expected_version),
            )
            return cursor.rowcount == 1

    def delete_continuation(self, continuation_id: str) -> bool:
        with self._transaction() as conn:
            cursor = conn.execute("DELETE FROM continuations WHERE id = ?", (continuation_id,))
            return cursor.rowcount == 1

    def due_continuations(self, now: float, limit: int = 100) -> list[Continuation]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM continuations WHERE next_run_at <= ?"
                " ORDER BY next_run_at, id LIMIT ?",
                (now, max(limit, 0)),
            ).fetchall()
        return [_continuation_from_row(row) for row in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
