"""SIGKILL a provider process mid-operation; another process resumes from the stored continuation."""

from __future__ import annotations

import pytest

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from crhelper.testing import make_event

pytestmark = pytest.mark.slow

PROVIDER = textwrap.dedent('''
    import os
    from crhelper import InProgress, Provider, Result

    provider = Provider()
    CALLS = os.environ["CALLS_FILE"]

    @provider.create("Custom::Crashy")
    def create(props, request):
        with open(CALLS, "a") as f:
            f.write(f"{os.getpid()} {request.attempt}\\n")
        step = (request.state or 0) + 1
        if step < 6:
            return InProgress(state=step, delay=0.4)
        return Result(physical_id="crashy", data={"Steps": step})
''')

RUNNER = textwrap.dedent('''
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from crashy_provider import provider
    provider.handle(open(sys.argv[2]).read())
    time.sleep(120)
''')


def _calls(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines() if line.strip()]


def test_sigkill_mid_operation_is_resumed_by_another_process(response_server, tmp_path, monkeypatch):
    (tmp_path / "crashy_provider.py").write_text(PROVIDER)
    (tmp_path / "runner.py").write_text(RUNNER)
    calls_file = tmp_path / "calls.txt"
    env = {**os.environ, "CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}", "CRHELPER_STEP_LEASE": "1",
           "CALLS_FILE": str(calls_file)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    event = response_server.attach(make_event("Create", "Custom::Crashy"))
    (tmp_path / "event.json").write_text(json.dumps(event))

    first = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(tmp_path), str(tmp_path / "event.json")], env=env)
    try:
        deadline = time.monotonic() + 20
        while len(_calls(calls_file)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_calls(calls_file)) >= 2, "the first process never got going"
        os.kill(first.pid, signal.SIGKILL)
        first.wait(5)
    finally:
        if first.poll() is None:
            first.kill()
    killed_at = len(_calls(calls_file))

    # A redelivery reaches a fresh process: it must neither restart the work nor answer twice.
    spec = importlib.util.spec_from_file_location("crashy_provider_b", tmp_path / "crashy_provider.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.provider.handle(json.dumps(event))
        body = response_server.wait_for(event["RequestId"], timeout=20)
    finally:
        module.provider.close()
    assert body["Status"] == "SUCCESS" and body["Data"] == {"Steps": 6}
    calls = _calls(calls_file)
    attempts = [attempt for _, attempt in calls]
    assert attempts[:killed_at] == list(range(killed_at))      # the first process's progress ...
    assert sorted(set(attempts)) == list(range(6))              # ... is continued, not restarted
    assert attempts.count(0) == 1                               # the request itself never ran twice
    assert len({pid for pid, _ in calls}) == 2
    time.sleep(0.5)
    assert len(response_server.responses_for(event["RequestId"])) == 1
