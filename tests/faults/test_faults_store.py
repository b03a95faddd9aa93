"""A store that cannot answer in time (a SQLite file locked by another process) is answered FAILED
"state store unavailable" before the function deadline, and the handler never runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from crhelper import Provider, Result
from crhelper.store import open_store
from crhelper.testing import make_event

LOCKER = textwrap.dedent('''
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
''')


def fc_context(timeout: float) -> SimpleNamespace:
    return SimpleNamespace(request_id="r", credentials=None, function=SimpleNamespace(timeout=timeout, name="f"),
                           service=SimpleNamespace(name="svc", qualifier=None))


@pytest.mark.slow
def test_a_locked_store_is_answered_failed_in_time_without_running_the_handler(tmp_path, monkeypatch, response_server):
    path = tmp_path / "state.sqlite"
    open_store(f"sqlite:///{path}").close()  # the schema exists; now another process locks the file
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{path}")
    ran: list[str] = []
    provider = Provider()
    provider.create("Custom::X")(lambda props, request: ran.append("x") or Result(physical_id="x"))
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(path), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        event = response_server.attach(make_event("Create", "Custom::X"))
        started = time.monotonic()
        outcome = provider.process(event, fc_context(3))
        elapsed = time.monotonic() - started
    finally:
        locker.kill()
        locker.wait(5)
        provider.close()
    body = response_server.wait_for(event["RequestId"])
    assert body["Status"] == "FAILED" and body["Reason"].startswith("state store unavailable"), body
    assert outcome.delivered and elapsed < 3.0
    assert ran == []
