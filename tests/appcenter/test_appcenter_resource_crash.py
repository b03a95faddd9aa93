"""SIGKILL the process running a cluster Create mid-lifecycle; the redelivered request, in another
process, resumes from the stored run: no service command runs twice, the rest runs, and exactly
one response is sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from appcenter_resource_support import FAST, properties, read_journal, services, store
from crhelper.local.supervisor import SupervisorClient
from crhelper.testing import make_event

pytestmark = pytest.mark.slow

RUNNER = textwrap.dedent('''
    import sys, time
    from handlers.appcenter.provider import provider
    provider.handle(open(sys.argv[1]).read())
    time.sleep(120)
''')


def test_a_create_killed_mid_lifecycle_resumes_in_another_process_without_running_a_step_twice(
        response_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = tmp_path / "journal.log"
    env = {**os.environ, **FAST, "CRHELPER_STORE": f"sqlite:///{tmp_path / 'requests.sqlite'}",
           "CRHELPER_STEP_LEASE": "1", "CRHELPER_APPCENTER_STEP_BUDGET": "0.3"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    event = response_server.attach(make_event("Create", "Custom::AppCluster",
                                              properties(journal, {"env.delay": 0.4}), logical_resource_id="App"))
    (tmp_path / "event.json").write_text(json.dumps(event))
    (tmp_path / "runner.py").write_text(RUNNER)

    def runner() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "event.json")], env=env,
                                cwd=Path(__file__).resolve().parents[2])

    first = runner()
    try:
        deadline = time.monotonic() + 30
        while len([r for r in read_journal(journal) if r.service == "token"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGKILL)  # init and custom_metadata done; the store's start under way
        first.wait(5)
    finally:
        if first.poll() is None:
            first.kill()
    killed_at = time.time()
    done_before = services(read_journal(journal))
    assert sorted(done_before)[:5] == [("init", "store-1"), ("init", "web-1"), ("init", "web-2"),
                                       ("token", "web-1"), ("token", "web-2")]
    assert ("start", "web-1") not in done_before
    (record,) = store().list()
    assert record.run is not None and not record.run["finished"]

    second = runner()  # the redelivery reaches a fresh process
    try:
        body = response_server.wait_for(event["RequestId"], timeout=40)
    finally:
        second.kill()
        second.wait(5)
        SupervisorClient().stop_all(grace=0.5)
    assert body["Status"] == "SUCCESS", body
    assert body["Data"]["Roles"] == {"store": 1, "web": 2}
    ran = read_journal(journal)
    assert sorted(services(ran)) == [("init", "store-1"), ("init", "web-1"), ("init", "web-2"), ("start", "store-1"),
                                     ("start", "web-1"), ("start", "web-2"), ("token", "web-1"), ("token", "web-2")]
    assert all(r.at > killed_at for r in ran if r.role == "web" and r.service == "start")  # the second process's
    time.sleep(0.3)
    assert len(response_server.responses_for(event["RequestId"])) == 1
