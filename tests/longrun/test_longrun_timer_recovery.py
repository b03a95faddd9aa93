"""A Function Compute time trigger finishes what nothing else drives: here an operation whose process
died and whose deadline then passed with no traffic is answered FAILED and cleaned up."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from crhelper.testing import make_event

PROVIDER = textwrap.dedent('''
    import os
    from crhelper import InProgress, Provider

    provider = Provider()
    provider.set_deadline("Custom::Stuck", 2)

    @provider.create("Custom::Stuck")
    def create(props, request):
        with open(os.environ["CALLS_FILE"], "a") as f:
            f.write("called\\n")
        return InProgress(state=None, delay=600)

    @provider.on_timeout("Custom::Stuck")
    def cleanup(request):
        with open(os.environ["CALLS_FILE"], "a") as f:
            f.write("cleanup\\n")
''')

RUNNER = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from timer_stuck_provider import provider
    provider.handle(open(sys.argv[2]).read())
    time.sleep(120)
''')


@pytest.mark.slow
def test_timer_trigger_answers_an_abandoned_operation_past_its_deadline(response_server, tmp_path, monkeypatch):
    (tmp_path / "timer_stuck_provider.py").write_text(PROVIDER)
    (tmp_path / "runner.py").write_text(RUNNER)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}", "CALLS_FILE": str(calls)}
    for name in ("CRHELPER_STORE", "CALLS_FILE"):
        monkeypatch.setenv(name, env[name])
    event = response_server.attach(make_event("Create", "Custom::Stuck"))
    (tmp_path / "event.json").write_text(json.dumps(event))
    first = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path), str(tmp_path / "event.json")], env=env)
    try:
        end = time.monotonic() + 20
        while not (calls.exists() and "called" in calls.read_text()) and time.monotonic() < end:
            time.sleep(0.02)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(5)
    finally:
        if first.poll() is None:
            first.kill()
    time.sleep(3.5)  # the deadline passes while nothing runs (recovery waits 1 s past due)
    assert response_server.captures == []

    spec = importlib.util.spec_from_file_location("timer_stuck_provider_b", tmp_path / "timer_stuck_provider.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    timer_event = {"triggerTime": "2026-11-30T21:00:00Z", "triggerName": "crhelper-recovery", "payload": ""}
    context = SimpleNamespace(request_id="timer-1", function=SimpleNamespace(name="provider", timeout=30))
    try:
        returned = json.loads(module.provider.fc_handler(json.dumps(timer_event).encode(), context))
    finally:
        module.provider.close()
    assert returned == {"Recovered": 1}
    body = response_server.wait_for(event["RequestId"], timeout=5)
    assert body["Status"] == "FAILED" and body["Reason"].startswith("did not complete within 2 s")
    assert calls.read_text().splitlines() == ["called", "cleanup"]
