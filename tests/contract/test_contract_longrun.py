"""The contract's long-running and rollback-update checks: a provider answering InProgress is waited
for through its continuations (the in-process scheduler, a real ResponseURL server), and the rollback
Update ROS sends (the two property sets swapped) must give back the Create's id and Data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from contract_providers import name_locked, polling

from crhelper import Provider, Request, Result
from crhelper.contract import ContractReport, run_contract

REPO = Path(__file__).resolve().parents[2]
POLLED = {"Name": "p", "Calls": 3, "Delay": 0.1}


@pytest.fixture(autouse=True)
def stop_continuations() -> Iterator[None]:
    """A long operation left unfinished keeps polling on the provider's scheduler: stop it with the test."""
    yield
    polling.close()


def verdicts(report: ContractReport) -> dict[str, str]:
    return {c.name: c.verdict for c in report.checks}


def test_a_long_running_provider_passes_every_check_through_its_continuations() -> None:
    report = run_contract(polling, "Custom::Polled", POLLED, {**POLLED, "Calls": 2}, budget=10)
    assert report.passed, report.failures()
    assert set(verdicts(report).values()) == {"PASS"}
    detail = report.check("long-running").detail
    assert detail.startswith("answered once in ") and detail.endswith(
        ": 3 handler calls for 2 polls, state and attempt carried"), detail
    assert report.check("create-duplicate").detail == "both answered 'polled-p'"


def test_a_continuation_that_answers_twice_fails_long_running() -> None:
    report = run_contract(polling, "Custom::Polled", {**POLLED, "AnswerTwice": True}, budget=10)
    assert verdicts(report)["long-running"] == "FAIL"
    assert report.check("long-running").detail == (
        "2 answers reached the ResponseURL of one Create (exactly one is allowed; ROS takes the first)")


def test_a_long_operation_not_answered_within_the_budget_fails_long_running_and_time_budget() -> None:
    report = run_contract(polling, "Custom::Polled", {**POLLED, "Calls": 50}, budget=0.5)
    assert (verdicts(report)["long-running"], verdicts(report)["time-budget"]) == ("FAIL", "FAIL")
    assert report.check("long-running").detail.startswith("no answer within the time budget (0.5 s) after ")
    assert report.check("time-budget").detail.startswith("1 call(s) still running after 0.5 s: Create")


def test_a_provider_whose_update_refuses_the_change_back_fails_rollback_update() -> None:
    report = run_contract(name_locked, "Custom::Greeting", {"Name": "a"}, {"Name": "b"})
    assert verdicts(report)["rollback-update"] == "FAIL"
    assert report.check("rollback-update").detail == (
        "the rollback Update (properties swapped back) after the failed Update: FAILED (Name cannot change: it is "
        "part of the physical id; create a new resource instead), PhysicalResourceId 'greeting-a'")


def test_the_rollback_safe_sample_passes_rollback_update_after_its_refused_name_change() -> None:
    from crhelper.loading import load_provider

    sample = load_provider(f"{REPO / 'samples' / 'greeting.py'}:provider")
    report = run_contract(sample, "Custom::Greeting", {"Name": "a", "Times": 2}, {"Name": "b", "Times": 2})
    assert verdicts(report)["update-keeps-id"] == "FAIL"  # the refusal itself, as the sample intends
    assert verdicts(report)["rollback-update"] == "PASS", report.check("rollback-update").detail
    assert report.check("rollback-update").detail == (
        "the rollback Update (properties swapped back) after the failed Update kept 'greeting-a' and the Create's Data")


def _revisions() -> Provider:
    """Counts its updates in Data: the rollback answers a revision the Create never had."""
    provider = Provider()
    revision = [1]

    @provider.create("Custom::Revised")
    def create(props: dict, request: Request) -> Result:
        return Result(physical_id="revised-1", data={"Revision": revision[0], "Name": props["Name"]})

    @provider.update("Custom::Revised")
    def update(props: dict, old: dict, request: Request) -> Result:
        revision[0] += 1
        return Result(data={"Revision": revision[0], "Name": props["Name"]})

    return provider


def test_rollback_update_names_the_data_that_differs_from_the_create() -> None:
    report = run_contract(_revisions(), "Custom::Revised", {"Name": "a"}, {"Name": "b"})
    assert verdicts(report)["update-keeps-id"] == "PASS"
    assert report.check("rollback-update").detail == (
        "the rollback Update (properties swapped back) after the Update answered Data other than the Create's: "
        "Data.Revision changed")


def write(tmp_path: Path, name: str, value: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


@pytest.mark.slow  # a real `crhelper contract` process waiting out a long operation
def test_cli_contract_of_a_long_running_provider(tmp_path: Path) -> None:
    create, update = write(tmp_path, "c.json", POLLED), write(tmp_path, "u.json", {**POLLED, "Calls": 2})
    result = subprocess.run([sys.executable, "-m", "crhelper.cli.main", "contract", "tests/contract/contract_providers.py:polling",
                             "--type", "Custom::Polled", "--properties", create, "--update", update, "--budget", "10"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("  PASS  long-running  ") and line.endswith("3 handler calls for 2 polls, state and "
                                                                           "attempt carried") for line in lines), lines
    assert "  PASS  rollback-update  " in result.stdout
    assert lines[-1] == "PASSED: 11 of 11 checks passed or skipped"
