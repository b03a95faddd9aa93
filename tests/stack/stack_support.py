"""Helpers shared by the stack tests: tokens, provider specs, template builders, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PROVIDERS = HERE / "stack_providers.py"
FC2 = "acs:fc:cn-hangzhou:123456789:services/tests/functions/echo"
FC3 = "acs:fc:cn-hangzhou:123456789:functions/echo"
QUEUE = "acs:mns:cn-hangzhou:123456789:queues/echo-requests"
TOPIC = "acs:mns:cn-hangzhou:123456789:topics/echo-requests"


def spec(attribute: str = "provider") -> str:
    return f"{PROVIDERS}:{attribute}"


def echo_template(token: str, resources: dict[str, dict[str, Any]] | None = None, timeout: float = 20, **extra: Any) -> str:
    """Custom::Echo resources on `token` (logical id -> Parameters), with an output per Name."""
    resources = resources or {"Echo": {"Name": "one"}}
    body = {
        name: {"Type": "Custom::Echo", "Properties": {"ServiceToken": token, "Timeout": timeout, "Parameters": params}}
        for name, params in resources.items()
    }
    outputs = {f"{name}Name": {"Value": {"Fn::GetAtt": [name, "Name"]}} for name, p in resources.items() if "Name" in p}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": body, "Outputs": outputs, **extra})


def run_cli(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    """`python -m crhelper.cli.stack ...` as a real subprocess (the lead registers it under `crhelper stack`)."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "crhelper.cli.stack", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)
