"""Fixtures for the process supervisor tests: fast settings, a client per test's own CRHELPER_HOME
(the suite's autouse fixture gives each test one), and a teardown that proves nothing is left."""

from __future__ import annotations

from typing import Iterator

import pytest

from crhelper.local.supervisor import SupervisorClient, group_alive, process_alive
from crhelper.testing import wait_until


@pytest.fixture(autouse=True)
def fast_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seconds, not minutes; in the environment, so clients run as subprocesses get them too."""
    monkeypatch.setenv("CRHELPER_SUPERVISOR_GRACE", "0.5")
    monkeypatch.setenv("CRHELPER_SUPERVISOR_LINGER", "0.5")
    monkeypatch.setenv("CRHELPER_SUPERVISOR_POLL", "0.05")


@pytest.fixture()
def supervisor() -> Iterator[SupervisorClient]:
    """A client of this test's home; afterwards every process and the daemon are gone."""
    client = SupervisorClient()
    yield client
    daemon = client.daemon_pid()
    statuses = client.stop_all(grace=0.2)
    if daemon is not None:
        wait_until(lambda: not process_alive(daemon), timeout=5, what=f"daemon {daemon} gone")
    for status in statuses:
        assert status.pid is None or not group_alive(status.pid), f"{status.name} left processes behind"
    # A daemon a test already told to stop refuses the ping while it closes, and removes its socket
    # last: wait for that too (a daemon that never removes it fails here).
    wait_until(lambda: not client.paths.socket.exists(), timeout=5, what="the daemon's socket removed")
