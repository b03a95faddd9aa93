"""`samples/greeting.py` is rollback-safe: a Name change is refused, and the rollback Update that
follows (the two property sets swapped) is accepted with the original Data, so the stack ends
ROLLBACK_COMPLETE rather than ROLLBACK_FAILED. Through `crhelper invoke` and `crhelper stack`, as a
user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "samples" / "greeting.py"
TOKEN = "acs:fc:cn-hangzhou:123456789:services/rollback/functions/greeting"
TEMPLATE = f"""\
ROSTemplateFormatVersion: '2015-09-01'
Parameters:
  Name: {{Type: String, Default: ros}}
Resources:
  Greeting:
    Type: Custom::Greeting
    Properties:
      ServiceToken: {TOKEN}
      Timeout: 60
      Parameters: {{Name: {{Ref: Name}}, Times: 2}}
Outputs:
  Text: {{Value: {{'Fn::GetAtt': [Greeting, Text]}}}}
"""


def crhelper(*args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"CRHELPER_HOME": str(home)} if home else {})}
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def _update(tmp_path: Path, name: str, properties: dict[str, Any], old: dict[str, Any]) -> Path:
    event = json.loads((REPO / "samples/events/update.json").read_text(encoding="utf-8"))
    event.update(ResourceProperties=properties, OldResourceProperties=old, PhysicalResourceId="greeting-ros")
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    return path


def test_the_sample_accepts_the_rollback_of_a_refused_name_change(tmp_path: Path) -> None:
    # The refusal itself (the forward Update) is checked by the stack test below.
    rollback = crhelper("invoke", str(SAMPLE), "--event",
                        str(_update(tmp_path, "rollback", {"Name": "ros", "Times": 2}, {"Name": "other", "Times": 2})))
    assert rollback.returncode == 0, rollback.stderr
    body = json.loads(rollback.stdout)
    assert body["PhysicalResourceId"] == "greeting-ros" and body["Data"] == {"Text": "hi ros hi ros"}


@pytest.mark.slow  # two stack operations in real processes, through the local Function Compute endpoint
def test_a_refused_name_change_rolls_the_stack_back_completely(tmp_path: Path) -> None:
    template = tmp_path / "greeting.yaml"
    template.write_text(TEMPLATE, encoding="utf-8")
    home = tmp_path / "home"
    binding = f"{TOKEN}={SAMPLE}:provider"
    created = crhelper("stack", "create", str(template), "--stack", "rb", "-s", binding, home=home)
    assert created.returncode == 0, created.stdout + created.stderr
    updated = crhelper("stack", "update", str(template), "--stack", "rb", "-s", binding, "-p", "Name=other", "--json",
                       home=home)
    assert updated.returncode == 1, updated.stdout + updated.stderr
    document = json.loads(updated.stdout)
    assert document["Stack"]["status"] == "ROLLBACK_COMPLETE", document["Stack"]
    assert document["Outputs"] == {"Text": "hi ros hi ros"}
    greeting = [(e["status"], e["reason"]) for e in document["Events"] if e["logical_id"] == "Greeting"]
    assert ("UPDATE_FAILED", "Name cannot change: it is part of the physical id; create a new resource instead") in greeting
    assert greeting[-1][0] == "UPDATE_COMPLETE", greeting  # the rollback Update succeeded
    deleted = crhelper("stack", "delete", "--stack", "rb", home=home)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
