"""Opening the SQLite store: a file already set up is opened with plain reads (no write lock), and
many processes opening a new file at once all succeed with one schema."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest

from crhelper.store import IdempotencyKey
from crhelper.store.budget import store_deadline
from crhelper.store.sqlite import SqliteStore, _busy_ms_for

PROCESSES = 8


def test_an_existing_store_opens_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "store.db")
    SqliteStore(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # as a worker in the middle of a claim would
    try:
        started = time.monotonic()
        with store_deadline(time.monotonic() + 0.25):
            store = SqliteStore(path)  # before: BEGIN IMMEDIATE for the schema, busy until the deadline
        assert time.monotonic() - started < 0.2
        assert store.get(IdempotencyKey("s", "r", "L")) is None
        store.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_busy_timeout_stays_within_the_wait_and_changes_in_steps() -> None:
    current = 30_000
    changes = 0
    for wait in range(30_000, -1, -7):
        new = _busy_ms_for(wait, current)
        assert new <= wait, (wait, current, new)
        assert wait < 250 or wait - new < 250
        changes += new != current
        current = new
    assert changes < 30_000 // 250 + 250 // 7 + 2  # one PRAGMA per step, not per call
    assert _busy_ms_for(30_000, 29_500) == 30_000  # a later call with more time gets it back


def _open_and_claim(path: str, barrier, results, index: int) -> None:  # type: ignore[no-untyped-def]
    try:
        barrier.wait(timeout=30)
        store = SqliteStore(path)
        claim = store.claim(IdempotencyKey("stack", f"req-{index}", "Res"), f"owner-{index}")
        store.close()
        results.put(("ok", claim.status.value))
    except BaseException as exc:  # report instead of dying silently
        results.put(("error", repr(exc)))


@pytest.mark.slow
def test_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    path = str(tmp_path / "fresh" / "store.db")
    ctx = multiprocessing.get_context("spawn")  # not fork: a forked child of a threaded pytest process can inherit a held lock
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [ctx.Process(target=_open_and_claim, args=(path, barrier, results, i)) for i in range(PROCESSES)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=45) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
    assert outcomes == [("ok", "acquired")] * PROCESSES
    db = sqlite3.connect(path)
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    assert {"idempotency", "continuations", "idempotency_expires", "continuations_due"} <= names
    assert db.execute("SELECT COUNT(*) FROM idempotency").fetchone()[0] == PROCESSES
