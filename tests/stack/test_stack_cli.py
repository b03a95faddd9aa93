"""`crhelper stack`: the demo end to end through real subprocesses, then each subcommand, output form and exit code."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from stack_support import FC3, REPO, echo_template, run_cli, spec

from crhelper.cli import stack as stack_cli
from crhelper.emulator import StackEmulator

pytestmark = pytest.mark.slow

DEMO = REPO / "templates" / "demo.yaml"


def test_demo_stack_deploys_updates_and_deletes_through_the_cli(home: Path) -> None:
    created = run_cli("create", "templates/demo.yaml", "--stack", "demo")
    assert created.returncode == 0, created.stdout + created.stderr
    lines = created.stdout.splitlines()
    statuses = [line.split()[1:3] for line in lines if line[:2].isdigit()]
    assert statuses[0] == ["demo", "CREATE_IN_PROGRESS"] and statuses[-1] == ["demo", "CREATE_COMPLETE"]
    assert ["Greeting", "CREATE_COMPLETE"] in statuses and ["WebRoute", "CREATE_COMPLETE"] in statuses
    assert statuses.index(["Greeting", "CREATE_COMPLETE"]) < statuses.index(["WebRoute", "CREATE_IN_PROGRESS"])  # DependsOn
    assert "stack demo: CREATE_COMPLETE" in lines
    assert "  Greeting = hi ros hi ros" in lines
    assert "  AppName  = demo-ros" in lines
    assert "  Url      = http://ros.demo.apps.localhost:8080/" in lines

    described = run_cli("describe", "--stack", "demo")
    assert described.returncode == 0
    assert "Status     CREATE_COMPLETE" in described.stdout
    assert "greeting-ros" in described.stdout and "Custom::Route" in described.stdout

    outputs = run_cli("outputs", "--stack", "demo", "--json")
    values = json.loads(outputs.stdout)
    assert values["Greeting"] == "hi ros hi ros" and values["AppName"] == "demo-ros"

    updated = run_cli("update", "--stack", "demo", "-p", "Times=3", "--json")
    assert updated.returncode == 0, updated.stderr
    document = json.loads(updated.stdout)
    assert document["Stack"]["status"] == "UPDATE_COMPLETE"
    assert document["Outputs"]["Greeting"] == "hi ros hi ros hi ros"
    changed = {e["logical_id"] for e in document["Events"] if e["status"] == "UPDATE_COMPLETE"}
    assert changed == {"demo", "Greeting", "App"}  # the route's properties did not change

    deleted = run_cli("delete", "--stack", "demo")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines()[-1] == "stack demo: DELETE_COMPLETE"
    assert "DELETE_COMPLETE" in run_cli("describe", "--stack", "demo").stdout
    events = json.loads(run_cli("events", "--stack", "demo", "--json").stdout)
    assert events[-1]["status"] == "DELETE_COMPLETE" and len(events) >= 20


def cli(*args: str) -> int:
    return stack_cli.main(list(args))


def write_template(tmp_path: Path, text: str, name: str = "t.json") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_create_json_with_flags_and_parameters_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write_template(tmp_path, echo_template(FC3, {"Echo": {"Name": {"Ref": "Who"}}}, Parameters={"Who": {"Type": "String"}}))
    params = write_template(tmp_path, json.dumps([{"ParameterKey": "Who", "ParameterValue": "file"}]), "p.json")
    code = cli("create", template, "--stack", "js", "--parameters", params, "-s", f"{FC3}={spec()}", "--json",
               "--duplicate", "--response-fail-first", "1")
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["Outputs"] == {"EchoName": "file"}
    assert [e["status"] for e in document["Events"]][-1] == "CREATE_COMPLETE"
    assert cli("list", "--json") == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "js"
    assert cli("delete", "--stack", "js") == 0  # remembered bindings: no -s needed
    assert "stack js: DELETE_COMPLETE" in capsys.readouterr().out


def test_failed_create_exits_1_with_the_providers_reason_and_next_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write_template(tmp_path, echo_template(FC3, {"Good": {"Name": "g"}, "Bad": {"Fail": "boom", "Sleep": 0}}))
    code = cli("create", template, "--stack", "bad", "-s", f"{FC3}={spec()}")
    out = capsys.readouterr().out
    assert code == 1
    assert "CREATE_FAILED                 intentional failure: boom" in out
    assert "stack bad: CREATE_ROLLBACK_COMPLETE: Resource Bad failed: intentional failure: boom" in out
    assert "next: fix the provider or template" in out
    assert "crhelper stack delete --stack bad" in out  # a rolled-back stack can be neither updated nor re-created
    assert cli("update", template, "--stack", "bad", "-s", f"{FC3}={spec()}") == 2
    assert "next: `crhelper stack delete --stack bad` first" in capsys.readouterr().err
    assert cli("create", template, "--stack", "bad", "-s", f"{FC3}={spec()}") == 2
    err = capsys.readouterr().err
    assert "next: `crhelper stack delete --stack bad` first" in err and "stack update" not in err


def test_failed_rollback_does_not_claim_the_stack_was_rolled_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken_provider.py"
    broken.write_text("raise RuntimeError('cannot import')\n")
    template = write_template(tmp_path, echo_template(FC3, {"Bad": {"Name": "b"}}))
    assert cli("create", template, "--stack", "stuck", "-s", f"{FC3}={broken}:provider") == 1
    out = capsys.readouterr().out
    assert "stack stuck: CREATE_ROLLBACK_FAILED" in out
    assert "was rolled back" not in out and "the rollback failed too" in out
    assert "crhelper stack delete --stack stuck" in out


def test_disable_rollback_keeps_resources_and_points_to_describe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write_template(tmp_path, echo_template(FC3, {"Bad": {"Fail": "no"}}))
    assert cli("create", template, "--stack", "kept", "-s", f"{FC3}={spec()}", "--disable-rollback") == 1
    assert "crhelper stack describe --stack kept" in capsys.readouterr().out
    assert cli("update", template, "--stack", "kept", "-s", f"{FC3}={spec()}") == 1  # still failing: rolled back
    assert cli("delete", "--stack", "kept") == 0


@pytest.mark.parametrize("args,message,hint", [
    (("describe", "--stack", "ghost"), "stack 'ghost' does not exist", "crhelper stack list"),
    (("create", "missing.yaml", "--stack", "x"), "cannot read template missing.yaml", "templates/demo.yaml is an example"),
    (("create", "templates/demo.yaml", "--stack", "x", "-p", "Times=11"), "Parameters.Times", "crhelper stack validate"),
    (("create", "templates/demo.yaml", "--stack", "x", "-p", "oops"), "expected Key=Value", "-p Key=Value"),
    (("create", "templates/demo.yaml", "--stack", "x", "--bindings", "templates/demo.yaml"), "unknown key(s)", "bindings format"),
])
def test_usage_errors_exit_2_with_what_to_do(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                             args: tuple[str, ...], message: str, hint: str) -> None:
    monkeypatch.chdir(REPO)
    assert cli(*args) == 2
    err = capsys.readouterr().err
    assert message in err and "next: " in err and hint in err


def test_unbound_tokens_are_reported_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write_template(tmp_path, echo_template(FC3, {"A": {}, "B": {}}))
    assert cli("create", template, "--stack", "nobind") == 2
    err = capsys.readouterr().err
    assert f"no provider is bound to ServiceToken {FC3} (used by A, B)" in err
    assert f"add -s '{FC3}=package.module:provider'" in err
    assert cli("list") == 0 and "no local stacks" in capsys.readouterr().out


def test_existing_stack_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = write_template(tmp_path, echo_template(FC3))
    assert cli("create", template, "--stack", "twice", "-s", f"{FC3}={spec()}") == 0
    assert cli("create", template, "--stack", "twice", "-s", f"{FC3}={spec()}") == 2
    assert "crhelper stack delete --stack twice" in capsys.readouterr().err
    assert cli("validate", str(DEMO), "-p", "Name=ok") == 0
    assert "valid" in capsys.readouterr().out


def test_help_teaches_with_examples() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "crhelper stack create templates/demo.yaml --stack demo" in result.stdout
    assert "bindings:" in result.stdout and "Exit codes" in result.stdout
    create_help = run_cli("create", "--help").stdout
    assert "--kill-provider" in create_help and "--response-fail-first" in create_help


def test_update_to_a_template_without_a_previous_parameter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def doc(parameters: dict[str, Any], value: Any) -> str:
        return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Parameters": parameters, "Resources": {
            "A": {"Type": "Custom::Echo", "Properties": {"ServiceToken": FC3, "Parameters": {"V": value}}}}})

    first = write_template(tmp_path, doc({"Old": {"Type": "String"}}, {"Ref": "Old"}), "first.json")
    second = write_template(tmp_path, doc({}, "fixed"), "second.json")
    assert cli("create", first, "--stack", "drop", "-p", "Old=o", "-s", f"{FC3}={spec()}") == 0
    assert cli("update", second, "--stack", "drop", "-s", f"{FC3}={spec()}") == 0, capsys.readouterr().err
    assert "stack drop: UPDATE_COMPLETE" in capsys.readouterr().out


def test_sigterm_mid_create_leaves_a_failed_stack_that_can_be_deleted(tmp_path: Path, home: Path) -> None:
    """A terminated `create` must not leave the stack CREATE_IN_PROGRESS, which no command accepts."""
    template = write_template(tmp_path, echo_template(FC3, {"Slow": {"CreateSleep": 30}}, timeout=60))
    command = [sys.executable, "-m", "crhelper.cli.stack", "create", template, "--stack", "term", "-s", f"{FC3}={spec()}"]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "Slow" in line and "CREATE_IN_PROGRESS" in line:
                break
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with StackEmulator(home) as emulator:
        described = emulator.describe("term")
    assert described.status == "CREATE_FAILED"
    assert described.status_reason == "operation interrupted: SystemExit"
    assert cli("delete", "--stack", "term") == 0


def test_a_stack_busy_in_another_process_points_to_its_events(tmp_path: Path, home: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import sqlite3
    import subprocess
    import sys

    template = write_template(tmp_path, echo_template(FC3))
    assert cli("create", template, "--stack", "busy", "-s", f"{FC3}={spec()}") == 0
    with StackEmulator(home) as emulator:
        record = emulator.store.load("busy")
        assert record is not None
        record.status = "UPDATE_IN_PROGRESS"
        emulator.store.save(record)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a live owner
    try:
        with sqlite3.connect(home / "stacks.sqlite") as db:
            db.execute("INSERT OR REPLACE INTO operations (name, pid, host) VALUES (?, ?, ?)",
                       ("busy", other.pid, socket.gethostname()))
        capsys.readouterr()
        for command in (("update", template), ("delete",)):
            assert cli(*command, "--stack", "busy", "-s", f"{FC3}={spec()}") == 2
            err = capsys.readouterr().err
            assert f"stack 'busy' is busy: crhelper process {other.pid}" in err
            assert "next: another crhelper process is running an operation on it" in err, err
            assert "crhelper stack events --stack busy" in err
    finally:
        other.kill()
        other.wait(5)
    # Its owner gone (killed), the stack is marked interrupted and can be deleted.
    assert cli("delete", "--stack", "busy", "-s", f"{FC3}={spec()}") == 0
    with StackEmulator(home) as emulator:
        assert emulator.describe("busy").status == "DELETE_COMPLETE"
        interrupted = [e for e in emulator.events("busy") if e.status == "UPDATE_FAILED"]
    assert [e.logical_id for e in interrupted] == ["busy"]
    assert interrupted[0].reason.startswith("interrupted: the crhelper process running this operation stopped")


def test_parallelism_flag_bounds_requests_and_stays_with_the_stack(tmp_path: Path, home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--parallelism N (ROS Parallelism): N requests at a time, kept for the stack's update; a bad
    value is a usage error before anything runs; without it nothing caps independent resources."""
    sleepy: dict[str, dict[str, Any]] = {f"R{i}": {"Name": f"r{i}", "Sleep": 0.3} for i in range(3)}
    template = write_template(tmp_path, echo_template(FC3, sleepy))
    bind = ("-s", f"{FC3}={spec()}", "--in-process")  # timed: no worker start-up in the figures
    with pytest.raises(SystemExit) as usage:
        cli("create", template, "--stack", "bad", "--parallelism", "-2", *bind)
    assert usage.value.code == 2
    assert "--parallelism: must be a whole number >= 0 (0 means no limit), got '-2'" in capsys.readouterr().err
    with StackEmulator(home) as emulator:
        assert emulator.list_stacks() == []

    started = time.monotonic()
    assert cli("create", template, "--stack", "one", "--parallelism", "1", *bind) == 0
    assert time.monotonic() - started >= 0.9  # three 0.3 s Creates, one at a time
    with StackEmulator(home) as emulator:
        assert emulator.store.load("one").parallelism == 1  # type: ignore[union-attr]
    renamed = {n: {**p, "Name": f"{p['Name']}x"} for n, p in sleepy.items()}
    changed = write_template(tmp_path, echo_template(FC3, renamed), "u.json")
    assert cli("update", changed, "--stack", "one", *bind) == 0
    with StackEmulator(home) as emulator:
        assert emulator.store.load("one").parallelism == 1  # type: ignore[union-attr]

    started = time.monotonic()
    assert cli("create", template, "--stack", "all", *bind) == 0
    assert time.monotonic() - started < 0.9  # no limit by default, as in ROS
