"""`crhelper invoke` as a user runs it: a real process, the sample provider and events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crhelper.cli.invoke import Refused, heartbeat_interval

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


@pytest.mark.slow
def test_invoke_exits_1_on_failed(tmp_path):
    event = json.loads((REPO / "samples/events/create.json").read_text())
    event["ResourceProperties"] = {"Name": "x", "Times": 99}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(event))
    result = crhelper("invoke", "samples/greeting.py:provider", "--event", str(path))
    assert result.returncode == 1
    assert "ResourceProperties.Times: Input should be less than or equal to 10" in json.loads(result.stdout)["Reason"]


@pytest.mark.slow
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


FLAKY_PROVIDER = '''
import os

from crhelper import Failure, Provider, Request, Result

provider = Provider()


@provider.create("Custom::Flaky")
def create(props: dict, request: Request) -> Result:
    if os.path.exists(os.environ["FLAKY_BROKEN_MARKER"]):
        raise Failure("still broken")
    return Result(physical_id="flaky-1")
'''


def _flaky(tmp_path: Path) -> tuple[Path, Path, Path, dict[str, str]]:
    """A provider that fails while a marker file exists, an event for it, and its environment."""
    provider = tmp_path / "flaky_provider.py"
    provider.write_text(FLAKY_PROVIDER, encoding="utf-8")
    event = json.loads((REPO / "samples/events/create.json").read_text(encoding="utf-8"))
    event["ResourceType"] = "Custom::Flaky"
    event_path = tmp_path / "flaky.json"
    event_path.write_text(json.dumps(event), encoding="utf-8")
    marker = tmp_path / "broken"
    marker.touch()
    return provider, event_path, marker, {"FLAKY_BROKEN_MARKER": str(marker)}


def crhelper_env(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crhelper.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


@pytest.mark.slow  # several processes
def test_invoke_runs_a_fixed_provider_again_even_with_a_persistent_store_in_the_environment(tmp_path):
    provider, event, marker, env = _flaky(tmp_path)
    env["CRHELPER_STORE"] = f"sqlite:///{tmp_path / 'persistent.sqlite'}"  # what a user's shell may carry
    first = crhelper_env("invoke", str(provider), "--event", str(event), env=env)
    assert first.returncode == 1 and json.loads(first.stdout)["Reason"] == "still broken", first.stderr
    marker.unlink()  # the provider is fixed; the same event is sent again
    second = crhelper_env("invoke", str(provider), "--event", str(event), env=env)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["Status"] == "SUCCESS"
    assert "CRHELPER_STORE is not used: this run has a private store" in second.stderr


@pytest.mark.slow  # several processes
def test_invoke_store_shares_records_between_runs(tmp_path):
    provider, event, marker, env = _flaky(tmp_path)
    marker.unlink()
    store = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    first = crhelper_env("invoke", str(provider), "--event", str(event), "--store", store, env=env)
    assert first.returncode == 0, first.stderr
    again = crhelper_env("invoke", str(provider), "--event", str(event), "--store", store, "--json", env=env)
    document = json.loads(again.stdout)  # answered, so the duplicate is not answered again
    assert again.returncode == 2 and document["response"] is None
    assert document["outcome"]["error"]["problem"] == "no response reached the ResponseURL"
    assert "give the event a new RequestId, or leave --store out" in document["outcome"]["error"]["next_step"]


def test_invoke_refuses_a_malformed_store_url(tmp_path):
    result = crhelper("invoke", "samples/greeting.py", "--event", "samples/events/create.json", "--store", "nosuch://x")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("crhelper invoke: --store: unknown store scheme 'nosuch://'"), result.stderr


def test_invoke_a_file_without_attribute_means_its_provider():
    # samples/greeting.py without :provider is exercised by the --json tests below, from the repository root
    result = crhelper("invoke", "greeting.py", "--event", str(REPO / "samples/events/create.json"), cwd=REPO / "samples")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["PhysicalResourceId"] == "greeting-ros"


@pytest.mark.parametrize("source, spec_suffix, problem, next_step", [
    ("from crhelper import Provider\nprovider = Provider(\n", "",
     "broken_syntax.py:2: SyntaxError: '(' was never closed", "fix the syntax at that line"),
    ("import os\nimport dependency_not_installed_xyz\n", ":provider",
     "broken_syntax.py:2: ModuleNotFoundError: No module named 'dependency_not_installed_xyz'",
     "install the package that provides 'dependency_not_installed_xyz'"),
    ("X = 1\nraise RuntimeError('no config file\\nsecond line')\n", "",
     "broken_syntax.py:2: RuntimeError: no config file ...", "`python broken_syntax.py` shows the traceback"),
])
def test_invoke_reports_a_broken_provider_in_one_line_and_exits_2(tmp_path, source, spec_suffix, problem, next_step):
    (tmp_path / "broken_syntax.py").write_text(source, encoding="utf-8")
    result = crhelper("invoke", "broken_syntax.py" + spec_suffix, "--event", str(REPO / "samples/events/create.json"),
                      cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"crhelper invoke: cannot load broken_syntax.py{spec_suffix}: {problem}; next: "), lines[0]
    assert next_step in lines[0]


@pytest.mark.slow
def test_invoke_json_is_one_document_with_the_response_and_the_outcome():
    result = crhelper("invoke", "samples/greeting.py", "--event", "samples/events/create.json", "--json",
                      "--fail-first", "1")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["response"]["Status"] == "SUCCESS" and document["response"]["Data"] == {"Text": "hi ros hi ros"}
    raw = json.dumps(document["response"], separators=(",", ":"))
    seconds = document["outcome"].pop("seconds")
    assert isinstance(seconds, float) and 0 < seconds < 30
    assert document["outcome"] == {"status": "SUCCESS", "exit_code": 0, "method": "POST", "bytes": len(raw.encode()),
                                   "attempts": 2, "violations": [], "polls": 0, "error": None}


@pytest.mark.slow  # several processes
def test_invoke_json_failed_and_errors_are_json_too(tmp_path):
    event = json.loads((REPO / "samples/events/create.json").read_text())
    event["ResourceProperties"] = {"Name": "x", "Times": 99}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(event))
    failed = crhelper("invoke", "samples/greeting.py", "--event", str(bad), "--json")
    document = json.loads(failed.stdout)
    assert failed.returncode == 1 and document["outcome"]["status"] == "FAILED" and document["outcome"]["exit_code"] == 1
    assert "ResourceProperties.Times" in document["response"]["Reason"]

    (tmp_path / "list.json").write_text("[1, 2]")
    for args, problem in [
        (("samples/nope.py", "--event", "samples/events/create.json"), "no such file: samples/nope.py"),
        (("samples/greeting.py", "--event", str(tmp_path / "list.json")), "must be a JSON object (one ROS request)"),
        (("samples/greeting.py", "--event", str(tmp_path / "missing.json")), "cannot read --event"),
    ]:
        result = crhelper("invoke", *args, "--json")
        assert result.returncode == 2, result.stderr
        error = json.loads(result.stdout)
        assert error["response"] is None and error["outcome"]["status"] == "ERROR"
        assert error["outcome"]["exit_code"] == 2 and problem in error["outcome"]["error"]["problem"]
        assert error["outcome"]["error"]["next_step"]


POLLING_PROVIDER = '''
from crhelper import InProgress, Provider, Request, Result

provider = Provider()


@provider.create("Custom::Polled")
def create(props: dict, request: Request) -> Result | InProgress:
    step = (request.state or {}).get("step", 0) + 1
    if step < int(props["Calls"]):
        return InProgress(state={"step": step}, delay=float(props["Delay"]))
    return Result(physical_id="polled-1", data={"Steps": step, "Attempt": request.attempt})
'''


def _polled(tmp_path: Path, calls: int, delay: float) -> tuple[Path, Path]:
    """A provider answering after `calls` calls `delay` s apart, and a Create event for it."""
    provider = tmp_path / "polled_provider.py"
    provider.write_text(POLLING_PROVIDER, encoding="utf-8")
    event = json.loads((REPO / "samples/events/create.json").read_text(encoding="utf-8"))
    event.update(ResourceType="Custom::Polled", ResourceProperties={"Calls": calls, "Delay": delay})
    event_path = tmp_path / "polled.json"
    event_path.write_text(json.dumps(event), encoding="utf-8")
    return provider, event_path


HEARTBEAT = {"CRHELPER_HEARTBEAT_INTERVAL": "0.2"}


@pytest.mark.parametrize("options", [[], ["--timeout", "30"]], ids=["local", "as-a-function"])
@pytest.mark.slow
def test_invoke_waits_for_a_long_operation_and_prints_a_heartbeat(tmp_path, options):
    # --timeout acts as a Function Compute function, whose context has no endpoint to re-invoke:
    # invoke continues the operation in its own process all the same.
    provider, event = _polled(tmp_path, calls=3, delay=0.2)
    result = crhelper_env("invoke", str(provider), "--event", str(event), "--json", *options, env=HEARTBEAT)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["response"]["Status"] == "SUCCESS"
    assert document["response"]["Data"] == {"Steps": 3, "Attempt": 2}  # the third call, state carried
    outcome = document["outcome"]
    assert (outcome["attempts"], outcome["polls"], outcome["violations"]) == (1, 2, [])  # exactly one answer
    assert 0.4 <= outcome["seconds"] < 5
    beats = [line for line in result.stderr.splitlines() if line.startswith("crhelper invoke: in progress, ")]
    assert beats and beats[0].endswith(" poll(s)"), result.stderr


@pytest.mark.slow  # waits out --wait in a real process
def test_invoke_past_wait_exits_2_with_the_next_step(tmp_path):
    provider, event = _polled(tmp_path, calls=1000, delay=0.1)
    started = time.monotonic()
    result = crhelper_env("invoke", str(provider), "--event", str(event), "--wait", "0.6", env=HEARTBEAT)
    assert time.monotonic() - started < 10
    assert result.returncode == 2, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("crhelper invoke: the operation was still in progress after --wait 0.6 s ("), last
    assert "poll(s), no answer at the ResponseURL); next: give --wait more seconds" in last
    assert result.stdout == ""


@pytest.mark.slow  # a real process interrupted while it waits
def test_invoke_ctrl_c_while_waiting_exits_2_with_a_message(tmp_path):
    provider, event = _polled(tmp_path, calls=1000, delay=0.1)
    process = subprocess.Popen([sys.executable, "-m", "crhelper.cli.main", "invoke", str(provider), "--event", str(event),
                                "--json"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **HEARTBEAT})
    try:
        assert process.stderr is not None
        for line in process.stderr:  # interrupt once it is visibly waiting
            if line.startswith("crhelper invoke: in progress, "):
                break
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 2
    error = json.loads(out)["outcome"]["error"]
    assert error["problem"].startswith("interrupted while the operation was in progress (")
    assert error["next_step"] == "run again to start over (this run's private store is gone)"


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_a_bad_heartbeat_interval_is_refused_naming_the_setting(value):
    with pytest.raises(Refused) as refused:
        heartbeat_interval({"CRHELPER_HEARTBEAT_INTERVAL": value})
    assert refused.value.problem.startswith("CRHELPER_HEARTBEAT_INTERVAL: ")
    assert heartbeat_interval({}) == 10.0
