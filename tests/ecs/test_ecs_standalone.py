"""`python -m crhelper.local.ecs_server` on its own (slow: a real process), and a cold import that
leaves the SDK unloaded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from ecs_support import REGION, acs3_request, send

from crhelper.local.processes import python_env

pytestmark = pytest.mark.slow


def test_cold_import_does_not_load_the_sdk() -> None:
    code = ("import sys, crhelper.local.ecs_server; "
            "print(sorted(m for m in sys.modules if m.startswith(('alibabacloud', 'darabonba', 'Tea'))))")
    out = subprocess.run([sys.executable, "-c", code], env=python_env(os.environ), capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.strip() == "[]"


def test_the_standalone_endpoint_serves_and_stops_on_sigterm() -> None:
    env = python_env({**os.environ, "ALIBABA_CLOUD_ACCESS_KEY_ID": "AKIDLOCAL",
                      "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "local-secret"})
    proc = subprocess.Popen([sys.executable, "-m", "crhelper.local.ecs_server", "--delay", "0.05",
                             "--instance", "web:Running"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().split()[2]
        instance_line = proc.stdout.readline().split()
        assert instance_line[0] == "instance" and instance_line[2:] == ["web", "127.0.0.2", "Running"]
        status, _, body = send(endpoint, acs3_request(endpoint, "DescribeInstanceStatus", {"RegionId": REGION},
                                                      "AKIDLOCAL", "local-secret"))
        assert status == 200
        assert body["InstanceStatuses"]["InstanceStatus"] == [{"InstanceId": instance_line[1], "Status": "Running"}]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
