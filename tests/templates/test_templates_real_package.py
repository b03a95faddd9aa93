"""The deployment template locally with the real `crhelper package` zip, as the README tells a user:
package the routes provider for python3.12 into the local OSS bucket the template names, create the
deploy stack, then the routes example through its ServiceToken output. The local Function Compute
runs the function under python3.12 from its read-only code folder, importing the package's own
(trimmed) crhelper and its cp312 wheels, not this checkout's.

Tests never reach a package index: the cp312 wheels come from a wheelhouse on disk that `.ci/run`
downloads beforehand (`CRHELPER_WHEELHOUSE_PY312`)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from cli_support import crhelper_json
from crhelper.emulator.cloud_local_oss import oss_root

pytestmark = pytest.mark.slow

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
crhelper = functools.partial(crhelper_json, timeout=300)


def test_the_fc3_deploy_template_runs_the_real_package_under_python312(
        wheelhouse: Path, required_python: Callable[[str], str], tmp_path: Path) -> None:
    required_python("3.12")
    code = oss_root() / "crhelper-code" / "crhelper-providers.zip"
    code.parent.mkdir(parents=True, exist_ok=True)
    built = crhelper("package", "routes", "--extra", "oss", "--runtime", "python3.12", "--no-index",
                     "--find-links", str(wheelhouse), "--output", str(code))
    assert built["runtime"] == "python3.12" and "cpython-312" in built["bytecode"]
    assert any(w["name"] == "pydantic_core" and any("cp312" in t for t in w["tags"]) for w in built["wheels"])

    deployed = crhelper("stack", "create", str(TEMPLATES / "deploy-fc3.yaml"), "--stack", "providers",
                        "-p", f"RouterDb={tmp_path / 'routes.db'}", "-p", "StateBucketDeletionForce=true")["Stack"]
    assert deployed["status"] == "CREATE_COMPLETE", deployed
    token = {o["key"]: o["value"] for o in deployed["outputs"]}["RoutesServiceToken"]
    routes = crhelper("stack", "create", str(TEMPLATES / "examples" / "routes.yaml"), "--stack", "routes",
                      "-p", f"ServiceToken={token}")["Stack"]
    assert routes["status"] == "CREATE_COMPLETE", routes
    assert {o["key"]: o["value"] for o in routes["outputs"]}["WebUrl"] == "http://shop.routes.apps.localhost:8080/"
    # the route is in the database the packaged provider wrote, under python3.12
    assert (tmp_path / "routes.db").stat().st_size > 0
    logs = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "stack", "logs", "--stack", "routes"],
                          capture_output=True, text=True, timeout=60)
    assert "No module named" not in logs.stdout + logs.stderr
    assert crhelper("stack", "delete", "--stack", "routes")["Stack"]["status"] == "DELETE_COMPLETE"
    assert crhelper("stack", "delete", "--stack", "providers")["Stack"]["status"] == "DELETE_COMPLETE"
