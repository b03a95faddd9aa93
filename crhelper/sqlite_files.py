"""SQLite files that several processes of one machine share: one home for opening them.

The idempotency store, the local stacks, the router's routes and the boot groups each keep a file
under `$CRHELPER_HOME` that an FC worker, the CLI and a server may open at once. They all need the
same three things: a connection that waits for the write lock instead of failing, WAL (so readers
never block the writer), and read-decide-write transactions that take the write lock first
(`BEGIN IMMEDIATE`). Standard library only.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

#: Seconds a connection waits for another process's write lock before an operation fails.
BUSY_SECONDS = 30.0
#: Seconds between two tries of the WAL pragma while the file is busy.
WAL_RETRY_INTERVAL = 0.05


class WalBusy(sqlite3.OperationalError):
    """The file stayed locked for `waited` seconds while switching it to WAL."""

    def __init__(self, waited: float, cause: sqlite3.OperationalError) -> None:
        super().__init__(f"the SQLite file stayed locked for {waited:.1f} s ({cause})")
        self.waited = waited


def connect(path: str | Path, *, busy_seconds: float = BUSY_SECONDS, rows: bool = False,
            autocommit: bool = True, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection that waits up to `busy_seconds` for the write lock; `rows`: `sqlite3.Row`
    results; `autocommit`: transactions only where `immediate` (or the caller) opens them."""
    conn = sqlite3.connect(path, timeout=busy_seconds, isolation_level=None if autocommit else "DEFERRED",
                           check_same_thread=check_same_thread)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_seconds * 1000)}")
    if rows:
        conn.row_factory = sqlite3.Row
    return conn


@contextmanager
def opened(path: str | Path, **options: Any) -> Iterator[sqlite3.Connection]:
    """A connection (`connect`'s options) closed on the way out: one per call, for files that
    several processes write."""
    conn = connect(path, **options)
    try:
        yield conn
    finally:
        conn.close()


def use_wal(conn: sqlite3.Connection, wait: float = BUSY_SECONDS) -> None:
    """Switch the file to WAL, retrying for `wait` seconds: SQLite answers this pragma SQLITE_BUSY
    at once, without its busy handler, while another connection recovers the WAL of a process that
    died mid-write (a SIGKILLed worker). That is seconds of waiting, not an unusable file; past
    `wait`, WalBusy says how long it waited. WAL is a property of the file: once set, every later
    open only reads the mode (setting it again takes a lock that concurrent opens queue behind)."""
    started = time.monotonic()
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            waited = time.monotonic() - started
            if waited + WAL_RETRY_INTERVAL >= wait:
                raise WalBusy(waited, exc) from None
            time.sleep(WAL_RETRY_INTERVAL)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read-decide-write transaction on an autocommit connection: the write lock is taken
    before the first read (`BEGIN IMMEDIATE`), committed on success, rolled back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
