"""LocalMNS start/stop and the ``python -m crhelper.local.mns_server`` entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from mns.account import Account
from mns.queue import Message, QueueMeta

from crhelper.local.mns_server import LocalMNS

REPO = Path(__file__).resolve().parents[2]


def test_stop_releases_a_pending_long_poll() -> None:
    mns = LocalMNS().start()
    queue = mns.account().get_queue("waiting")
    queue.create(QueueMeta())
    outcome: list[str] = []

    def poll() -> None:
        try:
            queue.receive_message(wait_seconds=30)
            outcome.append("message")
        except Exception as exc:  # MessageNotExist or a closed connection: either ends the poll
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.2)
    start = time.monotonic()
    mns.stop()
    thread.join(timeout=5)
    assert not thread.is_alive() and outcome and outcome != ["message"]
    assert time.monotonic() - start < 3


def test_module_entry_point_serves_the_sdk() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crhelper.local.mns_server", "--port", "0", "--access-key-secret", "s3cret"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        assert "access_key_secret" not in info  # a secret given on the command line is not echoed
        queue = Account(info["endpoint"], info["access_key_id"], "s3cret").get_queue("cli")
        queue.set_encoding(False)
        queue.create(QueueMeta())
        queue.send_message(Message("from cli"))
        assert queue.receive_message().message_body == "from cli"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()
        proc.stderr.close()
