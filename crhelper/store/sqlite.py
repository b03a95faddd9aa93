"""SQLite store: the embedded default, safe for several processes on one machine.

WAL lets readers run beside one writer; ``busy_timeout`` makes a writer wait for the lock instead
of failing; every read-decide-write runs inside ``BEGIN IMMEDIATE`` so the write lock is taken
before the read and two processes can never both decide they won. Do not put the file on a network
file system: SQLite's locking is only reliable on a local disk.

Group commit: the threads of one process share one connection, and a write that arrives while
another thread is committing waits to be carried by the next transaction, which commits every
write queued meanwhile at once (one BEGIN IMMEDIATE ... COMMIT, one lock hand-off, the touched
pages written to the WAL once). Each caller returns only after the COMMIT that carries its write;
a batch in which one write fails is rolled back and its writes run again one transaction each, so
one caller's error never touches another's write.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, TypeVar

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
#: Records remembered per store (`SqliteStore._known`) before the memory starts again empty.
_KNOWN_LIMIT = 4096


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


def _record_values(new: IdempotencyRecord) -> tuple[object, ...]:
    """The columns state, owner, lease_expires_at, created_at, expires_at, version, response, response_urls."""
    return (new.state.value, new.owner, new.lease_expires_at, new.created_at, new.expires_at, new.version,
            None if new.response is None else json.dumps(new.response), json.dumps(new.response_urls))


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


T = TypeVar("T")
Work = Callable[[sqlite3.Connection], Any]

#: Group commits a leader runs back to back while writes keep arriving, before it hands the lead on
#: (each hand-off waits for the next leader's thread to be scheduled; its own write is in the first).
_LEAD_ROUNDS = 4
#: A write whose deadline is this close is failed rather than retried when the file stays locked.
_EXPIRED_SECONDS = 0.05


class _Write:
    """One caller's read-decide-write, queued for the group commit that carries it.

    `wake` is held from creation and released exactly once: when the write is done (committed or
    failed), or earlier when the caller is handed the leadership of the next group commit."""

    __slots__ = ("work", "until", "wake", "done", "value", "error")

    def __init__(self, work: Work, until: float) -> None:
        self.work = work
        self.until = until
        self.wake = threading.Lock()
        self.wake.acquire()
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error, self.done = value, error, True
        self.wake.release()

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class SqliteStore(transitions.AppliedTransitions):
    """`Store` on one SQLite file (or a private in-memory database for tests)."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        #: The connection: held by the group commit's leader for a whole transaction, and by reads.
        self._lock = threading.RLock()
        #: Guards `_queue` and `_leading` (never held while SQLite runs).
        self._mutex = threading.Lock()
        self._queue: list[_Write] = []
        self._leading = False
        #: Transactions committed by the group commit, and the writes they carried.
        self.commits = 0
        self.writes = 0
        #: The records this store last wrote or read, by key: a hint that spares the read of a
        #: read-decide-write, checked by the write itself (`_swap`), so a stale one costs a read.
        self._known: dict[IdempotencyKey, IdempotencyRecord] = {}
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

    def _begin(self, wait: float) -> None:
        """BEGIN IMMEDIATE (the connection lock held): take the file's write lock before reading, so
        read-decide-write is atomic, waiting for another process's lock at most `wait` seconds."""
        wait_ms = _busy_ms_for(int(max(0.0, wait) * 1000), self._busy_ms)
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

    def _rollback(self) -> None:
        self._known.clear()  # hints may name writes just undone; the swaps would refuse them anyway
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One immediate transaction outside the group commit (the schema, at open). The wait for
        the lock is bounded by the caller's deadline (`store.budget`)."""
        wait = seconds_left(BUSY_TIMEOUT_MS / 1000)
        if not self._lock.acquire(timeout=max(wait, 0.001)):
            raise StoreError(f"state store busy: the SQLite store stayed in use by this process for {wait:.1f} s")
        try:
            self._begin(wait)
            try:
                yield self._conn
            except BaseException:
                self._rollback()
                raise
            self._conn.execute("COMMIT")
        finally:
            self._lock.release()

    # -- group commit ----------------------------------------------------------------------

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work(conn)` inside an immediate transaction, committed before this returns; what it
        returns or raises. Writes that arrive while a commit is running are carried together by the
        next one, led by the first of them (no writer thread: an uncontended write runs at once in
        its caller's thread). The wait is bounded by the caller's deadline (`store.budget`)."""
        wait = seconds_left(BUSY_TIMEOUT_MS / 1000)
        item = _Write(work, time.monotonic() + wait)
        with self._mutex:
            self._queue.append(item)
            lead = not self._leading
            self._leading = True
        if not lead:
            if not item.wake.acquire(timeout=max(wait, 0.001)):
                with self._mutex:
                    woken = item.wake.acquire(blocking=False)  # done or handed the lead meanwhile
                    if not woken and item in self._queue:  # no transaction took it: nothing was written
                        self._queue.remove(item)
                        raise StoreError(f"state store busy: the SQLite store stayed in use by this process "
                                         f"for {wait:.1f} s")
                if not woken:  # a transaction carries it: its outcome is what that COMMIT decides
                    item.wake.acquire()
            if item.done:
                return item.outcome()  # type: ignore[no-any-return]
        self._lead()
        return item.outcome()  # type: ignore[no-any-return]

    def _lead(self) -> None:
        """Commit every queued write (this caller's among them, in the first round), again for what
        arrived meanwhile (up to `_LEAD_ROUNDS` commits: the file is never idle while a hand-off
        waits for a thread to be scheduled), then hand the lead to the first write still queued,
        or give it up."""
        batch: list[_Write] = []
        try:
            for _ in range(_LEAD_ROUNDS):
                with self._mutex:
                    batch, self._queue = self._queue, []
                if not batch:
                    break
                with self._lock:
                    self._commit(batch)
        finally:
            for item in batch:  # only when interrupted (KeyboardInterrupt, a bug): no caller waits forever
                if not item.done:
                    item.finish(error=StoreError("state store write interrupted: the transaction carrying it "
                                                 "was rolled back unless it had committed"))
            with self._mutex:
                if self._queue:
                    self._queue[0].wake.release()  # not done: its caller leads the next commit
                else:
                    self._leading = False

    def _commit(self, batch: list[_Write]) -> None:
        """Run `batch` in one transaction and finish each write with its outcome. If the file stays
        locked, the writes whose deadline has come fail and the others try again; if a write raises,
        the transaction is rolled back and each write runs again in a transaction of its own."""
        pending = batch
        while pending:
            try:
                self._begin(min(item.until for item in pending) - time.monotonic())
            except StoreError as exc:
                now = time.monotonic()
                expired = [item for item in pending if item.until - now < _EXPIRED_SECONDS]
                expired = expired or [min(pending, key=lambda item: item.until)]
                for item in expired:
                    item.finish(error=exc)
                pending = [item for item in pending if not item.done]
                continue
            try:
                values = [item.work(self._conn) for item in pending]
                self._conn.execute("COMMIT")
            except Exception as exc:
                self._rollback()
                if len(pending) == 1:
                    pending[0].finish(error=exc)
                    return
                for item in pending:  # isolate the failing write: one transaction each
                    self._commit([item])
                return
            except BaseException:
                self._rollback()
                raise
            self.commits += 1
            self.writes += len(pending)
            for item, value in zip(pending, values):
                item.finish(value)
            return

    # -- idempotency records -------------------------------------------------------------

    def _read(self, conn: sqlite3.Connection, key: IdempotencyKey) -> IdempotencyRecord | None:
        row = conn.execute(
            f"SELECT * FROM idempotency WHERE {_KEY_WHERE}", _key_params(key)
        ).fetchone()
        return None if row is None else _record_from_row(row)

    def _remember(self, record: IdempotencyRecord) -> None:
        if len(self._known) >= _KNOWN_LIMIT:
            self._known.clear()
        self._known[record.key] = record

    def _insert_if_absent(self, conn: sqlite3.Connection, new: IdempotencyRecord) -> bool:
        """Insert a fresh record unless one exists with its key (live, done or expired): one
        statement for a claim of a new request, instead of a read and then an insert."""
        cursor = conn.execute(
            "INSERT INTO idempotency (stack_id, request_id, logical_resource_id, state, owner,"
            " lease_expires_at, created_at, expires_at, version, response, response_urls)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            _key_params(new.key) + _record_values(new),
        )
        return cursor.rowcount == 1

    def _swap(self, conn: sqlite3.Connection, assumed: IdempotencyRecord, new: IdempotencyRecord) -> bool:
        """Write `new` only if the stored record is `assumed` on every field a transition reads (state,
        owner, lease, times, version): a decision taken on a remembered record stands only if that
        record is still the stored one. False (nothing written) otherwise."""
        cursor = conn.execute(
            "UPDATE idempotency SET state = ?, owner = ?, lease_expires_at = ?, created_at = ?,"
            " expires_at = ?, version = ?, response = ?, response_urls = ?"
            f" WHERE {_KEY_WHERE} AND version = ? AND state = ? AND owner = ? AND lease_expires_at = ?"
            " AND created_at = ? AND expires_at = ?",
            _record_values(new) + _key_params(new.key) + (
                assumed.version, assumed.state.value, assumed.owner, assumed.lease_expires_at,
                assumed.created_at, assumed.expires_at),
        )
        return cursor.rowcount == 1

    def _step(self, conn: sqlite3.Connection, key: IdempotencyKey, step: transitions.Step) -> bool:
        """Read-decide-write of one record: decided on the remembered record when there is one and
        it still stands, else on the stored one. False when the transition refuses."""
        now = self._clock()
        known = self._known.get(key)
        if known is not None:
            new = step(known, now)
            if new is not None and self._swap(conn, known, new):
                self._remember(new)
                return True
        current = self._read(conn, key)
        new = step(current, now)
        if new is None:
            self._known.pop(key, None)
            return False
        self._write(conn, current, new)
        self._remember(new)
        return True

    def _write(
        self,
        conn: sqlite3.Connection,
        current: IdempotencyRecord | None,
        new: IdempotencyRecord,
    ) -> None:
        values = _record_values(new)
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
        def work(conn: sqlite3.Connection) -> ClaimResult:
            return self._claim(conn, key, owner, lease_seconds, ttl_seconds, response_urls)

        return self._run(work)

    def _claim(self, conn: sqlite3.Connection, key: IdempotencyKey, owner: str, lease_seconds: float,
               ttl_seconds: float, response_urls: Mapping[str, str] | None) -> ClaimResult:
        """The claim's read-decide-write; a new request's claim is one insert (no read)."""
        now = self._clock()
        result, fresh = transitions.decide_claim(None, key, owner, now, lease_seconds, ttl_seconds, response_urls)
        if fresh is not None and self._insert_if_absent(conn, fresh):
            self._remember(fresh)
            return result
        current = self._read(conn, key)
        result, to_write = transitions.decide_claim(
            current, key, owner, now, lease_seconds, ttl_seconds, response_urls
        )
        if to_write is not None:
            self._write(conn, current, to_write)
            self._remember(to_write)
        return result

    def claim_with_continuation(
        self,
        key: IdempotencyKey,
        continuation: Continuation,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> ClaimResult:
        def work(conn: sqlite3.Connection) -> ClaimResult:
            result = self._claim(conn, key, continuation.id, lease_seconds, ttl_seconds, None)
            if result.owns:
                self._insert_continuation(conn, continuation)
            return result

        try:
            return self._run(work)
        except sqlite3.IntegrityError:  # rolled back: the claim is not kept either
            raise StoreConflict("continuation id already exists") from None

    def mark_delivered_and_delete(self, key: IdempotencyKey, owner: str, continuation_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            marked = self._step(conn, key, lambda current, now: transitions.delivered(current, owner, now))
            conn.execute("DELETE FROM continuations WHERE id = ?", (continuation_id,))
            self._known.pop(key, None)  # the request's end: nothing more is written for it here
            return marked

        return self._run(work)

    def _apply(self, key: IdempotencyKey, step: transitions.Step) -> bool:
        """Read, decide with a pure transition, write: one immediate transaction; False if it refuses."""
        return self._run(lambda conn: self._step(conn, key, step))

    def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        with self._lock:
            record = self._read(self._conn, key)
        if record is None or record.is_expired(self._clock()):
            return None
        return record

    def release(self, key: IdempotencyKey, owner: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            current = self._read(conn, key)
            if current is None or not transitions.may_release(current, owner, self._clock()):
                return False
            conn.execute(
                f"DELETE FROM idempotency WHERE {_KEY_WHERE} AND version = ?",
                _key_params(key) + (current.version,),
            )
            self._known.pop(key, None)
            return True

        return self._run(work)

    def purge_expired(self) -> int:
        def work(conn: sqlite3.Connection) -> int:
            return conn.execute("DELETE FROM idempotency WHERE expires_at <= ?", (self._clock(),)).rowcount

        return self._run(work)

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
            self._run(lambda conn: self._insert_continuation(conn, continuation))
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

        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE continuations SET request = ?, state = ?, attempt = ?, started_at = ?,"
                " deadline = ?, next_run_at = ?, version = ?, holder = ? WHERE id = ? AND version = ?",
                _continuation_values(c, expected_version + 1) + (c.id, expected_version),
            )
            return cursor.rowcount == 1

        return self._run(work)

    def delete_continuation(self, continuation_id: str) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM continuations WHERE id = ?", (continuation_id,)).rowcount == 1

        return self._run(work)

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
