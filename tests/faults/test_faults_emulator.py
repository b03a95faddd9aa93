"""Faults of the local ROS itself, end to end: a SIGKILLed `crhelper stack` process and FC worker kills.

Real `crhelper` subprocesses and real signals; processes of a run are found by a marker in their
environment (the FC workers inherit the endpoint's environment), so nothing of ours is patched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from crhelper.emulator import StackEmulator
from crhelper.emulator.delivery import StackDelivery
from crhelper.emulator.delivery_bindings import Bindings, Faults

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow
FC2 = "acs:fc:cn-hangzhou:123456789:services/faults/functions/slow"
MARKER = "CRHELPER_FAULTS_RUN"

PROVIDER_SOURCE = '''
import os
import time
from pathlib import Path

from crhelper import Provider, Request, Result

provider = Provider()


@provider.create("Custom::Slow")
def create(props: dict, request: Request) -> Result:
    if props.get("Started"):
        Path(props["Started"]).write_text(str(os.getpid()))
    time.sleep(float(props.get("Sleep", 0)))
    return Result(physical_id="slow-" + request.logical_resource_id, data={"Pid": os.getpid()})


@provider.delete("Custom::Slow")
def delete(props: dict, request: Request) -> None:
    return None
'''


@pytest.fixture
def home(stack_home: Path) -> Path:
    return stack_home


@pytest.fixture
def provider_spec(tmp_path: Path) -> str:
    path = tmp_path / "faults_slow_provider.py"
    path.write_text(PROVIDER_SOURCE, encoding="utf-8")
    return f"{path}:provider"


def slow_template(tmp_path: Path, resources: dict[str, dict[str, Any]], timeout: float = 60) -> str:
    body = {name: {"Type": "Custom::Slow", "Properties": {"ServiceToken": FC2, "Timeout": timeout, "Parameters": params}}
            for name, params in resources.items()}
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": body}), encoding="utf-8")
    return str(path)


def stack_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", "stack", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60)


def marked_processes(run: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries this run's marker."""
    needle = f"{MARKER}={run}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(int(entry))
    return found


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="scans /proc")
def test_sigkilled_stack_create_leaves_no_worker_and_reports_the_stack_interrupted(
        tmp_path: Path, home: Path, provider_spec: str) -> None:
    started = tmp_path / "handler-started"
    template = slow_template(tmp_path, {"Slow": {"Started": str(started), "Sleep": 30}})
    run = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "crhelper.cli.main", "stack", "create", template, "--stack", "killed",
         "-s", f"{FC2}={provider_spec}"],
        cwd=REPO, env={**os.environ, MARKER: run}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(started.exists, 30, "the provider's handler to start in an FC worker")
        worker = int(started.read_text())
        ours = marked_processes(run)
        assert process.pid in ours and worker in ours, (process.pid, worker, ours)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=5) == -signal.SIGKILL
        wait_for(lambda: not marked_processes(run), 3, f"the FC worker(s) {marked_processes(run)} to die with crhelper")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in marked_processes(run):  # never leave a 30 s sleeper behind a failed assertion
            os.kill(pid, signal.SIGKILL)

    described = stack_cli("describe", "--stack", "killed", "--json")
    assert described.returncode == 0, described.stderr
    stack = json.loads(described.stdout)
    assert stack["status"] == "CREATE_FAILED", stack
    assert stack["status_reason"].startswith("interrupted: the crhelper process running this operation stopped"), stack
    assert [r["status"] for r in stack["resources"]] == ["CREATE_FAILED"]
    listed = stack_cli("list", "--json")
    assert [(s["name"], s["status"]) for s in json.loads(listed.stdout)] == [("killed", "CREATE_FAILED")]
    deleted = stack_cli("delete", "--stack", "killed", "--json")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert json.loads(deleted.stdout)["Stack"]["status"] == "DELETE_COMPLETE"


def accepted_per_request(deliver: StackDelivery) -> Counter[str]:
    """RequestId -> answers the ResponseURL accepted (HTTP 200)."""
    return Counter(str((c.body or {}).get("RequestId")) for c in deliver.server.captures if c.status == 200)


@pytest.fixture
def emulator(home: Path) -> Iterator[StackEmulator]:
    with StackEmulator(home) as instance:
        yield instance


def test_kill_provider_mid_handler_with_a_shared_sqlite_store_answers_each_request_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, emulator: StackEmulator, provider_spec: str) -> None:
    """The worker is SIGKILLed while its handler holds the request's claim in a store every worker
    shares; FC's retry must take over from the dead holder instead of waiting for it forever.
    The kill comes 0.8 s in, well after the provider has loaded and claimed the request."""
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'store.db'}")  # inherited by the FC workers
    template = json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": {
        name: {"Type": "Custom::Slow", "Properties": {"ServiceToken": FC2, "Timeout": 8, "Parameters": {"Sleep": 2.0}}}
        for name in ("One", "Two")}})
    bindings = Bindings(faults=Faults(kill_provider=True, kill_provider_after=0.8)).with_flags([f"{FC2}={provider_spec}"])
    with StackDelivery(bindings) as deliver:
        created = emulator.create("shared", template, {}, deliver, disable_rollback=True)
        assert deliver.fc.fc.wait_idle(10)
        records = deliver.fc.fc.records
        accepted = accepted_per_request(deliver)
    assert created.status == "CREATE_COMPLETE", created.status_reason
    assert sorted(accepted.values()) == [1, 1], accepted
    assert all(record.attempts[0].outcome == "error" for record in records)  # each first attempt was killed


def test_cli_kill_provider_after_with_a_shared_sqlite_store_completes(tmp_path: Path, home: Path, provider_spec: str) -> None:
    """The same through `crhelper stack create --kill-provider --kill-provider-after` as a user runs it."""
    template = slow_template(tmp_path, {"One": {"Sleep": 2.0}, "Two": {"Sleep": 2.0}}, timeout=8)
    created = stack_cli("create", template, "--stack", "shared-cli", "-s", f"{FC2}={provider_spec}", "--json",
                        "--kill-provider", "--kill-provider-after", "0.8",
                        env={"CRHELPER_STORE": f"sqlite:///{tmp_path / 'store.db'}"})
    assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
    document = json.loads(created.stdout)
    assert document["Stack"]["status"] == "CREATE_COMPLETE"
    completed = Counter(e["logical_id"] for e in document["Events"] if e["status"] == "CREATE_COMPLETE")
    assert completed == {"One": 1, "Two": 1, "shared-cli": 1}
