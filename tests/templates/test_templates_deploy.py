"""The deployment templates end to end in the stack emulator, with no bindings file: the deploy
stack makes its role, state bucket (local OSS), topics (local MNS), functions (local Function
Compute, code read from the local OSS bucket), triggers and async configuration; then the routes
example, whose ServiceToken parameter is the deploy stack's output, reaches the routes function in
both token forms (FC 3.0 `functions/F`, FC 2.0 `services/S/functions/F`) and through the MNS topic
its mns_topic trigger listens to, and the function keeps its state in the stack's bucket through the
s3:// store.

The code object stands in for `crhelper package`'s zip without a package index (tests never reach
one): its `index.py` is the packaged entry plus this checkout and the test interpreter's
site-packages on sys.path (pure-Python dependencies such as boto3 import under any version)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

import crhelper
from crhelper import paths
from crhelper.emulator import StackEmulator, StackEvent
from crhelper.emulator.cloud_local_oss import OssFolder, oss_root

pytestmark = pytest.mark.slow

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
CHECKOUT = str(Path(crhelper.__file__).resolve().parents[1])


def no_bindings(token: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    raise AssertionError(f"request for {token} left the emulator's own functions")


@pytest.fixture
def code_package() -> Path:
    """The code object the templates' defaults name: crhelper-code/crhelper-providers.zip."""
    target = oss_root() / "crhelper-code" / "crhelper-providers.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    site = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    index = (f"import sys\nsys.path[:0] = [{CHECKOUT!r}]\nsys.path += {site!r}\n"
             "from crhelper.fc import handler  # noqa: F401\n")
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr(zipfile.ZipInfo("index.py", (1980, 1, 1, 0, 0, 0)), index)
    return target


def failures(events: list[StackEvent]) -> list[str]:
    return [f"{e.logical_id}: {e.reason}" for e in events if e.status.endswith("FAILED")]


def crhelper_stack(*args: str) -> dict[str, Any]:
    """`crhelper stack ... --json` as a real process (the user's path; CRHELPER_HOME is this test's)."""
    done = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "stack", *args, "--json"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dict(json.loads(done.stdout)["Stack"])


def test_fc3_deploy_template_then_the_routes_example_through_the_cli_with_no_bindings(code_package: Path,
                                                                                    tmp_path: Path) -> None:
    deployed = crhelper_stack("create", str(TEMPLATES / "deploy-fc3.yaml"), "--stack", "providers",
                              "-p", f"RouterDb={tmp_path / 'routes.db'}", "-p", "StateBucketDeletionForce=true")
    outputs = {o["key"]: o["value"] for o in deployed["outputs"]}
    token = outputs["RoutesServiceToken"]
    assert token == "acs:fc:cn-hangzhou:123456789:functions/crhelper-routes"  # the FC 3.0 form
    assert outputs["RoutesTopicServiceToken"] == "acs:mns:cn-hangzhou:123456789:/topics/crhelper-routes"
    routes = crhelper_stack("create", str(TEMPLATES / "examples" / "routes.yaml"), "--stack", "routes",
                            "-p", f"ServiceToken={token}")
    answered = {o["key"]: o["value"] for o in routes["outputs"]}
    assert answered["WebUrl"] == "http://shop.routes.apps.localhost:8080/"
    assert crhelper_stack("delete", "--stack", "routes")["status"] == "DELETE_COMPLETE"
    assert crhelper_stack("delete", "--stack", "providers")["status"] == "DELETE_COMPLETE"
    assert not OssFolder().has_bucket("crhelper-state-123456789")


def test_fc2_deploy_template_then_the_routes_example_by_arn_and_by_topic_keeps_state_in_the_stacks_bucket(code_package: Path,
                                                                                        tmp_path: Path) -> None:
    token = "acs:fc:cn-hangzhou:123456789:services/crhelper-providers/functions/crhelper-routes"  # the FC 2.0 form
    events: list[StackEvent] = []
    with StackEmulator(paths.home()) as emulator:
        created = emulator.create("providers", (TEMPLATES / "deploy-fc2.yaml").read_text(),
                                  {"RouterDb": str(tmp_path / "routes.db")}, no_bindings, on_event=events.append)
        assert created.status == "CREATE_COMPLETE", failures(events)
        outputs = emulator.outputs("providers")
        assert outputs["RoutesServiceToken"] == token
        assert outputs["BootGroupsServiceToken"] == token.replace("crhelper-routes", "crhelper-bootgroups")
        bucket = "crhelper-state-123456789"
        assert outputs["StateStore"].startswith(f"s3://{bucket}/crhelper/?endpoint=https://s3.oss-cn-hangzhou-internal")
        state = OssFolder()
        assert state.has_bucket(bucket) and not state.objects(bucket)

        events.clear()
        routes = emulator.create("routes", (TEMPLATES / "examples" / "routes.yaml").read_text(),
                                 {"ServiceToken": token}, no_bindings, on_event=events.append)
        assert routes.status == "CREATE_COMPLETE", failures(events)
        answered = emulator.outputs("routes")
        assert answered["TcpUrl"].startswith("tcp://127.0.0.1:")
        # The function kept its idempotency records in the stack's bucket, through the local OSS.
        records = [o.key for o in state.objects(bucket, "crhelper/idem/")]
        assert len(records) >= 3, [o.key for o in state.objects(bucket)]
        assert json.loads(state.get(bucket, records[0]))
        # The MNS form of the token: the request published to the topic reaches the function through
        # its mns_topic trigger (JSON notification), as MNS pushes it.
        topic = outputs["RoutesTopicServiceToken"]
        assert topic == "acs:mns:cn-hangzhou:123456789:/topics/crhelper-routes"
        by_topic = emulator.create("routes-mns", (TEMPLATES / "examples" / "routes.yaml").read_text(),
                                   {"ServiceToken": topic, "Name": "blog"}, no_bindings, on_event=events.append)
        assert by_topic.status == "CREATE_COMPLETE", failures(events)
        assert emulator.outputs("routes-mns")["WebUrl"] == "http://blog.routes-mns.apps.localhost:8080/"
        assert emulator.delete("routes-mns", no_bindings).status == "DELETE_COMPLETE"

        # An update of the deploy stack re-deploys the functions and changes their triggers in place.
        updated = emulator.update("providers", (TEMPLATES / "deploy-fc2.yaml").read_text(),
                                  {"RouterDb": str(tmp_path / "routes.db"), "ResumeSchedule": "@every 10m",
                                   "MemorySize": 1024}, no_bindings)
        assert updated.status == "UPDATE_COMPLETE", updated.status_reason
        assert emulator.delete("routes", no_bindings).status == "DELETE_COMPLETE"

        # DeletionForce false (the default): the bucket holding records is kept, as OSS refuses.
        kept = emulator.delete("providers", no_bindings)
        assert kept.status == "DELETE_FAILED" and "BucketNotEmpty" in kept.status_reason
        assert state.has_bucket(bucket) and state.has_bucket("crhelper-code")
