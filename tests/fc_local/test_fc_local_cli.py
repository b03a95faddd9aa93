"""`python -m crhelper.local.fc_server` serves registered functions until terminated."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fc2
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


@pytest.mark.slow
def test_cli_serves_functions() -> None:
    env = _env(ALIBABA_CLOUD_ACCESS_KEY_ID="LTAIcli", ALIBABA_CLOUD_ACCESS_KEY_SECRET="cli-secret")
    proc = subprocess.Popen(
        [sys.executable, "-m", "crhelper.local.fc_server", "--function",
         "svc/echo=fc_local_handlers.echo", "--function", "svc/describe=fc_local_handlers:describe",
         "--code-path", str(HERE), "--env", "GREETING=cli", "--account-id", "1234567890123456",
         "--timeout", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(ROOT))
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline().decode()
        assert banner.startswith("FC endpoint http://127.0.0.1:"), banner
        endpoint = banner.split()[2]
        client = fc2.Client(endpoint=endpoint, accessKeyID="LTAIcli", accessKeySecret="cli-secret")
        assert client.invoke_function("svc", "echo", payload=b"via cli").data == b"via cli"
        seen = client.invoke_function("svc", "describe", payload=b'{"env": ["GREETING"]}').data
        assert b'"GREETING": "cli"' in seen and b'"account_id": "1234567890123456"' in seen
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err.decode()
    assert b"cli-secret" not in err


def test_cli_requires_access_key() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "crhelper.local.fc_server", "--function", "s/f=index.handler"],
        capture_output=True, env=_env(), cwd=str(ROOT), timeout=30)
    assert result.returncode == 2
    assert b"ALIBABA_CLOUD_ACCESS_KEY_SECRET" in result.stderr


def test_cli_rejects_malformed_function() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "crhelper.local.fc_server", "--function", "svc-only"],
        capture_output=True, env=_env(), cwd=str(ROOT), timeout=30)
    assert result.returncode == 2
    assert b"service/function=module:attr" in result.stderr
