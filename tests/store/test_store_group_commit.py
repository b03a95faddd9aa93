"""The SQLite store's group commit: writes that arrive while a commit runs share the next one, a
failing write never touches the others, and no write is acknowledged before its COMMIT (a SIGKILL at
any moment loses no acknowledged write, as a fresh process reading the file sees)."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from crhelper.store import Continuation, IdempotencyKey, StoreConflict
from crhelper.store.sqlite import SqliteStore

HERE = Path(__file__).resolve().parent
CHILD = HERE / "group_commit_child.py"
STACK = "arn:acs:ros:cn-hangzhou:1:stacks/s/group-commit"
THREADS = 16

pytestmark = pytest.mark.slow


def _key(name: str) -> IdempotencyKey:
    return IdempotencyKey(STACK, name, "Res")


def _stored(path: Path) -> dict[str, dict[str, Any]]:
    """The idempotency records as a fresh process reads the file (plain sqlite3, not our store)."""
    script = ("import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(json.dumps({r[0]: "
              "{'owner': r[1], 'state': r[2]} for r in c.execute("
              "'SELECT request_id, owner, state FROM idempotency')}))")
    out = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _continuation(cid: str) -> Continuation:
    now = time.time()
    return Continuation(id=cid, request={"RequestId": cid}, state=None, attempt=0, started_at=now,
                        deadline=now + 600, next_run_at=now + 600, version=1)


def _held(path: Path) -> sqlite3.Connection:
    """Another connection holding the file's write lock: the first write waits in BEGIN IMMEDIATE
    and every write after it queues behind that commit."""
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def _run_threads(targets: list[Any]) -> list[threading.Thread]:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    return threads


def test_writes_arriving_during_a_commit_share_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(str(path))
    blocker = _held(path)
    owned: dict[int, bool] = {}

    def claim(i: int) -> None:
        owned[i] = store.claim(_key(f"req-{i}"), f"owner-{i}").owns

    threads = _run_threads([lambda i=i: claim(i) for i in range(THREADS)])
    time.sleep(0.5)  # every thread has queued its claim behind the first, which waits for the lock
    assert owned == {}, "a claim returned while its transaction could not commit"
    blocker.execute("ROLLBACK")
    for thread in threads:
        thread.join(30)
    assert owned == {i: True for i in range(THREADS)}
    assert store.writes == THREADS
    assert store.commits <= 3, f"{store.commits} transactions for {THREADS} writes queued together"
    stored = _stored(path)
    assert {f"req-{i}": {"owner": f"owner-{i}", "state": "IN_PROGRESS"} for i in range(THREADS)} == stored
    store.close()


def test_a_failing_write_in_a_group_leaves_the_others_committed(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteStore(str(path))
    store.put_continuation(_continuation("taken"))
    blocker = _held(path)
    outcomes: dict[str, str] = {}

    def put(cid: str, label: str) -> None:
        try:
            store.put_continuation(_continuation(cid))
            outcomes[label] = "stored"
        except StoreConflict:
            outcomes[label] = "conflict"

    def claim(i: int) -> None:
        outcomes[f"claim-{i}"] = store.claim(_key(f"req-{i}"), f"owner-{i}").status.value

    targets: list[Any] = [lambda i=i: put(f"c-{i}", f"c-{i}") for i in range(6)]
    targets += [lambda: put("taken", "dup-1"), lambda: put("taken", "dup-2")]
    targets += [lambda i=i: claim(i) for i in range(6)]
    threads = _run_threads(targets)
    time.sleep(0.4)
    blocker.execute("ROLLBACK")
    for thread in threads:
        thread.join(30)
    assert outcomes == {**{f"c-{i}": "stored" for i in range(6)}, "dup-1": "conflict", "dup-2": "conflict",
                        **{f"claim-{i}": "acquired" for i in range(6)}}
    for i in range(6):
        assert store.get_continuation(f"c-{i}") is not None
    assert store.get_continuation("taken") is not None
    assert set(_stored(path)) == {f"req-{i}" for i in range(6)}
    store.close()


def _child(path: Path, prefix: str, threads: int, claims: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), str(path), prefix, str(threads), str(claims)],
                            stdout=subprocess.PIPE, text=True, cwd=str(HERE))


def test_a_sigkill_mid_group_commit_loses_no_acknowledged_write(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SqliteStore(str(path)).close()
    child = _child(path, "k", 32, 200)
    assert child.stdout is not None
    acked: set[str] = set()
    deadline = time.monotonic() + 60
    try:
        for line in child.stdout:
            if line.startswith("ack "):
                acked.add(line.split()[1])
            if len(acked) >= 300 or time.monotonic() > deadline:
                break
        child.send_signal(signal.SIGKILL)  # while 32 threads keep committing: most likely mid-transaction
        acked.update(line.split()[1] for line in child.stdout if line.startswith("ack "))
    finally:
        child.kill()
        child.wait(10)
    assert len(acked) >= 300
    assert len(acked) < 32 * 200, "the child finished before the kill; nothing was tested"
    stored = _stored(path)
    lost = acked - set(stored)
    assert not lost, f"{len(lost)} acknowledged claims missing after the crash, e.g. {sorted(lost)[:3]}"
    assert all(record["state"] == "IN_PROGRESS" and record["owner"] == f"owner-{rid}" for rid, record in stored.items())
    after = SqliteStore(str(path))  # the file is usable after the crash
    assert after.claim(_key("after-crash"), "owner-after").owns
    assert not after.claim(_key(sorted(acked)[0]), "someone-else").owns  # the acknowledged claim holds
    after.close()


def test_no_write_is_acknowledged_before_it_commits(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    SqliteStore(str(path)).close()
    blocker = _held(path)
    child = _child(path, "w", 8, 5)
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.5)  # every thread is waiting for the commit that the held lock prevents
        child.send_signal(signal.SIGKILL)
        lines = child.stdout.read().split()
    finally:
        child.kill()
        child.wait(10)
        blocker.execute("ROLLBACK")
        blocker.close()
    assert "ack" not in lines
    assert _stored(path) == {}


def test_each_queued_write_keeps_its_own_deadline(tmp_path: Path) -> None:
    from crhelper.store import StoreError
    from crhelper.store.budget import store_deadline

    path = tmp_path / "store.db"
    store = SqliteStore(str(path))
    blocker = _held(path)
    outcomes: dict[str, Any] = {}

    def claim(name: str, seconds: float) -> None:
        started = time.monotonic()
        try:
            with store_deadline(started + seconds):
                outcomes[name] = store.claim(_key(name), f"owner-{name}").status.value
        except StoreError as exc:
            outcomes[name] = ("busy", round(time.monotonic() - started, 1), str(exc)[:40])

    threads = _run_threads([lambda: claim("patient", 10.0), lambda: claim("hurried", 0.3)])
    time.sleep(1.0)
    blocker.execute("ROLLBACK")
    for thread in threads:
        thread.join(30)
    assert outcomes["patient"] == "acquired"
    busy, waited, message = outcomes["hurried"]
    assert (busy, message.startswith("state store busy")) == ("busy", True)
    assert waited <= 0.6, f"a write with a 0.3 s budget waited {waited} s behind the held lock"
    assert set(_stored(path)) == {"patient"}
    store.close()
