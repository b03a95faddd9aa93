"""Starts that arrive at once (a boot-group tier): the daemon spawns them in parallel and writes its
state file once for several (group commit), yet every start it answers is on record, a process that
exits at once keeps its exit code (the stray reaper never takes a child still being registered), and
a daemon killed right after the burst is succeeded by one that adopts every process."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from crhelper.local.supervisor import EXITED, RUNNING, SupervisorClient, load_records, process_alive
from crhelper.testing import wait_until
from supervisor_support import SLEEPS, python

pytestmark = pytest.mark.slow

BURST = 24


def test_a_burst_of_starts_is_all_on_record_with_exit_codes_and_survives_a_killed_daemon(
        supervisor: SupervisorClient) -> None:
    supervisor.start("warm", python(SLEEPS))  # the daemon is up: the burst measures starts only

    def start(index: int) -> tuple[str, int | None]:
        name = f"burst-{index}"
        code = SLEEPS if index % 2 else "import sys; sys.exit(7)"
        status = SupervisorClient(supervisor.home).start(name, python(code), owner="burst")
        return name, status.pid

    with ThreadPoolExecutor(max_workers=12) as pool:
        answered = dict(pool.map(start, range(BURST)))
    assert len(answered) == BURST and all(answered.values())

    # What the daemon answered is in its state file already, each with the pid the client got.
    on_file = load_records(supervisor.paths.state)
    assert {name: on_file[name].pid for name in answered} == answered
    raw = json.loads(supervisor.paths.state.read_text())
    assert len(raw["records"]) == BURST + 1, "one record per name, none lost to a concurrent write"

    quick = [f"burst-{index}" for index in range(0, BURST, 2)]
    wait_until(lambda: all(supervisor.status(name).state == EXITED for name in quick), timeout=10, what="quick exits")
    assert {supervisor.status(name).exit_code for name in quick} == {7}, "each exit code read by its own Popen"

    daemon = supervisor.daemon_pid()
    assert daemon is not None
    os.kill(daemon, signal.SIGKILL)
    wait_until(lambda: not process_alive(daemon), timeout=5, what="daemon killed")
    sleepers = {f"burst-{index}": answered[f"burst-{index}"] for index in range(1, BURST, 2)}
    statuses = {status.name: status for status in supervisor.list(owner="burst")}  # a new daemon adopts
    assert {name: (statuses[name].state, statuses[name].pid, statuses[name].adopted) for name in sleepers} == {
        name: (RUNNING, pid, True) for name, pid in sleepers.items()}
    assert all(statuses[name].state == EXITED for name in quick)
