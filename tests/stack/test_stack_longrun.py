"""`InProgress` on every local delivery path, through the CLI as a user runs it: the emulator waits
for the answer until the resource's Timeout, emulated FC functions get a shared store and their
endpoint through their environment, and an operation that never finishes fails with a clear reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from stack_support import FC2, FC3, QUEUE, TOPIC, run_cli

HERE = Path(__file__).resolve().parent
SLOW = f"{HERE / 'longrun_providers.py'}:provider"


def slow_template(token: str, polls: int = 3, timeout: float = 30) -> str:
    resource = {"Type": "Custom::Slow", "Properties": {
        "ServiceToken": token, "Timeout": timeout, "Parameters": {"Polls": polls, "Delay": 0.2}}}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {"Slow": resource},
                       "Outputs": {"Steps": {"Value": {"Fn::GetAtt": ["Slow", "Steps"]}},
                                   "Attempt": {"Value": {"Fn::GetAtt": ["Slow", "Attempt"]}},
                                   "Marker": {"Value": {"Fn::GetAtt": ["Slow", "Marker"]}}}})


def create(tmp_path: Path, token: str, *extra: str, template: str | None = None) -> dict:
    path = tmp_path / "slow.json"
    path.write_text(template or slow_template(token))
    done = run_cli("create", str(path), "--stack", "slow", "--json", "-s", f"{token}={SLOW}", *extra, timeout=90)
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("token, extra", [
    (FC2, ()), (FC3, ()), (FC2, ("--in-process",)), (QUEUE, ()), (TOPIC, ()),
], ids=["fc2-endpoint", "fc3-endpoint", "in-process-mode", "mns-queue", "mns-topic"])
def test_a_three_step_create_completes_on_every_path(tmp_path: Path, token: str, extra: tuple[str, ...]) -> None:
    document = create(tmp_path, token, *extra)
    assert document["Stack"]["status"] == "CREATE_COMPLETE", document["Stack"]
    # polls + 1 calls: the request, then two continuations carrying the state
    assert document["Outputs"]["Steps"] == 3 and document["Outputs"]["Attempt"] == 2


@pytest.mark.slow
def test_emulated_functions_take_their_environment_from_the_bindings(tmp_path: Path) -> None:
    bindings = tmp_path / "b.yaml"
    bindings.write_text(f"bindings:\n  {FC2}: {SLOW}\nenvironment:\n  LONGRUN_MARKER: from-bindings\n"
                        f"  CRHELPER_STORE: sqlite:///{tmp_path / 'own.sqlite'}\n")
    document = create(tmp_path, FC2, "--bindings", str(bindings))
    assert document["Stack"]["status"] == "CREATE_COMPLETE", document["Stack"]
    assert document["Outputs"]["Marker"] == "from-bindings"
    assert (tmp_path / "own.sqlite").is_file()  # the function's continuations lived in the store it was given


@pytest.mark.slow
def test_an_operation_that_outlives_its_timeout_fails_saying_it_was_in_progress(tmp_path: Path) -> None:
    document = create(tmp_path, FC2, template=slow_template(FC2, polls=1000, timeout=2))
    stack = document["Stack"]
    assert stack["status"] == "CREATE_ROLLBACK_COMPLETE", stack
    reason = next(e["reason"] for e in document["Events"] if e["status"] == "CREATE_FAILED")
    assert "timed out after 2 s" in reason and "still in progress" in reason


@pytest.mark.slow
def test_duplicates_on_an_mns_queue_cost_well_under_the_old_five_second_grace(tmp_path: Path) -> None:
    started = time.monotonic()
    document = create(tmp_path, QUEUE, "--duplicate", template=slow_template(QUEUE, polls=1))
    elapsed = time.monotonic() - started
    assert document["Stack"]["status"] == "CREATE_COMPLETE", document["Stack"]
    assert elapsed < 4.5, f"create with --duplicate took {elapsed:.1f} s"
