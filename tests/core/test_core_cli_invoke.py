"""`crhelper invoke` as a user runs it: a real process, the sample provider and events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def crhelper(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name, physical_id", [("create", "greeting-ros"), ("update", "greeting-ros"), ("delete", "greeting-ros")])
def test_invoke_prints_the_response_as_sent(name, physical_id):
    result = crhelper("invoke", "samples/greeting.py:provider", "--event", f"samples/events/{name}.json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["Status"] == "SUCCESS" and body["PhysicalResourceId"] == physical_id
    assert "POST" in result.stderr and "replaced-by-crhelper-invoke" not in result.stderr


def test_invoke_exits_1_on_failed(tmp_path):
    event = json.loads((REPO / "samples/events/create.json").read_text())
    event["ResourceProperties"] = {"Name": "x", "Times": 99}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(event))
    result = crhelper("invoke", "samples/greeting.py:provider", "--event", str(path))
    assert result.returncode == 1
    assert "ResourceProperties.Times: Input should be less than or equal to 10" in json.loads(result.stdout)["Reason"]


def test_invoke_with_module_spec_and_retries():
    result = crhelper("invoke", "samples.greeting:provider", "--event", "samples/events/create.json", "--fail-first", "1")
    assert result.returncode == 0, result.stderr
    assert "after 2 attempt(s)" in result.stderr


def test_invoke_explains_a_bad_spec():
    result = crhelper("invoke", "samples/nope.py:provider", "--event", "samples/events/create.json")
    assert result.returncode == 2 and "no such file: samples/nope.py" in result.stderr


def test_help_teaches():
    result = crhelper("--help")
    assert result.returncode == 0 and "invoke" in result.stdout
    result = crhelper("invoke", "--help")
    assert "crhelper invoke samples/greeting.py:provider" in result.stdout
