"""Alibaba's template tester `alibabacloud-ros-iact3` runs templates/demo.yaml against the local ROS.

iact3 pins older SDKs (alibabacloud-ros20190910 3.2.16, alibabacloud-tea-openapi 0.3.6), so it lives
in its own virtual environment, `$CRHELPER_IACT3_VENV` (built by .ci/run); `iact3_local.py` gives its
ROS client the local endpoint and protocol 'http'. The test skips without that venv, and fails under
CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from crhelper.ros.server import LocalRos
from ros_support import HERE, REGION, REPO

VENV_ENV = "CRHELPER_IACT3_VENV"


@pytest.fixture
def iact3_python() -> str:
    venv = os.environ.get(VENV_ENV, "")
    python = Path(venv) / "bin" / "python"
    if not venv or not python.is_file():
        message = f"{VENV_ENV} does not name a venv with alibabacloud-ros-iact3 (.ci/run builds one)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} and CI=true")
        pytest.skip(message)
    return str(python)


@pytest.mark.slow
def test_iact3_runs_the_demo_template_to_completion_and_deletes_it(iact3_python: str, tmp_path: Path, home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the demo's bindings name `handlers.routes.provider`, imported from here
    project = tmp_path / "project"
    project.mkdir()
    (project / "demo.yaml").write_text((REPO / "templates" / "demo.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (project / ".iact3.yml").write_text(
        f"project:\n  name: local-demo\n  regions: [{REGION}]\n"
        "tests:\n  demo:\n    parameters:\n      Name: iact\n", encoding="utf-8")
    user = tmp_path / "user"
    (user / ".aliyun").mkdir(parents=True)
    with LocalRos(home=home, bindings=REPO / "templates" / "demo.bindings.yaml", capture_output=True) as ros:
        (user / ".aliyun" / "config.json").write_text(json.dumps({"current": "local", "profiles": [{
            "name": "local", "mode": "AK", "access_key_id": ros.access_key_id,
            "access_key_secret": ros.access_key_secret, "region_id": REGION}]}), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_")}
        env.update(HOME=str(user), IACT3_ROS_ENDPOINT=ros.endpoint)
        done = subprocess.run([iact3_python, str(HERE / "iact3_local.py"), "test", "run", "--project-path", str(project),
                               "--config-file", ".iact3.yml", "--template", "demo.yaml",
                               "--output-directory", str(tmp_path / "out")],
                              cwd=project, env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        result = json.loads((tmp_path / "out" / "local-demo-result.json").read_text(encoding="utf-8"))
        assert result["Result"] == "Success", result
        [detail] = result["Details"]
        assert detail["TestResult"] == "CREATE_COMPLETE"
        stack = ros.stacks.get(detail["StackId"])
        assert stack["StackName"] == detail["StackName"] and stack["Status"] == "DELETE_COMPLETE"  # iact3 deleted it
        statuses = {(e["LogicalResourceId"], e["Status"]) for e in ros.stacks.events(detail["StackId"])}
        assert {("Greeting", "CREATE_COMPLETE"), ("WebRoute", "DELETE_COMPLETE")} <= statuses
        assert "hi iact hi iact" in done.stdout + done.stderr  # iact3 read the Greeting output
