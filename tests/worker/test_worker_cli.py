"""`crhelper worker` as a process: arguments, credentials, and a graceful SIGTERM mid-handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mns.queue import Message

from crhelper.cli.worker import main
from crhelper.local.mns_server import LocalMNS
from crhelper.reentry_mns import resolve_queue
from crhelper.testing import make_event
from worker_support import queue_empty, wait_until

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.slow]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _env(local_mns: LocalMNS, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "ALIBABA_CLOUD_ACCESS_KEY_ID": local_mns.access_key_id,
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": local_mns.access_key_secret,
        "CRHELPER_STORE": f"sqlite:///{tmp_path / 'state.sqlite'}",
        "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]),
    })
    return env


def test_sigterm_mid_handler_finishes_the_message_and_exits_0(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, tmp_path: Path
) -> None:
    make_queue(name)
    marker = tmp_path / "started"
    event = response_server.attach(make_event("Create", "Custom::Slow", {"Marker": str(marker), "Seconds": 1.5}))
    local_mns.account().get_queue(name).send_message(Message(json.dumps(event)))  # base64, the SDK default
    process = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.worker", f"{HERE / 'worker_providers.py'}:provider",
         "--queue", local_mns.queue_arn(name), "--endpoint", local_mns.endpoint,
         "--wait-seconds", "1", "--grace", "10"],
        env=_env(local_mns, tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_until(marker.exists, timeout=10)
        assert response_server.responses_for(event["RequestId"]) == []  # still in the handler
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr.decode()[-2000:]
    body = response_server.responses_for(event["RequestId"])
    assert len(body) == 1 and body[0]["Status"] == "SUCCESS" and body[0]["Data"] == {"Slept": 1.5}
    assert queue_empty(local_mns, name)
    logs = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert any(entry["message"] == "queue worker stopped" and entry["deleted"] == 1 for entry in logs)
    assert "Signature=" not in stderr.decode()  # presigned URLs never reach the log


def test_sigkill_mid_step_is_resumed_by_another_worker(
    local_mns: LocalMNS, make_queue: Any, name: str, response_server: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, start_worker: Any,
) -> None:
    make_queue(name, visibility=2)
    marker = tmp_path / "hanging"
    event = response_server.attach(make_event("Create", "Custom::Steps", {"Marker": str(marker)}))
    make_queue(name, visibility=2).send_message(Message(json.dumps(event)))
    env = {**_env(local_mns, tmp_path), "CRHELPER_STEP_LEASE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.worker", f"{HERE / 'worker_providers.py'}:provider",
         "--queue", name, "--endpoint", local_mns.endpoint, "--wait-seconds", "1",
         "--visibility-timeout", "2", "--extend-every", "0.5"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_until(marker.exists, timeout=10)  # the second step is running: the continuation message is held
        process.kill()
        process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert response_server.responses_for(event["RequestId"]) == []
    monkeypatch.setenv("CRHELPER_STORE", env["CRHELPER_STORE"])
    monkeypatch.setenv("CRHELPER_STEP_LEASE", "1")
    import worker_providers

    worker = start_worker(worker_providers.provider, name, visibility_timeout=2, extend_every=0.5)
    try:
        body = response_server.wait_for(event["RequestId"], timeout=10)
        assert body["Status"] == "SUCCESS" and body["Data"] == {"Attempt": 1, "State": 1}
        wait_until(lambda: queue_empty(local_mns, name))
        assert len(response_server.captures) == 1
    finally:
        worker.stop(grace=2.0)
        worker_providers.provider.close()


def test_help_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--queue" in out and "examples:" in out and "acs:mns:cn-hangzhou" in out


def test_missing_credentials_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", raising=False)
    assert main([f"{HERE / 'worker_providers.py'}:provider", "--queue", "acs:mns:cn-hangzhou:123:queues/q"]) == 2
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in capsys.readouterr().err


def test_bare_queue_name_needs_an_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"{HERE / 'worker_providers.py'}:provider", "--queue", "requests"]) == 2
    assert "endpoint" in capsys.readouterr().err


def test_resolve_queue_forms() -> None:
    derived = resolve_queue("acs:mns:cn-shanghai:1234567890:queues/ros-requests")
    assert (derived.endpoint, derived.queue) == ("https://1234567890.mns.cn-shanghai.aliyuncs.com", "ros-requests")
    slashed = resolve_queue("acs:mns:cn-shanghai:1234567890:/queues/ros-requests", "http://127.0.0.1:1/")
    assert (slashed.endpoint, slashed.queue) == ("http://127.0.0.1:1", "ros-requests")
    assert resolve_queue("plain", "http://127.0.0.1:1").queue == "plain"
    for bad, problem in [("acs:mns:cn-shanghai:1234567890:topics/t", "MNS queue"), ("a/b", "queue name"),
                         ("acs:mns:cn-shanghai:12x:queues/q", "account")]:
        with pytest.raises(ValueError, match=problem):
            resolve_queue(bad, "http://127.0.0.1:1")
