"""A stack whose crhelper process died mid-operation is reported interrupted by every command,
not only by the next update or delete; a stack another live process works on is left alone."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest
from emulator_support import Provider, as_text, custom, template

from crhelper.emulator import StackEmulator

REASON = "interrupted: the crhelper process running this operation stopped before it finished"


@pytest.fixture
def finished_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def left_in_progress(home: Path, provider: Provider, owner: int) -> None:
    """A stack as a process that was SIGKILLed mid-create leaves it: IN_PROGRESS, owned by `owner`."""
    with StackEmulator(home) as emulator:
        emulator.create("s", as_text(template({"A": custom()})), {}, provider)
        record = emulator.store.load("s")
        assert record is not None
        record.status = "CREATE_IN_PROGRESS"
        record.resources["A"].status = "CREATE_IN_PROGRESS"
        emulator.store.save(record)
    with sqlite3.connect(home / "stacks.sqlite") as db:
        db.execute("INSERT OR REPLACE INTO operations (name, pid, host) VALUES (?, ?, ?)", ("s", owner, socket.gethostname()))


def test_describe_list_and_events_report_a_dead_owners_stack_interrupted(tmp_path: Path, provider: Provider,
                                                                          finished_pid: int) -> None:
    home = tmp_path / "home"
    left_in_progress(home, provider, finished_pid)
    with StackEmulator(home) as emulator:
        described = emulator.describe("s")
        assert (described.status, described.status_reason) == ("CREATE_FAILED", REASON)
        assert [(r.status, r.status_reason) for r in described.resources] == [("CREATE_FAILED", REASON)]
        assert [s.status for s in emulator.list_stacks()] == ["CREATE_FAILED"]
        interrupted = [e for e in emulator.events("s") if e.reason == REASON]
        assert sorted(e.logical_id for e in interrupted) == ["A", "s"]  # marked once, not per command
        assert emulator.delete("s", provider).status == "DELETE_COMPLETE"


def test_a_stack_a_live_process_works_on_stays_in_progress(tmp_path: Path, provider: Provider, live_pid: int) -> None:
    home = tmp_path / "home"
    left_in_progress(home, provider, live_pid)
    with StackEmulator(home) as emulator:
        assert emulator.describe("s").status == "CREATE_IN_PROGRESS"
        assert [s.status for s in emulator.list_stacks()] == ["CREATE_IN_PROGRESS"]


def test_describe_from_this_process_during_its_own_operation_changes_nothing(tmp_path: Path, provider: Provider) -> None:
    home = tmp_path / "home"
    provider.on("A", "Create", hang=True)
    with StackEmulator(home) as emulator:
        worker = threading.Thread(target=emulator.create, args=("s", as_text(template({"A": custom()})), {}, provider))
        worker.start()
        try:
            with StackEmulator(home) as observer:
                for _ in range(200):
                    if provider.requests:
                        break
                    threading.Event().wait(0.01)
                assert observer.describe("s").status == "CREATE_IN_PROGRESS"
        finally:
            provider.release.set()
            worker.join(10)
        assert emulator.describe("s").status == "CREATE_COMPLETE"
