"""A worker dies with the endpoint that started it, even when the endpoint is SIGKILLed.

Real processes: a stand-in endpoint (a plain Python process) starts `python -m crhelper.local.fc_worker`
in its own session, the way ProcessRunner does, and is then killed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crhelper.emulator.state import process_alive
from crhelper.local.fc_worker import PARENT_PID_ENV

REPO = Path(__file__).resolve().parents[2]

ENDPOINT = f"""
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-m", "crhelper.local.fc_worker"], stdin=subprocess.PIPE,
                          env={{**os.environ, {PARENT_PID_ENV!r}: str(os.getpid())}}, start_new_session=True)
print(worker.pid, flush=True)
time.sleep(60)
"""


def _gone_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while process_alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_worker_waiting_for_its_job_dies_when_the_endpoint_is_sigkilled() -> None:
    endpoint = subprocess.Popen([sys.executable, "-c", ENDPOINT], cwd=REPO, stdout=subprocess.PIPE, text=True)
    worker = 0
    try:
        assert endpoint.stdout is not None
        worker = int(endpoint.stdout.readline())
        time.sleep(0.5)  # let the worker arm its death signal
        assert process_alive(worker)
        endpoint.kill()
        endpoint.wait(5)
        assert _gone_within(worker, 3), f"worker {worker} outlived its endpoint"
    finally:
        if endpoint.poll() is None:
            endpoint.kill()
            endpoint.wait()
        if worker and process_alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_worker_whose_endpoint_is_already_gone_exits_at_once() -> None:
    """The race: the endpoint died before the worker armed its death signal (its parent pid differs)."""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "crhelper.local.fc_worker"], cwd=REPO, input=b"",
                            env={**os.environ, PARENT_PID_ENV: "1" if os.getpid() != 1 else "2"},
                            capture_output=True, timeout=20)
    assert result.returncode == 1 and result.stdout == b""
    assert time.monotonic() - started < 10
