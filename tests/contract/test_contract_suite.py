"""The contract suite against the example provider, both routing types, and providers that break it on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from contract_providers import Broken, Slow, leaky

from crhelper.contract import CHECKS, ContractReport, Harness, run_contract
from crhelper.cli.contract import main as contract_main
from handlers.routes.provider import build_provider

REPO = Path(__file__).resolve().parents[2]
GREETING = REPO / "samples" / "greeting.py"


def verdicts(report: ContractReport) -> dict[str, str]:
    return {c.name: c.verdict for c in report.checks}


def greeting_provider() -> Any:
    from crhelper.loading import load_provider

    return load_provider(f"{GREETING}:provider")


def test_example_provider_passes_every_check() -> None:
    report = run_contract(greeting_provider(), "Custom::Greeting", {"Name": "c", "Times": 1}, {"Name": "c", "Times": 3})
    assert [c.name for c in report.checks] == list(CHECKS)
    assert report.passed, report.failures()
    assert report.check("update-keeps-id").detail.startswith("kept 'greeting-c'")
    assert report.check("rollback-update").detail == (
        "the rollback Update (properties swapped back) after the Update kept 'greeting-c' and the Create's Data")
    assert (verdicts(report)["long-running"], report.check("long-running").detail) == (
        "SKIP", "the Create was answered in its first call (no InProgress for these properties)")


def test_update_check_is_skipped_without_update_properties() -> None:
    report = run_contract(greeting_provider(), "Custom::Greeting", {"Name": "c"})
    assert report.passed and verdicts(report)["update-keeps-id"] == "SKIP"
    assert (verdicts(report)["rollback-update"], report.check("rollback-update").detail) == (
        "SKIP", "no --update properties given")


def test_routing_app_and_route_pass_the_contract() -> None:
    routes = build_provider()
    app = run_contract(routes, "Custom::App", {"Name": "shop"}, {"Name": "shop", "Meta": {"team": "web"}})
    assert app.passed, app.failures()
    with Harness(routes, "Custom::App") as h:
        owner = h.send("Create", {"Name": "owner"})
    assert owner.status == "SUCCESS"
    route = {"App": "owner", "Type": "http", "Service": "owner-web", "Domain": "owner.example.com"}
    report = run_contract(routes, "Custom::Route", route, {**route, "Sticky": True})
    assert report.passed, report.failures()


def test_broken_provider_fails_exactly_the_checks_it_breaks() -> None:
    report = run_contract(Broken(), "Custom::Thing", {"Size": 1}, {"Size": 2})
    assert verdicts(report) == {
        "create-delete": "PASS",
        "create-duplicate": "FAIL",
        "update-keeps-id": "FAIL",
        "rollback-update": "FAIL",
        "delete-twice": "FAIL",
        "delete-failed-create": "FAIL",
        "delete-unknown": "FAIL",
        "long-running": "SKIP",
        "response-limits": "FAIL",
        "no-secrets-in-logs": "FAIL",
        "time-budget": "PASS",
    }
    assert "PhysicalResourceId changed from 'broken-" in report.check("create-duplicate").detail
    assert report.check("delete-failed-create").detail == "FAILED (no such resource), PhysicalResourceId 'crhelper:CREATE_FAILED'"
    assert "body is 5" in report.check("response-limits").detail
    assert report.check("rollback-update").detail.startswith(
        "the rollback Update (properties swapped back) after the Update: PhysicalResourceId changed from 'broken-")
    assert report.check("long-running").detail == "not a crhelper Provider: its continuations cannot be observed"
    assert report.check("no-secrets-in-logs").detail == "found a ResponseURL (or its signature) of the Create request"


def test_secret_property_values_in_logs_are_found() -> None:
    report = run_contract(leaky, "Custom::Db", {"Name": "main", "Password": "hunter2-very-secret"}, secrets=["Password"])
    assert verdicts(report)["no-secrets-in-logs"] == "FAIL"
    assert report.check("no-secrets-in-logs").detail == "found the value of secret property Password"
    clean = run_contract(leaky, "Custom::Db", {"Name": "main", "Password": "hunter2-very-secret"})
    assert clean.passed  # without --secret the value is just a value


def test_slow_calls_fail_the_time_budget() -> None:
    report = run_contract(Slow(0.6), "Custom::Slow", {}, budget=0.3)
    assert verdicts(report)["time-budget"] == "FAIL"
    assert report.check("time-budget").detail == "1 call(s) still running after 0.3 s: Create"


def write(tmp_path: Path, name: str, value: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


@pytest.mark.slow
def test_cli_prints_a_table_and_exits_by_verdict(tmp_path: Path) -> None:
    create, update = write(tmp_path, "c.json", {"Name": "cli"}), write(tmp_path, "u.json", {"Name": "cli", "Times": 2})
    ok = subprocess.run([sys.executable, "-m", "crhelper.cli.contract", f"{GREETING}:provider", "--type", "Custom::Greeting",
                         "--properties", create, "--update", update], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert ok.returncode == 0, ok.stderr
    assert "  PASS  create-duplicate      both answered 'greeting-cli'" in ok.stdout
    assert ok.stdout.splitlines()[-1] == "PASSED: 11 of 11 checks passed or skipped"
    broken = subprocess.run([sys.executable, "-m", "crhelper.cli.contract", "tests/contract/contract_providers.py:broken",
                             "--type", "Custom::Thing", "--properties", create, "--json"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert broken.returncode == 1
    document = json.loads(broken.stdout)
    assert document["passed"] is False
    assert {c["name"] for c in document["checks"] if c["verdict"] == "FAIL"} >= {"create-duplicate", "delete-unknown"}


@pytest.mark.parametrize("args,message", [
    (["samples.nothing:provider", "--type", "Custom::X", "--properties", "{props}"], "cannot load samples.nothing:provider"),
    (["x:provider", "--type", "Custom::X", "--properties", "missing.json"], "--properties missing.json: cannot be read"),
    (["x:provider", "--type", "AWS::X", "--properties", "{props}"], "--type must be Custom::<Name>"),
])
def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    props = write(tmp_path, "p.json", {"Name": "x"})
    assert contract_main([a.replace("{props}", props) for a in args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("source,line,message,next_step", [
    ("x = 1\nx = (\n", 2, "SyntaxError: '(' was never closed", "fix the syntax at that line, then run again"),
    ("raise RuntimeError('boom at import\\nsecond line')\n", 1, "RuntimeError: boom at import ...",
     "the provider's module raised while being imported; fix it and run again (`python {path}` shows the traceback)"),
])
def test_cli_provider_that_fails_to_import_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   source: str, line: int, message: str,
                                                                   next_step: str) -> None:
    path = tmp_path / "bad_provider.py"
    path.write_text(source)
    props = write(tmp_path, "p.json", {"Name": "x"})
    code = contract_main([f"{path}:provider", "--type", "Custom::X", "--properties", props])
    err = capsys.readouterr().err
    assert code == 2
    # crhelper.loading.describe_load_failure, as `crhelper invoke` reports it: file:line: Error, then the next step
    assert err.splitlines() == [f"crhelper contract: cannot load {path}:provider: {path}:{line}: {message}",
                                f"  next: {next_step.format(path=path)}"]


class _RaisesWithTheEvent:
    """Raises with the whole event in its message, as careless provider code does."""

    def handle(self, event: dict[str, Any]) -> None:
        raise RuntimeError(f"cannot handle {event}")


def test_a_provider_error_quoting_the_event_does_not_put_the_response_url_in_the_report() -> None:
    report = run_contract(_RaisesWithTheEvent(), "Custom::Thing", {"Name": "x"}, budget=5)
    text = json.dumps(report.to_dict())
    assert "provider raised RuntimeError: cannot handle" in text
    assert "Signature=" not in text and "?<redacted>" in text


def test_cli_property_file_syntax_error_does_not_quote_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props = tmp_path / "p.yaml"
    props.write_text("Name: x\nPassword: s3cret-pw: y\n")
    assert contract_main([f"{GREETING}:provider", "--type", "Custom::Greeting", "--properties", str(props)]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON or YAML (mapping values are not allowed here at line 2" in err
    assert "s3cret-pw" not in err
