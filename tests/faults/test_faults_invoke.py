"""`crhelper invoke --timeout`: the FAILED "timed out" goes out on time and the process ends with it.

A real `crhelper invoke` subprocess; its handler sleeps far past the timeout, in a thread that
would otherwise hold the interpreter at exit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

PROVIDER_SOURCE = '''
import time

from crhelper import Provider, Request, Result

provider = Provider()


@provider.create("Custom::Sleepy")
def create(props: dict, request: Request) -> Result:
    time.sleep(float(props.get("Sleep", 60)))
    return Result(physical_id="sleepy-1")
'''


def test_invoke_timeout_exits_once_the_failed_is_sent_while_the_handler_still_sleeps(tmp_path: Path) -> None:
    provider = tmp_path / "faults_sleepy_provider.py"
    provider.write_text(PROVIDER_SOURCE, encoding="utf-8")
    event = json.loads((REPO / "samples/events/create.json").read_text(encoding="utf-8"))
    event.update(ResourceType="Custom::Sleepy", ResourceProperties={"Sleep": 60})
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event), encoding="utf-8")

    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "invoke", f"{provider}:provider",
                             "--event", str(event_path), "--timeout", "3"],
                            cwd=REPO, capture_output=True, text=True, timeout=15)
    elapsed = time.monotonic() - started

    assert elapsed < 3 + 2, f"exited after {elapsed:.1f} s: {result.stderr}"
    assert result.returncode == 1, result.stderr  # 1 = FAILED, as `crhelper invoke --help` says
    body = json.loads(result.stdout)  # exactly one response document was printed
    assert body["Status"] == "FAILED" and body["Reason"].startswith("timed out"), body
    assert body["RequestId"] == event["RequestId"]
    assert "after 1 attempt(s)" in result.stderr, result.stderr  # the ResponseURL got exactly one answer
